"""The static website (`make site`): build it into a temporary folder, check each feature, open every page in Chromium.

Features (site/build.py): a search over every section, a table of contents on every page, Predict answers
folded (click to reveal), solutions collapsed, every stored view drawn as its saved picture, launch and
.ipynb download links per page, a build without warnings. The Chinese edition under zh/ has all of these
too, from chapters-zh/'s prose (`<html lang="zh-CN">`, a Chinese index, its own search index), and every
page of either edition links to the same chapter in the other. In the browser, offline as a reader without
a network would see it (every request that leaves 127.0.0.1 is refused and fails the test), every page of
both editions: no console errors, every image loaded, math typeset by MathJax with no raw `$$` left and no
MathJax error.

Skips with a reason when .venv-site, Chromium or Playwright is missing, unless REQUIRE_BROWSER=1.
"""

from __future__ import annotations

import functools
import html
import http.server
import json
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import nbformat
import pytest
from chromium import chromium_context, missing
from student_run import CJK, DRAWN, NO_FONT

ROOT = Path(__file__).resolve().parent.parent
SITE_PYTHON = ROOT / ".venv-site" / "bin" / "python"
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
PAGES = [p.stem for p in SOLUTIONS]
# Each edition: the folder of its pages in the site and the chapters its downloads are.
EDITIONS = {"en": ("", ROOT / "chapters"), "zh": ("zh/", ROOT / "chapters-zh")}
ALL_PAGES = [f"{folder}{p}" for folder, _ in EDITIONS.values() for p in PAGES]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _missing() -> str | None:
    if not (ROOT / ".venv-site" / ".installed").is_file():
        return ".venv-site is missing: run `make site` (make test builds it)"
    return missing()


MISSING = _missing()
if MISSING and os.environ.get("REQUIRE_BROWSER") == "1":
    raise RuntimeError(f"REQUIRE_BROWSER=1 but the site test cannot run: {MISSING}")
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"site test skipped: {MISSING}")


def build_site(out: Path, *args: str) -> str:
    """Run `site/build.py --out OUT ARGS` in the site's venv (warnings shown); return what it printed on stderr."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    command = [str(SITE_PYTHON), "-W", "default", "site/build.py", "--out", str(out), *args]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stderr


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, str]:
    """The site, built once: (its folder, what the build printed on stderr)."""
    out = tmp_path_factory.mktemp("site")
    start = time.monotonic()
    stderr = build_site(out)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"\nsite: built in {time.monotonic() - start:.1f} s, {size / 2**20:.1f} MiB")
    return out, stderr


@pytest.fixture(scope="module")
def site(built) -> Path:
    return built[0]


def _page(site: Path, name: str) -> str:
    return (site / f"{name}.html").read_text(encoding="utf-8")


def _stored(path: Path) -> dict:
    """What the solutions notebook holds that the page must show."""
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    return {
        "answers": sum(1 for c in code if "answers-prediction" in c.metadata.get("tags", []) and c.outputs),
        "solutions": sum(1 for c in code if c.metadata.get("nbgrader", {}).get("solution")),
        "views": sum(1 for c in code for o in c.outputs if WIDGET_VIEW in o.get("data", {})),
        "figures": sum(1 for c in code for o in c.outputs if {"image/png", "image/svg+xml"} & set(o.get("data", {}))),
        "math": any("$" in c.source for c in nb.cells if c.cell_type == "markdown"),
        "sections": sum(
            1
            for c in nb.cells
            if c.cell_type == "markdown"
            for line in c.source.splitlines()
            if re.match(r"#{2,3} ", line)
        ),
    }


def test_builds_without_warnings(built):
    assert not built[1].strip(), f"the build printed on stderr:\n{built[1]}"


def test_an_index_and_a_page_per_chapter_with_launch_and_download_links(site):
    assert json.loads((site / "pages.json").read_text()) == [
        f"{folder}{p}.html" for folder, _ in EDITIONS.values() for p in ["index", *PAGES]
    ]
    for folder, chapters in EDITIONS.values():
        index = _page(site, f"{folder}index")
        for name in PAGES:
            assert f'href="{name}.html"' in index
            page = _page(site, f"{folder}{name}")
            for host in ("mybinder.org", "colab.research.google.com", "kaggle.com"):
                assert host in page, f"{folder}{name}: no launch link to {host}"
            assert f"{chapters.name}%2F{name}.ipynb" in page, f"{folder}{name}: launch links to another edition"
            link = re.search(rf'<a [^>]*href="notebooks/{name}.ipynb"[^>]*>', page)
            assert link and "download" in link.group(0), f"{folder}{name}: no download link"
            assert (site / folder / "notebooks" / f"{name}.ipynb").read_bytes() == (
                chapters / f"{name}.ipynb"
            ).read_bytes()
            assert not re.search(r"""<(script|link)[^>]+(src|href)=["']https?://""", page), (
                f"{name}: loads from the web"
            )


