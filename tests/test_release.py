"""solutions/ -> chapters/: stubs, hidden tests, outputs, tags, validation errors, --check."""

import subprocess
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from autogradlab.release import ReleaseError, student_notebook
from autogradlab.release.__main__ import main


def nbgrader(grade_id, *, solution=False, grade=False, points=None):
    meta = {
        "schema_version": 3,
        "grade_id": grade_id,
        "solution": solution,
        "grade": grade,
        "locked": grade,
        "task": False,
    }
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def exercise_notebook():
    solution = new_code_cell(
        "def f(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION",
        metadata=nbgrader("f", solution=True),
        execution_count=2,
    )
    check = new_code_cell(
        "check(f)\n### BEGIN HIDDEN TESTS\nassert f(2) == 4\n### END HIDDEN TESTS",
        metadata=nbgrader("f-check", grade=True, points=1),
        execution_count=3,
        outputs=[new_output("stream", name="stdout", text="✓ f\n")],
    )
    demo = new_code_cell("print(1)", execution_count=1, outputs=[new_output("stream", name="stdout", text="1\n")])
    return new_notebook(cells=[new_markdown_cell("# Title"), demo, solution, check])


def test_solution_region_becomes_stub_with_indentation():
    student = student_notebook(exercise_notebook(), "nb", launch=False)
    assert student.cells[2].source == "def f(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()"


def test_hidden_tests_are_dropped_and_visible_check_kept():
    student = student_notebook(exercise_notebook(), "nb", launch=False)
    assert student.cells[3].source == "check(f)"


def test_exercise_outputs_cleared_and_tagged_other_outputs_kept():
    student = student_notebook(exercise_notebook(), "nb", launch=False)
    demo, solution, check = student.cells[1:]
    assert demo.outputs and demo.execution_count == 1 and "tags" not in demo.metadata
    for cell in (solution, check):
        assert cell.outputs == [] and cell.execution_count is None
        assert cell.metadata["tags"] == ["raises-exception"]
        assert cell.metadata["nbgrader"]["schema_version"] == 3  # kept for nbgrader users


def test_source_notebook_is_not_modified():
    nb = exercise_notebook()
    before = nbformat.writes(nb)
    student_notebook(nb, "nb", launch=False)
    assert nbformat.writes(nb) == before


def test_markdown_solution_cell_gets_answer_stub():
    cell = new_markdown_cell("The answer is 42.", metadata=nbgrader("essay", solution=True))
    student = student_notebook(new_notebook(cells=[cell]), "nb", launch=False)
    assert student.cells[0].source == "YOUR ANSWER HERE"


@pytest.mark.parametrize(
    "cells, message",
    [
        ([new_code_cell("### BEGIN SOLUTION\nx = 1\n### END SOLUTION")], "outside a solution cell"),
        ([new_code_cell("### BEGIN SOLUTION\nx = 1", metadata=nbgrader("a", solution=True))], "unterminated region"),
        ([new_code_cell("x = 1\n### END SOLUTION", metadata=nbgrader("a", solution=True))], "without a matching"),
        ([new_code_cell("x = 1", metadata=nbgrader("a", solution=True))], "needs a '### BEGIN SOLUTION' region"),
        (
            [new_code_cell("### BEGIN HIDDEN TESTS\n### END HIDDEN TESTS", metadata=nbgrader("a", solution=True))],
            "outside a check",
        ),
        ([new_code_cell("check()", metadata=nbgrader("a", grade=True))], "numeric 'points'"),
        (
            [
                new_code_cell("### BEGIN SOLUTION\n### END SOLUTION", metadata=nbgrader("dup", solution=True)),
                new_code_cell("check()", metadata=nbgrader("dup", grade=True, points=1)),
            ],
            "duplicate grade_id 'dup'",
        ),
    ],
)
def test_bad_input_is_a_clear_error_naming_notebook_and_cell(cells, message):
    with pytest.raises(ReleaseError) as info:
        student_notebook(new_notebook(cells=cells), "solutions/99_bad.ipynb")
    text = str(info.value)
    assert message in text and "solutions/99_bad.ipynb, cell" in text


def make_repo(tmp_path, nb):
    (tmp_path / "solutions").mkdir()
    nbformat.write(nb, tmp_path / "solutions" / "01_demo.ipynb")
    return tmp_path


