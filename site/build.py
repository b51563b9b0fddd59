"""Build the course's static website from chapters/ without executing anything (`make site`).

One page per chapter (nbconvert's lab template: the saved outputs, plots, SVG graphs) and an index
with each chapter's question, time and launch links (Binder, Colab, Kaggle from
autogradlab.release.launch, the one place the course's address lives). Everything the pages load
is copied next to them, so the site works offline and from any static host:

- MathJax 3, RequireJS and the Jupyter widgets HTML manager (site/package.json, exact versions,
  installed by npm into build/site-node); the manager draws every widget from the widget state
  saved in the notebook.

Run in .venv-site (requirements-site.txt): ``python site/build.py --out build/site``.
"""

from __future__ import annotations

import argparse
import html
import importlib.util
import json
import re
import shutil
from pathlib import Path

import nbformat
from nbconvert import HTMLExporter

ROOT = Path(__file__).resolve().parent.parent
NODE = ROOT / "build" / "site-node" / "node_modules"
ASSETS = "assets"


def _launch():
    """autogradlab/release/launch.py loaded by path: the site's venv does not install the package (or torch)."""
    spec = importlib.util.spec_from_file_location("launch", ROOT / "widgets" / "autogradlab" / "release" / "launch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


launch = _launch()


def copy_assets(out: Path) -> None:
    """MathJax, RequireJS and the widgets' HTML manager, next to the pages (no CDN)."""
    assets = out / ASSETS
    assets.mkdir(parents=True, exist_ok=True)
    mathjax = NODE / "mathjax" / "es5" / "tex-svg-full.js"
    manager = NODE / "@jupyter-widgets" / "html-manager" / "dist"
    require = NODE / "requirejs" / "require.js"
    if not (manager.is_dir() and require.is_file() and mathjax.is_file()):
        raise SystemExit(
            f"site: {NODE} lacks MathJax, the widget manager or RequireJS: run `make site` (it runs npm install)"
        )
    shutil.copy(mathjax, assets / "tex-svg-full.js")
    shutil.copytree(
        manager, assets / "html-manager", dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.map", "embed.js*")
    )
    shutil.copy(require, assets / "require.js")


def chapter_title(nb) -> tuple[str, str, str]:
    """The chapter's title, its question and its estimated time, from its first cell."""
    source = nb.cells[0].source
    title = source.splitlines()[0].lstrip("# ").strip()
    question = re.search(r"\*\*The question this chapter answers:\*\*\s*\*(.+?)\*", source)
    minutes = re.search(
        r"\*Estimated time: about (\d+) minutes\.\*", "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    )
    return title, question.group(1) if question else "", minutes.group(1) if minutes else ""


def launch_links(name: str) -> str:
    links = " · ".join(
        f'<a class="launch" href="{html.escape(url)}">Open in {k}</a>' for k, url in launch.launch_urls(name).items()
    )
    return f'<span class="launch-links">{links}</span>'


def _nav(name: str, previous: str | None, following: str | None) -> str:
    parts = ['<a href="index.html">All chapters</a>']
    if previous:
        parts.append(f'<a href="{previous[:-6]}.html">← previous</a>')
    if following:
        parts.append(f'<a href="{following[:-6]}.html">next →</a>')
    return f'<nav class="site-nav">{" · ".join(parts)} <span style="float:right">{launch_links(name)}</span></nav>'


# MathJax 3 (one file: every TeX extension, SVG output, no web fonts to fetch) in place of the
# MathJax 2 from a CDN that nbconvert's template loads; the same delimiters as JupyterLab.
# The widgets' HTML manager loads after it (on DOMContentLoaded), when MathJax.Hub is set.
MATHJAX = f"""<script>
window.MathJax = {{
  tex: {{inlineMath: [["$", "$"], ["\\\\(", "\\\\)"]], displayMath: [["$$", "$$"], ["\\\\[", "\\\\]"]],
        processEscapes: true, processEnvironments: true, tags: "ams"}},
  svg: {{fontCache: "global"}},
  startup: {{
    ready() {{
      MathJax.startup.defaultReady();
      // The widgets' HTML manager typesets labels through MathJax 2's API: answer it with MathJax 3.
      MathJax.Hub = {{Queue(job) {{
        const element = Array.isArray(job) ? job[2] : undefined;
        MathJax.startup.promise = MathJax.startup.promise.then(() => MathJax.typesetPromise(element ? [element] : undefined));
      }}}};
    }}
  }}
}};
</script>
<script src="{ASSETS}/tex-svg-full.js" defer></script>"""
MATHJAX_BLOCK = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.S)

STYLE = """<style>
.site-nav { font-family: sans-serif; padding: 8px 16px; border-bottom: 1px solid #dee2e6; background: #f8f9fa; }
.site-nav a { color: #0b5ed7; text-decoration: none; }
</style>"""


def render_chapter(path: Path, exporter: HTMLExporter, previous: str | None, following: str | None) -> str:
    nb = nbformat.read(path, as_version=4)
    # The badges are images on the badge services' hosts: on an offline page they would be broken
    # images, so the site shows the same three links as text in its navigation bar instead.
    nb.cells[0].source = nb.cells[0].source.replace(launch.badges(path.name), "")
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": chapter_title(nb)[0]}})
    body, swapped = MATHJAX_BLOCK.subn(lambda _: MATHJAX, body)
    if swapped != 1:
        raise SystemExit(f"site: nbconvert's MathJax block not found in {path.name}: its template changed")
    return body.replace("</head>", STYLE + "</head>", 1).replace(
        re.search(r"<body[^>]*>", body).group(0),
        re.search(r"<body[^>]*>", body).group(0) + _nav(path.name, previous, following),
        1,
    )


def render_index(chapters: list[Path]) -> str:
    rows = []
    for path in chapters:
        title, question, minutes = chapter_title(nbformat.read(path, as_version=4))
        time = f"about {minutes} min" if minutes else ""
        rows.append(
            f'<li><a href="{path.stem}.html">{html.escape(title)}</a> <small>{time}</small><br>'
            f"<em>{html.escape(question)}</em><br>{launch_links(path.name)}</li>"
        )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Autograd Lab</title>
<style>
body {{ font-family: sans-serif; max-width: 52rem; margin: 2rem auto; padding: 0 1rem; line-height: 1.5; color: #212529; }}
li {{ margin-bottom: 1rem; }} a {{ color: #0b5ed7; }} .launch-links {{ font-size: 0.9em; }}
</style></head>
<body>
<h1>Autograd Lab</h1>
<p>An interactive course on how PyTorch autograd and the training loop really work. These pages show each
chapter as it was last run; to run the code and move the widgets, open a chapter in Binder, Colab or Kaggle,
or on your machine (see the repository's README).</p>
<ol>
{chr(10).join(rows)}
</ol>
<p><small>Code: MIT licence. Course text: CC BY-SA 4.0.
<a href="https://github.com/{launch.REPOSITORY}/tree/{launch.RELEASE_TAG}">Source at {launch.RELEASE_TAG}</a>.</small></p>
</body></html>
"""


def build(out: Path, chapters_dir: Path = ROOT / "chapters") -> list[Path]:
    """Write the site into ``out``; return the pages written (index first)."""
    out.mkdir(parents=True, exist_ok=True)
    copy_assets(out)
    exporter = HTMLExporter(
        template_name="lab",
        require_js_url=f"{ASSETS}/require.js",
        widget_renderer_url=f"{ASSETS}/html-manager/embed-amd.js",
    )
    chapters = sorted(chapters_dir.glob("[0-9][0-9]_*.ipynb"))
    pages = [out / "index.html"]
    pages[0].write_text(render_index(chapters), encoding="utf-8")
    for i, path in enumerate(chapters):
        previous = chapters[i - 1].name if i else None
        following = chapters[i + 1].name if i + 1 < len(chapters) else None
        page = out / f"{path.stem}.html"
        page.write_text(render_chapter(path, exporter, previous, following), encoding="utf-8")
        pages.append(page)
    (out / "pages.json").write_text(json.dumps([p.name for p in pages], indent=1), encoding="utf-8")
    return pages


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "site")
    parser.add_argument("--chapters", type=Path, default=ROOT / "chapters")
    args = parser.parse_args(argv)
    pages = build(args.out, args.chapters)
    print(f"site: {len(pages)} pages in {args.out} (open {args.out / 'index.html'})")


if __name__ == "__main__":
    main()