def _lang_and_switch(page: str) -> tuple[str, list[str]]:
    """A page's <html lang> and where its language switch leads."""
    lang = re.search(r'<html lang="([^"]+)"', page).group(1)
    return lang, re.findall(r'<a class="agl-lang" href="([^"]+)"', page)


def test_every_page_says_its_language_and_links_to_the_same_page_in_the_other_edition(site):
    for name in ["index", *PAGES]:
        assert _lang_and_switch(_page(site, name)) == ("en", [f"zh/{name}.html"]), name
        assert _lang_and_switch(_page(site, f"zh/{name}")) == ("zh-CN", [f"../{name}.html"]), name


def test_the_chinese_pages_are_the_chinese_chapters(site):
    """Each zh page: chapters-zh's title, question and headings, the Chinese labels, no badge line; the index in Chinese."""
    index = _page(site, "zh/index")
    assert "<h1>Autograd Lab（中文版）</h1>" in index and "在 <a" in index
    for name in PAGES:
        nb = nbformat.read(ROOT / "chapters-zh" / f"{name}.ipynb", as_version=4)
        title = nb.cells[0].source.splitlines()[0].lstrip("# ").strip()
        question = re.search(r"\*\*本章回答的问题：\*\*\s*\*(.+?)\*", nb.cells[0].source).group(1)
        page = _page(site, f"zh/{name}")
        assert f"<title>{html.escape(title)}</title>" in page and html.escape(title) in index, name
        assert html.escape(question, quote=False) in index, f"{name}: the index lacks the chapter's question"
        assert "colab-badge.svg" not in page, f"{name}: the release's badge line is on the page"
        assert "预计用时" in page and "查看" in page and 'placeholder="搜索课程"' in page, name
        assert "Estimated time" not in page and "The question this chapter answers" not in page, name


def _index(site: Path, lang: str = "en") -> list[dict]:
    name = "search-index.js" if lang == "en" else f"search-index-{lang}.js"
    return json.loads((site / "assets" / name).read_text().split("=", 1)[1].rstrip().rstrip(";"))


def _search(site: Path, query: str, lang: str = "en") -> list[dict]:
    """The site's search, as search.js does it: sections holding every word."""
    words = query.lower().split()
    return [s for s in _index(site, lang) if all(w in (s["title"] + " " + s["text"]).lower() for w in words)]


def test_the_search_index_covers_every_chapter_and_finds_a_term(site):
    for lang, (folder, _) in EDITIONS.items():
        index = _index(site, lang)
        assert {s["page"] for s in index} == {f"{p}.html" for p in PAGES}
        for s in index:  # every hit leads to an anchor of its page
            assert f'id="{s["id"]}"' in _page(site, folder + s["page"][:-5]), s
        hits = _search(site, "retain_graph", lang)
        assert any(s["page"].startswith("03_") for s in hits) and len(hits) < len(index) / 3
        assert _search(site, "GradScaler unscale_", lang)
        assert not _search(site, "no-such-word-anywhere", lang)
    hits = _search(site, "计算图 张量", "zh")  # Chinese words, searched as substrings (no spaces between words)
    assert hits and not _search(site, "计算图 张量")


@pytest.mark.parametrize("folder", [folder for folder, _ in EDITIONS.values()])
def test_predict_answers_are_folded_and_solutions_collapsed(site, folder):
    for name, path in zip(PAGES, SOLUTIONS, strict=True):
        page, stored = _page(site, f"{folder}{name}"), _stored(path)
        assert page.count('<details class="agl-answer">') == stored["answers"], name
        assert page.count('<details class="agl-solution">') == stored["solutions"], name
        assert "<details open" not in page
        assert "### BEGIN SOLUTION" not in page and "HIDDEN TESTS" not in page