def test_cli_writes_then_check_passes_then_detects_staleness(tmp_path, capsys):
    root = make_repo(tmp_path, exercise_notebook())
    assert main(["--root", str(root), "--check"]) == 1  # chapter missing
    assert main(["--root", str(root)]) == 0
    assert (root / "chapters" / "01_demo.ipynb").exists()
    assert main(["--root", str(root), "--check"]) == 0
    nb = exercise_notebook()
    nb.cells[0].source = "# A new title"
    nbformat.write(nb, root / "solutions" / "01_demo.ipynb")
    assert main(["--root", str(root), "--check"]) == 1
    assert "01_demo.ipynb is out of date" in capsys.readouterr().err


def test_cli_reports_orphan_chapter_and_bad_notebook(tmp_path, capsys):
    root = make_repo(tmp_path, exercise_notebook())
    main(["--root", str(root)])
    (root / "chapters" / "02_orphan.ipynb").write_text("{}")
    assert main(["--root", str(root), "--check"]) == 1
    assert "02_orphan.ipynb has no source" in capsys.readouterr().err
    (root / "solutions" / "03_broken.ipynb").write_text("not json")
    assert main(["--root", str(root)]) == 2
    assert "solutions/03_broken.ipynb: not a readable notebook" in capsys.readouterr().err


@pytest.mark.slow  # starts a Python process
def test_cli_error_is_one_line_not_a_traceback(tmp_path):
    bad = new_notebook(cells=[new_code_cell("### BEGIN SOLUTION\n")])
    root = make_repo(tmp_path, bad)
    run = subprocess.run(
        [sys.executable, "-m", "autogradlab.release", "--root", str(root)], capture_output=True, text=True
    )
    assert run.returncode == 2
    assert "Traceback" not in run.stderr and "01_demo.ipynb, cell 0" in run.stderr


def test_repository_chapters_are_up_to_date(repo_root):
    assert main(["--root", str(repo_root), "--check"]) == 0


def test_every_chapter_exercise_has_a_check_cell_right_after(repo_root):
    for path in sorted((repo_root / "solutions").glob("[0-9][0-9]_*.ipynb")):
        cells = nbformat.read(path, as_version=4).cells
        for i, cell in enumerate(cells):
            if cell.metadata.get("nbgrader", {}).get("solution") and cell.cell_type == "code":
                after = cells[i + 1].metadata.get("nbgrader", {})
                assert after.get("grade") and after.get("locked"), f"{path.name} cell {i}: no check cell after it"


def _predict_notebook():
    prompt = new_markdown_cell("**Predict:** what does it print?")
    answer = new_code_cell(
        "print(2)", metadata={"tags": ["answers-prediction"]}, outputs=[new_output("stream", text="2\n")]
    )
    other = new_code_cell("print(3)", outputs=[new_output("stream", text="3\n")])
    return new_notebook(cells=[prompt, answer, other])


def test_cell_answering_a_prediction_loses_its_output_and_is_not_compared():
    student = student_notebook(_predict_notebook(), "00_demo.ipynb", launch=False)
    answer, other = student.cells[1], student.cells[2]
    assert answer.outputs == [] and answer.execution_count is None
    assert "nbval-ignore-output" in answer.metadata["tags"]
    assert other.outputs and "tags" not in other.metadata


def test_answers_prediction_tag_on_an_exercise_is_an_authoring_error():
    nb = exercise_notebook()
    nb.cells[2].metadata["tags"] = ["answers-prediction"]
    with pytest.raises(ReleaseError, match="answers-prediction"):
        student_notebook(nb, "00_demo.ipynb", launch=False)


