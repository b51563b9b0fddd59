"""The browser test's other half of the chapters (every second one, from the 2nd), in a module of its own so
that `make test` (pytest-xdist, --dist loadfile) runs it on another worker with its own JupyterLab and
Chromium: the fourteen runs in one module were 400 s of one worker, the longest path through the suite.
See test_browser.py for what each run checks."""

import pytest

# lab and page: test_browser's module-scoped fixtures, so this module starts its own JupyterLab and page
from test_browser import MISSING, NOTEBOOKS, check_notebook, lab, page  # noqa: F401

pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"browser test skipped: {MISSING}")


@pytest.mark.parametrize("notebook", NOTEBOOKS[1::2])
def test_browser_runs_notebook(notebook, lab, page):  # noqa: F811  (pytest passes the fixtures imported above)
    check_notebook(notebook, lab, page)