@pytest.mark.parametrize("folder", [folder for folder, _ in EDITIONS.values()])
def test_every_stored_view_is_its_saved_picture(site, folder):
    for name, path in zip(PAGES, SOLUTIONS, strict=True):
        page, stored = _page(site, f"{folder}{name}"), _stored(path)
        assert page.count('class="autogradlab-static"') == stored["views"], name
        assert WIDGET_VIEW not in page and "widget-state" not in page, f"{name}: a widget left for a manager to draw"
    for name in ("00_welcome", "06_training_step"):  # their views sit in Predict cells (folded)
        assert _stored(ROOT / "solutions" / f"{name}.ipynb")["views"] >= 1, name


def test_a_site_without_solutions_shows_the_learners_stubs(tmp_path):
    """``--no-solutions`` (a class whose exercises are graded): stubs in place of solutions, checks not run."""
    source = next(p for p in SOLUTIONS if _stored(p)["solutions"])
    (tmp_path / "solutions").mkdir()
    shutil.copy(source, tmp_path / "solutions")
    build_site(tmp_path / "site", "--no-solutions", "--solutions", str(tmp_path / "solutions"))
    nb = nbformat.read(source, as_version=4)
    solved = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    hidden = [line.strip() for c in solved for line in c.source.split("### BEGIN SOLUTION", 1)[1].splitlines()[1:3]]
    for folder, _ in EDITIONS.values():
        page = (tmp_path / "site" / folder / f"{source.stem}.html").read_text(encoding="utf-8")
        assert '<details class="agl-solution">' not in page and "NotImplementedError" in page, folder
        assert not any(html.escape(line) in page for line in hidden if len(line) > 20), "a solution line is on the page"
    checked = [
        o.get("text", "").splitlines()[0]
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade")
        for o in c.get("outputs", [])
        if o.get("text")
    ]
    assert checked and not any(html.escape(line) in page for line in checked), "a check's output is on the page"


# ------------------------------------------------------------------------------------------- browser


@pytest.fixture(scope="module")
def server(site):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with chromium_context(tmp_path_factory.mktemp("chromium-profile"), 1300, 900) as context:
        yield context


@pytest.fixture
def tab(browser, server):
    """A new tab that refuses every request leaving the machine and records errors."""
    tab = browser.new_page()
    tab.errors, tab.outside = [], []
    tab.on("console", lambda msg: tab.errors.append(msg.text) if msg.type == "error" else None)
    tab.on("pageerror", lambda exc: tab.errors.append(str(exc)))
    tab.on("response", lambda r: tab.errors.append(f"HTTP {r.status} {r.url}") if r.status >= 400 else None)

    def only_local(route):
        if route.request.url.startswith(server):
            route.continue_()
        else:
            tab.outside.append(route.request.url)
            route.abort()

    tab.route("**/*", only_local)
    yield tab
    tab.close()
    assert not tab.outside, f"requests that left the machine: {tab.outside}"
    assert not tab.errors, f"console errors: {tab.errors}"


WAIT_FOR_MATHJAX = """() => window.MathJax && MathJax.startup && MathJax.startup.promise
    ? MathJax.startup.promise.then(() => true) : false"""

INSPECT = """() => {
    const closed = [...document.querySelectorAll('details.agl-answer, details.agl-solution')].filter(d => !d.open).length;
    const hidden = [...document.querySelectorAll('details.agl-answer .jp-OutputArea')].filter(o => o.checkVisibility()).length;
    document.querySelectorAll('details').forEach(d => d.open = true);
    const markdown = [...document.querySelectorAll('.jp-RenderedMarkdown, .jp-RenderedHTMLCommon')].map(e => e.innerText).join('\\n');
    const views = [...document.querySelectorAll('.autogradlab-static')];
    return {
        closed, visible_answers: hidden,
        views: views.map(v => [...v.querySelectorAll('img')].map(i => i.getBoundingClientRect().width)),
        figures: document.querySelectorAll('.jp-OutputArea-output img, .jp-OutputArea-output svg').length,
        broken_images: [...document.querySelectorAll('img')].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src.slice(0, 80)),
        math: document.querySelectorAll('mjx-container').length,
        math_errors: document.querySelectorAll('mjx-merror, [data-mjx-error]').length,
        raw_display_math: (markdown.match(/\\$\\$/g) || []).length,
    };
}"""


