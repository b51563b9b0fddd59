"""Cells with the nbgrader metadata the release rules expect, for authors building notebooks.

An exercise is a solution cell followed directly by its check cell; the release blanks the
first and tags the second ``raises-exception``:

>>> import nbformat
>>> from autogradlab.release.student import student_notebook
>>> nb = nbformat.v4.new_notebook(cells=[
...     nbformat.v4.new_markdown_cell("# 99 · Demo"),
...     solution_cell("def f(x):\\n    ### BEGIN SOLUTION\\n    return x\\n    ### END SOLUTION", "f"),
...     check_cell("check_f(f)", "check_f", points=2),
... ])
>>> student = student_notebook(nb, "solutions/99_demo.ipynb")
>>> [c.source.splitlines()[-1] for c in student.cells if c.get("metadata", {}).get("nbgrader")]
['    raise NotImplementedError()', 'check_f(f)']
"""

from __future__ import annotations

from nbformat.v4 import new_code_cell


def _nbgrader(grade_id: str, *, solution: bool, grade: bool, points: float | None = None) -> dict:
    meta = {
        "schema_version": 3,
        "grade_id": grade_id,
        "solution": solution,
        "grade": grade,
        "locked": grade,
        "task": False,
    }
    if grade:
        meta["points"] = points
    return meta


def solution_cell(source: str, grade_id: str):
    """An exercise cell: the learner's code goes where the ``### BEGIN SOLUTION`` region is."""
    return new_code_cell(source, metadata={"nbgrader": _nbgrader(grade_id, solution=True, grade=False)})


def check_cell(source: str, grade_id: str, points: float = 1):
    """The locked, graded cell right after an exercise: it calls the checker."""
    return new_code_cell(source, metadata={"nbgrader": _nbgrader(grade_id, solution=False, grade=True, points=points)})