def test_chapters_get_launch_badges_and_a_setup_cell_that_does_nothing_here(tmp_path):
    from autogradlab.release.launch import RELEASE_TAG, REPOSITORY, SETUP_METADATA, setup_source

    nb = new_notebook(cells=[new_markdown_cell("# 05 · Topic\n\n**The question...**"), new_code_cell("x = 1")])
    student = student_notebook(nb, "solutions/05_topic.ipynb")
    title = student.cells[0].source
    assert title.startswith("# 05 · Topic\n\n[![Open in Colab]") and "**The question...**" in title
    for host in ("colab.research.google.com", "kaggle.com", "mybinder.org"):
        assert host in title
    assert f"{REPOSITORY}/blob/{RELEASE_TAG}/chapters/05_topic.ipynb" in title
    assert "urlpath=lab%2Ftree%2Fmy-chapters%2F05_topic.ipynb" in title  # Binder opens the learner's copy
    assert "/HEAD" not in title and "/main" not in title  # a tag, not a moving branch
    setup = student.cells[1]
    assert setup.metadata == SETUP_METADATA and setup.source == setup_source()
    # One collapsed line: Colab's form title, folded in JupyterLab and VS Code.
    assert setup.source.startswith("#@title Setup") and setup.metadata["cellView"] == "form"
    assert setup.metadata["jupyter"]["source_hidden"] is True
    # In an environment that has the package the cell prints nothing and installs nothing.
    out = subprocess.run([sys.executable, "-c", setup.source], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout == "" and out.stderr == ""


def _run_setup(monkeypatch, *, colab: bool = False, kaggle: bool = False) -> tuple[list, list, list]:
    """Run the setup cell as a runtime without the package would: (pip commands, complete() calls, printed)."""
    import importlib.util
    import subprocess as subprocess_module
    import types

    import autogradlab.runtime
    from autogradlab.release.launch import setup_source

    commands, completed, printed = [], [], []
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    monkeypatch.setattr(subprocess_module, "run", lambda command, **kw: commands.append(command))
    monkeypatch.setattr(autogradlab.runtime, "complete", lambda: completed.append(True))
    if colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    if kaggle:
        monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Interactive")
    else:
        monkeypatch.delenv("KAGGLE_KERNEL_RUN_TYPE", raising=False)
    exec(setup_source(), {"print": lambda *a: printed.append(" ".join(map(str, a)))})
    return commands, completed, printed


@pytest.mark.parametrize("where", ["colab", "kaggle"])
def test_setup_cell_installs_the_package_alone_then_only_what_is_missing(monkeypatch, where):
    from autogradlab.release.launch import PACKAGE_SPEC

    commands, completed, printed = _run_setup(monkeypatch, colab=where == "colab", kaggle=where == "kaggle")
    assert commands == [[sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", PACKAGE_SPEC]]
    assert completed == [True] and not printed  # complete() installs what lacks (never torch) and says so


def test_setup_cell_elsewhere_explains_and_installs_nothing(monkeypatch):
    commands, completed, printed = _run_setup(monkeypatch)
    assert not commands and not completed and "make lab" in printed[0]


def test_the_chinese_edition_is_built_from_current_translations_only(tmp_path, capsys):
    from autogradlab.release.translation import main as translation_main
    from autogradlab.release.translation import read_catalog, write_catalog

    root = make_repo(tmp_path, exercise_notebook())
    (root / "translations" / "zh").mkdir(parents=True)
    assert translation_main(["update", "--root", str(root)]) == 0
    assert main(["--root", str(root), "--check"]) == 1
    assert "translation zh: 01_demo, cell 0, paragraph 1: missing" in capsys.readouterr().err
    path = root / "translations" / "zh" / "01_demo.po"
    catalog = read_catalog(path)
    for message in catalog:
        if message.id:
            message.string = "译：" + message.id
    write_catalog(catalog, path)
    assert main(["--root", str(root)]) == 0 and main(["--root", str(root), "--check"]) == 0
    chapter = nbformat.read(root / "chapters-zh" / "01_demo.ipynb", as_version=4)
    assert chapter.cells[0].source.startswith("# 译：")
    setup = chapter.cells[1].source
    assert 'os.environ["AUTOGRADLAB_LANG"] = "zh"' in setup and "chapters-zh%2F01_demo.ipynb" in chapter.cells[0].source
    nb = nbformat.read(root / "solutions" / "01_demo.ipynb", as_version=4)  # the same cells, the same ids
    nb.cells[0].source = "# A new title"
    nbformat.write(nb, root / "solutions" / "01_demo.ipynb")
    translation_main(["update", "--root", str(root)])
    capsys.readouterr()
    assert main(["--root", str(root), "--check"]) == 1
    assert "translation zh: 01_demo, cell 0, paragraph 1: stale" in capsys.readouterr().err
