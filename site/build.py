"""Build the course's static website without executing anything (`make site`).

One page per chapter, rendered by nbconvert from ``solutions/`` (the executed source, so every
stored output is there, chapters 00 and 06's views included) with the site's template
(site/templates/course):

- Predict answers folded: the output of each cell tagged ``answers-prediction`` opens on a click;
  solutions collapsed: each exercise's solution cell opens on a click (hidden tests are dropped);
  ``--no-solutions`` shows the learner's stubs instead (a class whose exercises are graded).
- Every view drawn as the picture its output carries (``autogradlab.views.static``): the widget
  entry and the notebook's widget state are left out, so nothing pretends to be live.
- A header on every page with search (an index of every section, ``assets/search-index.js``,
  searched in the browser) and a table of contents (every chapter, the current one's sections).
- Per page: *Open in Binder / Colab / Kaggle* (autogradlab.release.launch, the one place the
  course's address lives) and a download of the chapter's student notebook (``notebooks/``).
- The Chinese edition under ``zh/`` (when chapters-zh/ exists): the same pages from the same executed
  notebooks, each markdown cell replaced by its translation from chapters-zh/ (the release's output,
  matched by cell id; code is identical in both editions), with its own index, contents and search
  (``assets/search-index-zh.js``), ``<html lang="zh-CN">``, and the zh chapters' launch links and
  downloads. Every page links to the same chapter in the other edition (English ↔ 中文).

Everything a page loads is next to it (MathJax 3 from npm, site/package.json, exact versions,
installed by ``make site`` into build/site-node), so the site works offline and from any host.
Run in .venv-site (requirements-site.txt): ``python site/build.py --out build/site``.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import sys
from html.parser import HTMLParser
from pathlib import Path

import nbformat
from nbconvert import HTMLExporter

ROOT = Path(__file__).resolve().parent.parent
NODE = ROOT / "build" / "site-node" / "node_modules"
ASSETS = "assets"
NOTEBOOKS = "notebooks"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
STATIC_CLASS = "autogradlab-static"  # autogradlab.views.static.STATIC_CLASS (the site's venv has no ipywidgets)
PREDICT_TAG = "answers-prediction"
HIDDEN_TESTS = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS[ \t]*\n?", re.S | re.M)
SOLUTION_MARKS = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", re.M)

sys.path.insert(0, str(ROOT / "widgets"))  # release.launch needs only nbformat: the site's venv lacks torch
from autogradlab.release import launch  # noqa: E402


def mathjax(assets: str) -> str:
    """MathJax 3 (one file: every TeX extension, SVG output, no web fonts to fetch) in place of the MathJax 2
    from a CDN that nbconvert's template loads; the same delimiters as JupyterLab."""
    return f"""<script>
window.MathJax = {{
  tex: {{inlineMath: [["$", "$"], ["\\\\(", "\\\\)"]], displayMath: [["$$", "$$"], ["\\\\[", "\\\\]"]],
        processEscapes: true, processEnvironments: true, tags: "ams"}},
  svg: {{fontCache: "global"}}
}};
</script>
<script src="{assets}/tex-svg-full.js" defer></script>"""