@pytest.mark.parametrize("page", ALL_PAGES)
def test_page_renders_offline(tab, server, page):
    stored = _stored(ROOT / "solutions" / f"{page.rsplit('/', 1)[-1]}.ipynb")
    tab.goto(f"{server}/{page}.html", wait_until="load")
    if stored["math"]:
        assert tab.evaluate(WAIT_FOR_MATHJAX), "MathJax did not load"
    found = tab.evaluate(INSPECT)
    tab.wait_for_timeout(300)  # images inside the folds just opened
    found["broken_images"] = tab.evaluate(
        "() => [...document.querySelectorAll('img')].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src.slice(0, 80))"
    )
    shots = ROOT / "test-artifacts" / "site"
    shots.mkdir(parents=True, exist_ok=True)
    shot = page.replace("/", "__")
    tab.screenshot(path=str(shots / f"{shot}.png"))
    if found["views"]:
        view = tab.locator(".autogradlab-static").first
        view.scroll_into_view_if_needed()
        view.screenshot(path=str(shots / f"{shot}-view.png"))
    if page.startswith("zh/"):  # the Chinese prose is drawn in Chinese glyphs
        prose = tab.locator(".jp-RenderedMarkdown").first
        assert CJK.search(prose.inner_text()) and prose.evaluate(DRAWN), NO_FONT
    assert found["closed"] == stored["answers"] + stored["solutions"], f"{page}: folds open on arrival"
    assert found["visible_answers"] == 0, f"{page}: a Predict answer is visible before its click"
    assert len(found["views"]) == stored["views"]
    assert all(widths and min(widths) > 50 for widths in found["views"] if widths), f"{page}: a view not drawn"
    assert found["figures"] >= stored["figures"], f"{page}: {found['figures']} figures drawn, {stored['figures']} saved"
    assert not found["broken_images"], f"{page}: images that did not load: {found['broken_images']}"
    if stored["math"]:
        assert found["math"] > 0, f"{page}: no MathJax output"
        assert found["math_errors"] == 0, f"{page}: MathJax errors"
        assert found["raw_display_math"] == 0, f"{page}: raw $$ left in the text"


def test_a_fold_opens_on_a_click(tab, server):
    tab.goto(f"{server}/01_dynamic_graph.html", wait_until="load")
    answer = tab.locator("details.agl-answer").first
    output = answer.locator(".jp-OutputArea")
    assert not output.is_visible()
    answer.locator("summary").click()
    assert output.is_visible()


# Per edition: the folder, a query, and what the results say when nothing matches.
SEARCHES = {"en": ("", "retain_graph", "No section holds"), "zh": ("zh/", "计算图", "没有哪一节")}


@pytest.mark.parametrize("lang", list(SEARCHES))
def test_search_box_finds_a_section_and_goes_there(tab, server, lang):
    folder, query, none = SEARCHES[lang]
    tab.goto(f"{server}/{folder}index.html", wait_until="load")
    tab.fill("#agl-search", query)
    results = tab.locator("#agl-results a.agl-result")
    results.first.wait_for(timeout=5_000)
    assert results.count() >= 1 and query in results.first.inner_text()
    target = results.first.get_attribute("href")
    tab.keyboard.press("Enter")
    tab.wait_for_url(f"**/{folder}{target.split('#')[0]}*")
    assert tab.url.endswith(f"{folder}{target}")
    tab.fill("#agl-search", "zzzz-not-in-the-course")
    assert none in tab.locator("#agl-results").inner_text()


@pytest.mark.parametrize("folder", [folder for folder, _ in EDITIONS.values()])
def test_index_lists_every_chapter(tab, server, folder):
    tab.goto(f"{server}/{folder}index.html", wait_until="load")
    assert tab.locator("ol.agl-chapters > li > a[href$='.html']").count() == len(PAGES)


def test_the_language_switch_opens_the_same_chapter(tab, server):
    tab.goto(f"{server}/04_saved_tensors.html", wait_until="load")
    tab.click("a.agl-lang")
    tab.wait_for_url("**/zh/04_saved_tensors.html")
    assert tab.evaluate("document.documentElement.lang") == "zh-CN"
    assert tab.locator("h1").first.inner_text().startswith("04 · Saved tensors、")
    tab.click("a.agl-lang")
    tab.wait_for_url(f"{server}/04_saved_tensors.html")
