"""The learner's copy (my-chapters/): course updates come in, the learner's work is never overwritten."""

import subprocess
import sys

import pytest

from autogradlab.workspace import MANIFEST, main, sync


@pytest.fixture
def course(tmp_path):
    folder = tmp_path / "chapters"
    folder.mkdir()
    for name in ("00_welcome.ipynb", "01_graph.ipynb"):
        (folder / name).write_text(f"{name} v1")
    (folder / "README.md").write_text("not a chapter")
    return folder


def write(folder, name, text):
    (folder / name).write_text(text)


def test_the_first_sync_copies_every_chapter_and_the_second_nothing(course, tmp_path):
    mine = tmp_path / "my-chapters"
    assert sync(course, mine).copied == ["00_welcome.ipynb", "01_graph.ipynb"]
    assert sorted(p.name for p in mine.iterdir()) == [MANIFEST, "00_welcome.ipynb", "01_graph.ipynb"]
    again = sync(course, mine)
    assert (again.copied, again.updated, again.kept) == ([], [], [])


def test_a_course_update_never_overwrites_the_learners_work(course, tmp_path):
    mine = tmp_path / "my-chapters"
    sync(course, mine)
    write(mine, "00_welcome.ipynb", "my answers")  # the learner worked in 00, not in 01
    write(course, "00_welcome.ipynb", "00 v2")
    write(course, "01_graph.ipynb", "01 v2")
    write(course, "02_new.ipynb", "02 v1")
    result = sync(course, mine)
    assert result.copied == ["02_new.ipynb"]
    assert result.updated == ["01_graph.ipynb"]  # untouched by the learner: follows the course
    assert result.kept == ["00_welcome.ipynb"]  # changed by both: the learner's stays, and sync says so
    assert (mine / "00_welcome.ipynb").read_text() == "my answers"
    assert (mine / "01_graph.ipynb").read_text() == "01 v2"
    assert any("00_welcome.ipynb" in line and str(course) in line for line in result.lines(course))
    # said again while the two differ, never acted on
    assert sync(course, mine).kept == ["00_welcome.ipynb"]


def test_a_chapter_the_learner_deleted_comes_back_fresh(course, tmp_path):
    mine = tmp_path / "my-chapters"
    sync(course, mine)
    (mine / "01_graph.ipynb").unlink()
    assert sync(course, mine).copied == ["01_graph.ipynb"]


def test_a_copy_made_by_hand_is_adopted_when_equal_and_kept_when_not(course, tmp_path):
    mine = tmp_path / "my-chapters"
    mine.mkdir()
    write(mine, "00_welcome.ipynb", "00_welcome.ipynb v1")  # same as the course: recorded
    write(mine, "01_graph.ipynb", "my own start")  # different, no record: the learner's
    result = sync(course, mine)
    assert (result.copied, result.updated, result.kept) == ([], [], [])
    assert (mine / "01_graph.ipynb").read_text() == "my own start"
    write(course, "00_welcome.ipynb", "00 v2")
    assert sync(course, mine).updated == ["00_welcome.ipynb"]


def test_the_command_finds_the_checkout_and_says_where_the_copy_is(repo_root, tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "autogradlab.workspace", "--to", str(tmp_path / "mine")],
        cwd=repo_root / "widgets",  # any folder inside the checkout
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert "copied 00_welcome.ipynb" in run.stdout and str(tmp_path / "mine") in run.stdout
    assert (tmp_path / "mine" / "00_welcome.ipynb").read_bytes() == (
        repo_root / "chapters" / "00_welcome.ipynb"
    ).read_bytes()


def test_an_empty_course_folder_is_an_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["--course", str(tmp_path / "empty"), "--to", str(tmp_path / "mine")]) == 2
    assert "no chapters" in capsys.readouterr().err