# Each edition's words: its folder under the site, <html lang>, how the chapter's first cell states its
# question and time, and every label the site itself writes.
WORDS = {
    "en": {
        "folder": "",
        "html_lang": "en",
        "switch": "English",
        "question": r"\*\*The question this chapter answers:\*\*\s*\*(.+?)\*",
        "minutes": r"\*Estimated time: about (\d+) minutes\.\*",
        "about": "about {} min",
        "intro": """<p class="agl-intro">This page shows the chapter as it was last run{folded}.
Views are saved pictures and nothing runs here: to run the code and move the controls, open the
chapter in Binder, Colab or Kaggle, or download it.</p>""",
        "folded": ", its solutions folded",
        "solution": "Show a solution",
        "answer": "Show the output (predict first)",
        "search": "Search the course",
        "none": "No section holds every word of “{q}”.",
        "open_in": "Open in {}",
        "contents": "Table of contents",
        "index": """<h1>Autograd Lab</h1>
<p>An interactive course on how PyTorch autograd and the training loop really work. These pages show each
chapter as it was last run, with its solutions folded and every view as a saved picture; to run the code
and move the views' controls, open a chapter in Binder, Colab or Kaggle, or download it and run it on your
machine (see the repository's README).</p>""",
        "licence": "Code: MIT licence. Course text: CC BY-SA 4.0.",
        "source": "Source at {}",
    },
    "zh": {
        "folder": "zh/",
        "html_lang": "zh-CN",
        "switch": "中文",
        "question": r"\*\*本章回答的问题：\*\*\s*\*(.+?)\*",
        "minutes": r"\*预计用时：约 (\d+) 分钟。\*",
        "about": "约 {} 分钟",
        "intro": (  # Chinese text on one line: a line break inside it would show as a space
            '<p class="agl-intro">本页是本章最后一次运行时的样子{folded}。输出保存自英文版的运行，所以检查结果等课程 '
            "package 的信息是英文的；视图是保存下来的图片，这里什么都不运行。要运行代码、拖动控件（package 的信息会是"
            "中文），请在 Binder、Colab 或 Kaggle 中打开本章，或下载后运行。</p>"
        ),
        "folded": "，参考答案已折叠",
        "solution": "查看参考答案",
        "answer": "查看输出（先做预测）",
        "search": "搜索课程",
        "none": "没有哪一节同时包含 “{q}” 的每个词。",
        "open_in": "在 {} 中打开",
        "contents": "目录",
        "index": (
            "<h1>Autograd Lab（中文版）</h1>\n<p>一门交互式课程，讲清楚 PyTorch 的 autograd 和训练循环到底在做什么。"
            "这些页面是每一章最后一次运行时的样子：参考答案已折叠，视图是保存下来的图片。要运行代码、拖动视图的控件，"
            "请在 Binder、Colab 或 Kaggle 中打开一章，或下载后在自己的机器上运行（见仓库的 README.zh.md）。</p>"
        ),
        "licence": "代码：MIT 许可证。课程文字：CC BY-SA 4.0。",
        "source": "{} 版本的源代码",
    },
}


def copy_assets(out: Path, exporter: HTMLExporter) -> None:
    """MathJax, JupyterLab's page style (once, not in every page), the site's style and search script."""
    assets = out / ASSETS
    shutil.rmtree(assets, ignore_errors=True)  # no stale script of an earlier build left behind
    assets.mkdir(parents=True)
    script = NODE / "mathjax" / "es5" / "tex-svg-full.js"
    if not script.is_file():
        raise SystemExit(f"site: {NODE} lacks MathJax: run `make site` (it runs npm ci)")
    shutil.copy(script, assets / "tex-svg-full.js")
    lab = next(Path(p) for p in exporter.template_paths if (Path(p) / "static" / "index.css").is_file())
    (assets / "lab.css").write_text(
        "\n".join((lab / "static" / name).read_text(encoding="utf-8") for name in ("index.css", "theme-light.css")),
        encoding="utf-8",
    )
    for name in ("site.css", "search.js"):
        shutil.copy(Path(__file__).parent / name, assets / name)


def chapter_title(nb, lang: str = "en") -> tuple[str, str, str]:
    """The chapter's title, its question and its estimated time, from its first cell."""
    source, words = nb.cells[0].source, WORDS[lang]
    title = source.splitlines()[0].lstrip("# ").strip()
    question = re.search(words["question"], source)
    minutes = re.search(words["minutes"], "\n".join(c.source for c in nb.cells if c.cell_type == "markdown"))
    return title, question.group(1) if question else "", minutes.group(1) if minutes else ""


