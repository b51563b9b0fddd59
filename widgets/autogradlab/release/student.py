"""Turn one solution notebook into its student chapter.

Rules (the same markers and metadata nbgrader uses, so an instructor can run
nbgrader on solutions/ unchanged):

- a solution cell (``nbgrader.solution``) has its ``### BEGIN SOLUTION`` …
  ``### END SOLUTION`` regions replaced by ``# YOUR CODE HERE`` +
  ``raise NotImplementedError()``, keeping the indentation;
- a check cell (``nbgrader.grade`` and ``locked``) loses its
  ``### BEGIN HIDDEN TESTS`` … ``### END HIDDEN TESTS`` regions;
- both lose outputs and execution counts and are tagged ``raises-exception``
  (nbval and JupyterLab's Run All then expect them to fail until solved);
- a cell tagged ``answers-prediction`` (its output answers a **Predict** prompt)
  loses its outputs too, so the learner commits to a prediction before seeing the
  answer; it is tagged ``nbval-ignore-output`` in the chapter (its output is
  compared in solutions/, where it is kept);
- every other cell keeps its outputs, so the chapter reads well unexecuted; a stored
  view keeps only its static picture (its widget entry and the notebook's saved widget
  state are dropped: without a kernel they can only show a dead control with a red
  "disconnected" icon, and a trusted JupyterLab sometimes fails to load them at all);
- the chapter gets its launch badges and setup cell (:mod:`.launch`).

>>> import nbformat
>>> nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Hi")])
>>> student_notebook(nb, "00_demo.ipynb", launch=False).cells[0].source
'# Hi'
"""

from __future__ import annotations

import copy
import re

import nbformat

from autogradlab.release.launch import add_launch_cells

BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")
EXPECTS_ERROR_TAG = "raises-exception"
ANSWER_TAG = "answers-prediction"
IGNORE_OUTPUT_TAG = "nbval-ignore-output"
_ANY_MARKER = re.compile(r"^\s*### (BEGIN|END) (SOLUTION|HIDDEN TESTS)\s*$")


class ReleaseError(ValueError):
    """A solution notebook breaks the authoring rules; the message names notebook and cell."""


def _where(notebook: str, index: int, cell) -> str:
    grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    first_line = cell.source.strip().splitlines()[0][:60] if cell.source.strip() else "(empty)"
    label = f"grade_id {grade_id!r}, " if grade_id else ""
    return f"{notebook}, cell {index} ({label}starting {first_line!r})"


def _replace_regions(lines: list[str], begin: str, end: str, where: str, keep_stub: bool) -> list[str]:
    """Drop begin…end regions; with ``keep_stub``, put the stub in their place at their indentation."""
    out: list[str] = []
    inside_indent: str | None = None
    for line in lines:
        stripped = line.strip()
        if stripped == begin:
            if inside_indent is not None:
                raise ReleaseError(f"{where}: nested {begin!r} (the previous region is not closed)")
            inside_indent = line[: len(line) - len(line.lstrip())]
            if keep_stub:
                out.extend(inside_indent + stub for stub in STUB)
        elif stripped == end:
            if inside_indent is None:
                raise ReleaseError(f"{where}: {end!r} without a matching {begin!r}")
            inside_indent = None
        elif inside_indent is None:
            out.append(line)
    if inside_indent is not None:
        raise ReleaseError(f"{where}: unterminated region, {begin!r} has no {end!r}")
    return out


def _markers_in(source: str) -> set[str]:
    return {" ".join(m.groups()) for line in source.splitlines() if (m := _ANY_MARKER.match(line))}


