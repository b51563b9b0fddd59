"""Classroom use: run nbgrader's own generate_assignment and autograde on the course, unchanged.

nbgrader lives in .venv-grader (made by `make test`), so its menus never appear in the
learners' JupyterLab. Two things are proved, each where it costs least:

- ``release_all``: nbgrader's student version of every chapter (one ``generate_assignment`` over all of
  them, no execution) matches our chapters/ cell for cell;
- ``grade_chapter``: the whole pipeline on one chapter: generate, autograde, the gradebook's scores. A
  correct submission scores full marks, an untouched one zero, one with a deleted check cell full marks.

That every chapter would score so follows without executing each one again under nbgrader: nbval runs
every solution, whose check cells (nbgrader grade cells, untagged) must not raise; the browser test runs
every chapter and asserts each unsolved check cell fails with the checker's error (tests/student_run.py);
and autograde scores a grade cell by whether it raised, which ``grade_chapter`` shows on chapter 00.

The Chinese edition (``lang="zh"``): the source is written by `python -m autogradlab.release
--nbgrader-source DIR --lang zh NN_topic` (docs/instructors.md), the solution with its prose translated and
the zh setup cell; nbgrader's student version must have chapters-zh/'s code, setup cell included.
test_nbgrader.py holds the English tests, test_nbgrader_zh.py the Chinese one (two modules, so that
`make test`, pytest-xdist with --dist loadfile, runs them side by side).
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
GRADER_BIN = ROOT / ".venv-grader" / "bin"
NOTEBOOKS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))

skip_without_grader = pytest.mark.skipif(
    not (GRADER_BIN / "nbgrader").exists(), reason=".venv-grader is missing: run `make test`, which creates it"
)

SCORES = """
import json, sys
from nbgrader.api import Gradebook
with Gradebook("sqlite:///gradebook.db") as gb:
    print(json.dumps({s: [gb.find_submission(sys.argv[1], s).score, gb.find_submission(sys.argv[1], s).max_score]
                      for s in sys.argv[2:]}))
"""
# The settings docs/instructors.md gives (section 1): a 300 s cell timeout (chapter 07 starts a 2-process
# DDP run) and add_missing_cells (nbgrader 0.8.5+), which puts back a check cell a student deleted.
CONFIG = "c = get_config()\nc.Execute.timeout = 300\nc.OverwriteCells.add_missing_cells = True\n"


def nbgrader(course: Path, *args: str) -> str:
    run = subprocess.run(
        [str(GRADER_BIN / "nbgrader"), *args, "--course-dir", str(course)],
        cwd=course,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PATH=f"{GRADER_BIN}{os.pathsep}{os.environ['PATH']}"),  # nbgrader calls `alembic`
    )
    assert run.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{run.stdout}\n{run.stderr}"
    return run.stdout + run.stderr


def code_sources(path: Path, setup: bool = False) -> list[str]:
    """Code cells; without the launch setup cell the release adds to chapters unless ``setup`` (an English
    nbgrader copy has none; a zh one has the zh chapters' setup cell, which selects the language)."""
    return [
        c.source.strip()
        for c in nbformat.read(path, as_version=4).cells
        if c.cell_type == "code" and (setup or "course-setup" not in c.metadata.get("tags", []))
    ]


def zh_source(solution: Path, folder: Path) -> Path:
    """The zh edition's nbgrader source of ``solution`` in ``folder``, by the command the instructor guide gives."""
    command = [sys.executable, "-m", "autogradlab.release", "--root", str(ROOT), "--nbgrader-source", str(folder)]
    subprocess.run([*command, "--lang", "zh", solution.stem], check=True, capture_output=True, text=True)
    return folder / solution.stem / solution.name


def without_first_check_cell(solution: Path, to: Path) -> None:
    """The solution with its first graded (check) cell deleted, as a student might."""
    nb = nbformat.read(solution, as_version=4)
    first = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade"))
    del nb.cells[first]
    nbformat.write(nb, to)


def new_course(tmp_path: Path, assignment: str) -> Path:
    """An nbgrader course folder with the guide's settings and an empty source folder for ``assignment``."""
    course = tmp_path / "course"
    (course / "source" / assignment).mkdir(parents=True)
    (course / "nbgrader_config.py").write_text(CONFIG)
    return course


def grade_chapter(solution: Path, tmp_path: Path, *, deleted_check_cell: bool = False, lang: str = "en") -> None:
    """Generate the student version of `solution`, autograde it and the solution, and check the scores.

    With ``deleted_check_cell``, a third student (carol) hands in the solution without its first check
    cell: add_missing_cells puts it back and she scores full marks too. With ``lang="zh"``, all of it on
    the Chinese edition's source.
    """
    assignment = solution.stem
    course = new_course(tmp_path, assignment)
    if lang == "zh":
        solution = zh_source(solution, course / "source")
    else:
        shutil.copy(solution, course / "source" / assignment)
    nbgrader(course, "generate_assignment", assignment, "--force")
    released = course / "release" / assignment / solution.name
    chapters = ROOT / ("chapters" if lang == "en" else "chapters-zh")
    assert code_sources(released, lang != "en") == code_sources(chapters / solution.name, lang != "en"), (
        f"nbgrader's student version differs from {chapters.name}/"
    )

    students = {"alice": solution, "bob": released}
    for student, notebook in students.items():  # autograde adds the students to its db
        target = course / "submitted" / student / assignment
        shutil.copytree(released.parent, target)
        shutil.copy(notebook, target / solution.name)
    if deleted_check_cell:
        students["carol"] = course / "submitted" / "carol" / assignment / solution.name
        shutil.copytree(released.parent, students["carol"].parent)
        without_first_check_cell(solution, students["carol"])
    log = nbgrader(course, "autograde", assignment, "--force")

    run = subprocess.run(
        [str(GRADER_BIN / "python"), "-c", SCORES, assignment, *students],
        cwd=course,
        capture_output=True,
        text=True,
        check=True,
    )
    scores = json.loads(run.stdout)
    alice_score, max_score = scores["alice"]
    assert max_score > 0
    assert alice_score == max_score, f"the solution should get full marks: {scores}"
    assert scores["bob"][0] == 0, f"an unanswered notebook should get no marks: {scores}"
    if deleted_check_cell:
        assert scores["carol"][0] == max_score, f"the deleted check cell should be put back and pass: {scores}"
        assert "Missing grade cell" in log
    print(
        f"nbgrader {assignment} ({lang}): solution {alice_score}/{max_score}, untouched {scores['bob'][0]}/{max_score}",
        file=sys.stderr,
    )


def release_all(tmp_path: Path) -> Path:
    """nbgrader's student versions of every chapter: one assignment holding all the solutions, generated once."""
    assignment = "all_chapters"
    course = new_course(tmp_path, assignment)
    for solution in NOTEBOOKS:
        shutil.copy(solution, course / "source" / assignment)
    nbgrader(course, "generate_assignment", assignment, "--force")
    return course / "release" / assignment