def site_notebook(path: Path, student: Path | None = None, translated: Path | None = None) -> nbformat.NotebookNode:
    """The site's copy of a solutions notebook: views as their pictures, solution markers and hidden tests gone.

    With ``student`` (the chapter's student notebook) each solution cell is the learner's stub instead and
    the checks' outputs are cleared: a site for a class whose exercises are graded. With ``translated`` (the
    chapter in chapters-zh/), every markdown cell is that chapter's cell of the same id, less the badge line
    the release puts under the title.
    """
    nb = nbformat.read(path, as_version=4)
    stubs = {c.id: c for c in nbformat.read(student, as_version=4).cells} if student else {}
    nb.metadata.pop("widgets", None)
    # "ipython" is the IPython lexer's alias in ipython_pygments_lexers; nbconvert's own "ipython3" path
    # imports IPython itself (not in this venv) and warns on every build.
    nb.metadata.setdefault("language_info", {})["pygments_lexer"] = "ipython"
    if translated:
        prose = {c.id: c.source for c in nbformat.read(translated, as_version=4).cells if c.cell_type == "markdown"}
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                if cell.id not in prose:
                    raise SystemExit(f"site: {translated} has no cell {cell.id}: run the release (make release)")
                cell.source = prose[cell.id]
        badges = f"\n\n{launch.badges(path.name, 'zh')}\n"
        nb.cells[0].source = nb.cells[0].source.replace(badges, "\n", 1)
    for i, cell in enumerate(nb.cells):
        grader = cell.metadata.get("nbgrader", {})
        if grader.get("solution"):
            cell = nb.cells[i] = stubs[cell.id] if student else cell
            cell.source = SOLUTION_MARKS.sub("", HIDDEN_TESTS.sub("", cell.source))
        if student and (grader.get("solution") or grader.get("grade")) and cell.cell_type == "code":
            cell.outputs = []
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if WIDGET_VIEW in data:
                if STATIC_CLASS not in data.get("text/html", ""):
                    raise SystemExit(f"site: {path.name}: a widget output without a static picture (StaticFallback)")
                del data[WIDGET_VIEW]
    return nb


class Sections(HTMLParser):
    """A rendered page read back: its headings (level, id, text) and the text of each section, for search."""

    INDEXED = ("jp-MarkdownCell", "jp-InputArea")  # prose and code; outputs would give Predict answers away

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.sections: list[dict] = []
        self._depth = 0
        self._inside: int | None = None  # div depth of the cell part being indexed
        self._heading: dict | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "div":
            self._depth += 1
            if self._inside is None and any(c in (attrs.get("class") or "") for c in self.INDEXED):
                self._inside = self._depth
        elif tag in ("h1", "h2", "h3") and attrs.get("id"):
            self._heading = {"level": int(tag[1]), "id": attrs["id"], "title": "", "text": ""}
            self.sections.append(self._heading)
        elif tag == "a" and self._heading is not None and "anchor-link" in (attrs.get("class") or ""):
            self._heading["_anchor"] = True  # nbconvert's ¶ link: not part of the title

    def handle_endtag(self, tag):
        if tag == "div":
            if self._inside == self._depth:
                self._inside = None
            self._depth -= 1
        elif tag in ("h1", "h2", "h3") and self._heading is not None:
            self._heading.pop("_anchor", None)
            self._heading["title"] = " ".join(self._heading["title"].split())
            self._heading = None

    def handle_data(self, data):
        if self._heading is not None:
            if not self._heading.get("_anchor"):
                self._heading["title"] += data
        elif self._inside is not None and self.sections:
            self.sections[-1]["text"] += data

    @classmethod
    def of(cls, page: str) -> list[dict]:
        parser = cls()
        parser.feed(page)
        for section in parser.sections:
            section["text"] = " ".join(section["text"].split())
        return parser.sections


def launch_links(name: str, lang: str = "en") -> str:
    urls = launch.launch_urls(name, lang)
    links = [f'<a class="agl-launch" href="{html.escape(url)}">{k}</a>' for k, url in urls.items()]
    download = f'<a class="agl-download" href="{NOTEBOOKS}/{name}" download>.ipynb</a>'
    return f'<span class="agl-links">{WORDS[lang]["open_in"].format(" · ".join(links))} · {download}</span>'


def switch(page: str, lang: str) -> str:
    """Links to the same page (``page``: the chapter's page or index.html) in every other edition."""
    up = "../" * WORDS[lang]["folder"].count("/")
    return " ".join(
        f'<a class="agl-lang" href="{up}{words["folder"]}{page}" hreflang="{words["html_lang"]}" '
        f'lang="{words["html_lang"]}">{words["switch"]}</a>'
        for other, words in WORDS.items()
        if other != lang
    )


