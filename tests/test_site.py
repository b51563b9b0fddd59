"""The static website (`make site`): build it into a temporary folder and open every page in Chromium.

Offline, as a reader without a network would see it: every request that leaves 127.0.0.1 is
refused and fails the test. Each page: no console errors, every widget area drawn (from the saved
widget state) and not empty, every saved figure present and loaded, math typeset by MathJax
with no raw `$$` left and no MathJax error.

Skips with a reason when .venv-site, Chromium or Playwright is missing, unless REQUIRE_BROWSER=1.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import subprocess
import threading
from pathlib import Path

import nbformat
import pytest
from chromium import CHROMIUM, chromium_context

ROOT = Path(__file__).resolve().parent.parent
SITE_PYTHON = ROOT / ".venv-site" / "bin" / "python"
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))


def _missing() -> str | None:
    if not (ROOT / ".venv-site" / ".installed").is_file():
        return ".venv-site is missing: run `make site` (make test builds it)"
    if not Path(CHROMIUM).exists():
        return f"Chromium not found at {CHROMIUM} (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright; never `playwright install`)"
    return None


MISSING = _missing()
if MISSING and os.environ.get("REQUIRE_BROWSER") == "1":
    raise RuntimeError(f"REQUIRE_BROWSER=1 but the site test cannot run: {MISSING}")
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"site test skipped: {MISSING}")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [str(SITE_PYTHON), "site/build.py", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


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


def test_site_has_an_index_and_a_page_per_chapter(site):
    pages = json.loads((site / "pages.json").read_text())
    assert pages == ["index.html"] + [f"{p.stem}.html" for p in CHAPTERS]
    index = (site / "index.html").read_text()
    for path in CHAPTERS:
        assert f'href="{path.stem}.html"' in index
        assert "mybinder.org" in index and "colab.research.google.com" in index
    page = (site / f"{CHAPTERS[0].stem}.html").read_text()
    assert not re.search(r"""<(script|link)[^>]+(src|href)=["']https?://""", page), (
        "a page loads a script or style from the web"
    )


def _expected(path: Path) -> dict:
    """What the saved notebook says the page must show."""
    nb = nbformat.read(path, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    return {
        "figures": sum(1 for o in outputs if {"image/png", "image/svg+xml"} & set(o.get("data", {}))),
        "widgets": sum(1 for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})),
        "math": any("$" in c.source for c in nb.cells if c.cell_type == "markdown"),
    }


WAIT_FOR_MATHJAX = """() => window.MathJax && MathJax.startup && MathJax.startup.promise
    ? MathJax.startup.promise.then(() => true) : false"""

INSPECT = """() => {
    const outputs = [...document.querySelectorAll('.jp-OutputArea-output')];
    const widgetAreas = [...document.querySelectorAll('.jupyter-widgets.jp-OutputArea-output')];
    const widgets = widgetAreas.map(area => {
        const view = area.querySelector('.lm-Widget, .p-Widget');
        const box = view ? view.getBoundingClientRect() : {width: 0, height: 0};
        return {drawn: !!view, width: box.width, height: box.height, text: area.innerText.slice(0, 200)};
    });
    const imgs = [...document.querySelectorAll('.jp-OutputArea-output img')];
    const svgs = [...document.querySelectorAll('.jp-OutputArea-output svg')];
    const markdown = [...document.querySelectorAll('.jp-RenderedMarkdown, .jp-RenderedHTMLCommon')].map(e => e.innerText).join('\\n');
    return {
        widgets,
        figures: imgs.length + svgs.length,
        broken_images: [...document.querySelectorAll('img')].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src.slice(0, 80)),
        math: document.querySelectorAll('mjx-container').length,
        math_errors: document.querySelectorAll('mjx-merror, [data-mjx-error]').length,
        raw_display_math: (markdown.match(/\\$\\$/g) || []).length,
        error_text: document.body.innerText.includes('Error displaying widget'),
    };
}"""


@pytest.mark.parametrize("page", ["index"] + [p.stem for p in CHAPTERS])
def test_page_renders_offline(browser, server, page):
    errors, outside = [], []
    tab = browser.new_page()
    tab.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    tab.on("response", lambda r: errors.append(f"HTTP {r.status} {r.url}") if r.status >= 400 else None)

    def only_local(route):
        if route.request.url.startswith(server):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    tab.route("**/*", only_local)
    try:
        tab.goto(f"{server}/{page}.html", wait_until="load")
        if page == "index":
            assert tab.locator("ol > li > a[href$='.html']").count() == len(CHAPTERS)
            assert not errors and not outside, (errors, outside)
            return
        expected = _expected(ROOT / "chapters" / f"{page}.ipynb")
        if expected["widgets"]:
            tab.wait_for_function(
                "n => document.querySelectorAll('.jupyter-widgets.jp-OutputArea-output .lm-Widget').length >= n",
                arg=expected["widgets"],
                timeout=30_000,
            )
        if expected["math"]:
            assert tab.evaluate(WAIT_FOR_MATHJAX), "MathJax did not load"
        found = tab.evaluate(INSPECT)
        shots = ROOT / "test-artifacts" / "site"
        shots.mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=str(shots / f"{page}.png"))
        if expected["widgets"]:  # the first widget, as drawn from its saved state
            tab.locator(".jupyter-widgets.jp-OutputArea-output").first.screenshot(
                path=str(shots / f"{page}-widget.png")
            )
    finally:
        tab.close()
    assert not outside, f"{page}: requests that left the machine: {outside}"
    assert not errors, f"{page}: console errors: {errors}"
    assert len(found["widgets"]) == expected["widgets"], found["widgets"]
    empty = [w for w in found["widgets"] if not w["drawn"] or w["height"] < 20 or w["width"] < 20]
    assert not empty, f"{page}: empty widget areas: {empty}"
    assert not found["error_text"], f"{page}: 'Error displaying widget'"
    assert found["figures"] >= expected["figures"], (
        f"{page}: {found['figures']} figures drawn, the notebook saved {expected['figures']}"
    )
    assert not found["broken_images"], f"{page}: images that did not load: {found['broken_images']}"
    if expected["math"]:
        assert found["math"] > 0, f"{page}: no MathJax output"
        assert found["math_errors"] == 0, f"{page}: MathJax errors"
        assert found["raw_display_math"] == 0, f"{page}: raw $$ left in the text"
