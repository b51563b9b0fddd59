"""Closing summary of `make test`: how many notebooks nbval validated and the browser ran.

At the repository root so it sees the nbval items of solutions/ and chapters/ too
(hooks in tests/conftest.py only see tests under tests/).
"""

from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent
_notebook_cells: dict[str, list[str]] = defaultdict(list)
_browser: dict[str, str] = {}


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    if path.endswith(".ipynb") and report.when == "call":
        _notebook_cells[path].append(report.outcome)
    elif "test_browser_runs_notebook[" in report.nodeid and (report.when == "call" or report.skipped):
        _browser[report.nodeid] = report.outcome


def pytest_terminal_summary(terminalreporter):
    if _notebook_cells:
        ok = [nb for nb, outcomes in _notebook_cells.items() if "failed" not in outcomes]
        cells = sum(len(o) for o in _notebook_cells.values())
        terminalreporter.write_line(
            f"nbval: validated {len(ok)} of {len(_notebook_cells)} notebooks ({cells} cells): "
            + ", ".join(sorted(_notebook_cells))
        )
    if _browser:
        ran = sum(outcome == "passed" for outcome in _browser.values())
        skipped = sum(outcome == "skipped" for outcome in _browser.values())
        terminalreporter.write_line(
            f"browser: ran {ran} of {len(_browser)} notebooks in JupyterLab + Chromium"
            + (f" ({skipped} skipped)" if skipped else "")
            + (f"; screenshots in {ROOT / 'test-artifacts' / 'browser'}" if ran else "")
        )
