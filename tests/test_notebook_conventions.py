"""Every solution notebook follows the course's shape (see DESIGN.md): question first,
summary table last, checkers from its own chapter module, Python 3 kernel, no stray state."""

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(params=SOLUTIONS, ids=[p.name for p in SOLUTIONS])
def notebook(request):
    return request.param, nbformat.read(request.param, as_version=4)


def test_opens_with_title_and_question(notebook):
    path, nb = notebook
    first = nb.cells[0]
    assert first.cell_type == "markdown"
    assert first.source.startswith(f"# {path.name[:2]} · "), "title '# NN · Topic' first"
    assert "**The question this chapter answers:**" in first.source


def test_ends_with_a_summary_table(notebook):
    _, nb = notebook
    summaries = [c for c in nb.cells if c.cell_type == "markdown" and "## Summary" in c.source]
    assert summaries, "a '## Summary' section is missing"
    assert re.search(r"^\|.*\|$", summaries[-1].source.split("## Summary", 1)[1], re.M), "the summary needs a table"


def test_imports_checkers_of_its_own_chapter(notebook):
    path, nb = notebook
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    modules = set(re.findall(r"autogradlab\.checks\.(ch\d\d)", code))
    assert modules <= {f"ch{path.name[:2]}"}, f"checkers must come from autogradlab.checks.ch{path.name[:2]}"
    if any(c.metadata.get("nbgrader", {}).get("grade") for c in nb.cells):
        assert modules, "a notebook with check cells imports its chapter's checkers"


def test_python3_kernel_and_fully_executed(notebook):
    _, nb = notebook
    assert nb.metadata["kernelspec"]["name"] == "python3"
    counts = [c.execution_count for c in nb.cells if c.cell_type == "code"]
    assert all(counts), "solutions are committed executed: run `make execute NB=...`"
    assert counts == list(range(1, len(counts) + 1)), "executed top to bottom in one kernel"


def test_no_error_outputs_in_solutions(notebook):
    _, nb = notebook
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            assert output.output_type != "error", f"a solution cell raised: {cell.source[:80]}"