def nbgrader_role(cell) -> str:
    """'solution', 'check' or 'plain', from the cell's nbgrader metadata."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    if meta.get("solution"):
        return "solution"
    if meta.get("grade"):
        return "check"
    return "plain"


def validate(nb, notebook: str) -> None:
    """Raise ReleaseError for markers in the wrong cell, bad regions or duplicate grade_ids."""
    seen: dict[str, int] = {}
    for index, cell in enumerate(nb.cells):
        where = _where(notebook, index, cell)
        meta = cell.get("metadata", {}).get("nbgrader")
        role = nbgrader_role(cell)
        if meta:
            grade_id = meta.get("grade_id")
            if not grade_id:
                raise ReleaseError(f"{where}: nbgrader metadata without a grade_id")
            if grade_id in seen:
                raise ReleaseError(f"{where}: duplicate grade_id {grade_id!r} (also cell {seen[grade_id]})")
            seen[grade_id] = index
            if meta.get("schema_version") != 3:
                raise ReleaseError(f"{where}: nbgrader schema_version must be 3")
            if meta.get("grade") and not isinstance(meta.get("points"), (int, float)):
                raise ReleaseError(f"{where}: a graded cell needs numeric 'points'")
        markers = _markers_in(cell.source)
        solution_markers = {m for m in markers if m.endswith("SOLUTION")}
        hidden_markers = markers - solution_markers
        if solution_markers and role != "solution":
            raise ReleaseError(
                f"{where}: '### BEGIN/END SOLUTION' outside a solution cell (set nbgrader solution: true)"
            )
        if hidden_markers and role != "check":
            raise ReleaseError(f"{where}: '### BEGIN/END HIDDEN TESTS' outside a check (grade) cell")
        if role == "solution":
            _replace_regions(cell.source.splitlines(), BEGIN_SOLUTION, END_SOLUTION, where, True)
        if role == "solution" and cell.cell_type == "code" and "BEGIN SOLUTION" not in solution_markers:
            raise ReleaseError(f"{where}: a code solution cell needs a '### BEGIN SOLUTION' region")
        if role == "check":
            _replace_regions(cell.source.splitlines(), BEGIN_HIDDEN, END_HIDDEN, where, False)
        if ANSWER_TAG in cell.get("metadata", {}).get("tags", []) and (cell.cell_type != "code" or role != "plain"):
            raise ReleaseError(
                f"{where}: the {ANSWER_TAG!r} tag belongs on a plain code cell (not an exercise or check)"
            )


def _add_tag(cell, tag: str) -> None:
    tags = cell.metadata.setdefault("tags", [])
    if tag not in tags:
        tags.append(tag)


def student_notebook(solution_nb, notebook: str, *, launch: bool = True, lang: str = "en"):
    """Return the student version of ``solution_nb`` (the input is not modified).

    With ``launch`` (the default), the chapter also gets its Colab/Kaggle/Binder badges
    and the setup cell of the ``lang`` edition (:mod:`autogradlab.release.launch`).
    """
    validate(solution_nb, notebook)
    nb = copy.deepcopy(solution_nb)
    for index, cell in enumerate(nb.cells):
        role = nbgrader_role(cell)
        if role == "plain":
            if ANSWER_TAG in cell.metadata.get("tags", []):
                cell.outputs = []
                cell.execution_count = None
                _add_tag(cell, IGNORE_OUTPUT_TAG)
            continue
        where = _where(notebook, index, cell)
        if role == "solution" and cell.cell_type == "markdown":
            cell.source = "YOUR ANSWER HERE"  # nbgrader's stub for written answers
            continue
        lines = cell.source.splitlines()
        if role == "solution":
            lines = _replace_regions(lines, BEGIN_SOLUTION, END_SOLUTION, where, True)
        else:
            lines = _replace_regions(lines, BEGIN_HIDDEN, END_HIDDEN, where, False)
        cell.source = "\n".join(lines).rstrip("\n")
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
            _add_tag(cell, EXPECTS_ERROR_TAG)
    _pictures_only(nb)
    if launch and nb.cells:
        add_launch_cells(nb, notebook.rsplit("/", 1)[-1], lang)
    return nb


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _pictures_only(nb) -> None:
    """Drop stored widget views that carry a static picture (``text/html``), and the saved widget state."""
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if WIDGET_VIEW in data and "text/html" in data:
                del data[WIDGET_VIEW]


def to_text(nb) -> str:
    """Serialise a notebook exactly as it is written to disk (stable for --check)."""
    return nbformat.writes(nb, version=4) + "\n"