def header(name: str | None, lang: str = "en", editions: bool = True) -> str:
    """The bar on top of every page: home, search, the other edition, and the chapter's launch and download links."""
    words = WORDS[lang]
    links = launch_links(name, lang) if name else ""
    other = switch(f"{Path(name).stem}.html" if name else "index.html", lang) if editions else ""
    return f"""<header class="agl-header">
<a class="agl-home" href="index.html">Autograd Lab</a>
<span class="agl-search"><input type="search" id="agl-search" placeholder="{words["search"]}" autocomplete="off"
 aria-label="{words["search"]}"><span id="agl-results" role="listbox" data-none="{html.escape(words["none"])}"></span></span>
{other}
{links}
</header>"""


def sidebar(chapters: list[dict], current: str | None, sections: list[dict], lang: str = "en") -> str:
    """The table of contents: every chapter; under the current one, its sections."""
    items = []
    for chapter in chapters:
        here = chapter["page"] == current
        entry = f'<a href="{chapter["page"]}"{" aria-current=page" if here else ""}>{html.escape(chapter["title"])}</a>'
        if here:
            subs = "".join(
                f'<li class="agl-toc-h{s["level"]}"><a href="#{html.escape(s["id"])}">{html.escape(s["title"])}</a></li>'
                for s in sections
                if s["level"] > 1
            )
            entry += f"<ul>{subs}</ul>"
        items.append(f"<li{' class=agl-current' if here else ''}>{entry}</li>")
    return f'<nav class="agl-toc" aria-label="{WORDS[lang]["contents"]}"><ul>{"".join(items)}</ul></nav>'


def _assets(lang: str) -> str:
    """The assets folder, relative to a page of the ``lang`` edition."""
    return "../" * WORDS[lang]["folder"].count("/") + ASSETS


def _search_index(lang: str) -> str:
    return "search-index.js" if lang == "en" else f"search-index-{lang}.js"


def render_chapter(
    nb,
    name: str,
    exporter: HTMLExporter,
    chapters: list[dict],
    solutions: bool = True,
    lang: str = "en",
    editions: bool = True,
) -> tuple[str, list[dict]]:
    """The chapter's page and its sections (for the search index)."""
    words, assets = WORDS[lang], _assets(lang)
    site = {
        "assets": assets,
        "mathjax": mathjax(assets),
        "search_index": f"{assets}/{_search_index(lang)}",
        "header": header(name, lang, editions),
        "sidebar": "<!--agl-toc-->",
        "intro": words["intro"].format(folded=words["folded"] if solutions else ""),
        "solutions": solutions,
        "show_solution": words["solution"],
        "show_answer": words["answer"],
    }
    body, _ = exporter.from_notebook_node(
        nb, resources={"metadata": {"name": chapter_title(nb, lang)[0]}, "site": site}
    )
    # nbconvert's language_code trait takes ISO 639-1 codes only ("zh", not "zh-CN"): the page's lang is set here
    body = body.replace(f'<html lang="{exporter.language_code}">', f'<html lang="{words["html_lang"]}">', 1)
    sections = Sections.of(body)
    return body.replace("<!--agl-toc-->", sidebar(chapters, f"{Path(name).stem}.html", sections, lang), 1), sections


def render_index(chapters: list[dict], lang: str = "en", editions: bool = True) -> str:
    words, assets = WORDS[lang], _assets(lang)
    rows = []
    for chapter in chapters:
        time = words["about"].format(chapter["minutes"]) if chapter["minutes"] else ""
        rows.append(
            f'<li><a href="{chapter["page"]}">{html.escape(chapter["title"])}</a> <small>{time}</small><br>'
            f"<em>{html.escape(chapter['question'])}</em><br>{launch_links(chapter['name'], lang)}</li>"
        )
    source = f"https://github.com/{launch.REPOSITORY}/tree/{launch.RELEASE_TAG}"
    return f"""<!DOCTYPE html>
<html lang="{words["html_lang"]}"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Autograd Lab</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="{assets}/site.css">
</head>
<body class="agl-page agl-index">
{header(None, lang, editions)}
<main>
{words["index"]}
<ol class="agl-chapters">
{chr(10).join(rows)}
</ol>
<p><small>{words["licence"]}
<a href="{source}">{words["source"].format(launch.RELEASE_TAG)}</a>.</small></p>
</main>
<script src="{assets}/{_search_index(lang)}" defer></script>
<script src="{assets}/search.js" defer></script>
</body></html>
"""


def build_edition(
    out: Path,
    lang: str,
    solutions_dir: Path,
    chapters_dir: Path,
    exporter: HTMLExporter,
    solutions: bool,
    editions: bool,
) -> list[Path]:
    """Write one edition's pages into ``out`` (its folder), its notebooks and its search index; return its pages."""
    out.mkdir(parents=True, exist_ok=True)
    (out / NOTEBOOKS).mkdir(exist_ok=True)
    chapters = []
    for path in sorted(solutions_dir.glob("[0-9][0-9]_*.ipynb")):
        if not (chapters_dir / path.name).is_file():
            raise SystemExit(f"site: {chapters_dir / path.name} is missing: run the release (make release)")
        student = chapters_dir / path.name
        nb = site_notebook(path, None if solutions else student, student if lang != "en" else None)
        title, question, minutes = chapter_title(nb, lang)
        page = {"name": path.name, "page": f"{path.stem}.html", "title": title, "question": question}
        chapters.append(page | {"minutes": minutes, "nb": nb})
        shutil.copy(student, out / NOTEBOOKS / path.name)  # the learner's copy, to download
    pages, index = [out / "index.html"], []
    for chapter in chapters:
        nb = chapter.pop("nb")
        body, sections = render_chapter(nb, chapter["name"], exporter, chapters, solutions, lang, editions)
        (out / chapter["page"]).write_text(body, encoding="utf-8")
        pages.append(out / chapter["page"])
        index += [
            {
                "page": chapter["page"],
                "id": s["id"],
                "title": s["title"],
                "chapter": chapter["title"],
                "text": s["text"],
            }
            for s in sections
        ]
    pages[0].write_text(render_index(chapters, lang, editions), encoding="utf-8")
    (out.parent if lang != "en" else out).joinpath(ASSETS, _search_index(lang)).write_text(
        f"window.AGL_SEARCH = {json.dumps(index, ensure_ascii=False)};\n", encoding="utf-8"
    )
    return pages


def build(
    out: Path,
    solutions_dir: Path = ROOT / "solutions",
    chapters_dir: Path = ROOT / "chapters",
    solutions: bool = True,
    chapters_zh: Path | None = ROOT / launch.EDITIONS["zh"][0],
) -> list[Path]:
    """Write the site into ``out``; return the pages written (index first). ``solutions=False``: the learner's stubs.

    The Chinese edition goes under ``out/zh/`` when ``chapters_zh`` is a folder (a fork without it gets the English
    pages only, with no language switch).
    """
    out.mkdir(parents=True, exist_ok=True)
    exporter = HTMLExporter(template_name="course", extra_template_basedirs=[str(Path(__file__).parent / "templates")])
    copy_assets(out, exporter)
    editions = chapters_zh is not None and chapters_zh.is_dir()
    shutil.rmtree(out / WORDS["zh"]["folder"], ignore_errors=True)  # no page of an earlier build left behind
    pages = build_edition(out, "en", solutions_dir, chapters_dir, exporter, solutions, editions)
    if editions:
        pages += build_edition(out / "zh", "zh", solutions_dir, chapters_zh, exporter, solutions, editions)
    (out / "pages.json").write_text(
        json.dumps([p.relative_to(out).as_posix() for p in pages], indent=1), encoding="utf-8"
    )
    return pages


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "site")
    parser.add_argument("--solutions", type=Path, default=ROOT / "solutions")
    parser.add_argument("--chapters", type=Path, default=ROOT / "chapters")
    parser.add_argument("--chapters-zh", type=Path, default=ROOT / launch.EDITIONS["zh"][0])
    parser.add_argument(
        "--no-solutions", action="store_true", help="show the learner's stubs, not the solutions (graded classes)"
    )
    args = parser.parse_args(argv)
    pages = build(args.out, args.solutions, args.chapters, not args.no_solutions, args.chapters_zh)
    print(f"site: {len(pages)} pages in {args.out} (open {args.out / 'index.html'})")


if __name__ == "__main__":
    main()
