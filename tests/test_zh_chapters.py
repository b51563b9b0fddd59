"""The Chinese student copies (chapters-zh/) run top to bottom, and only the exercise cells raise.

What is proved, and how (issue 26, "the student versions run top to bottom with only exercise checks raising"):

- **The code is the English code** (cheap, every chapter): each zh chapter's code cells, their tags and their
  nbgrader metadata are exactly chapters/'s, and its setup cell is the English one plus the line that sets
  ``AUTOGRADLAB_LANG=zh``. So a zh chapter can only behave differently through that setting: the package's
  learner-facing text (checker messages and hints, view labels, the doctor's findings) in Chinese.
- **Run with the setting** (slow): :data:`RUN` chapters are executed with nbclient in a fresh kernel, as a
  learner's Run All does (the setup cell itself sets the language; the test sets nothing), and every cell that
  raises must be tagged ``raises-exception``; each unsolved check must fail with the checker's own
  ``ExerciseError`` (or the ``NameError`` a whole-cell stub leaves), never with an error of a translated message
  (a lost field, bad markup); a last cell reads the kernel's language (``zh``: the setting took effect), and
  where the package ships its Chinese catalog, every check's message is Chinese.

Which chapters run: all thirteen cost 238 s (4.0 min) executed one at a time with ``OMP_NUM_THREADS=1`` on a
shared 2-core machine (load about 6, 2026-11-26; 11_compile alone 44 s), more than this test is worth beside the
English chapters' browser run. One chapter per kind of Chinese text the package writes outside the exercise
checks, the cheapest of each: a view's labels and its saved picture (00, TangentExplorer), the graph printouts
and GraphView (04, also saved-tensor listings), a stepping view (06, TrainStepInspector) and the doctor's
findings (09). 00 runs in the browser test (chapters-zh/00 in JupyterLab: the same outcome, every check's message
Chinese) and under nbgrader (tests/test_nbgrader_zh.py), so :data:`RUN` is the other three. Every chapter's
checks go through the same ``LearnerCall``/``ExerciseError`` messages as these chapters', and every package
message's fields and markup are held to the English ones by tests/test_i18n.py.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import nbformat
import pytest
from student_run import CJK, outcome

ROOT = Path(__file__).resolve().parent.parent
SETUP_TAG = "course-setup"  # autogradlab.release.launch.SETUP_TAG
LANGUAGE_LINE = 'os.environ["AUTOGRADLAB_LANG"] = "zh"  # 课程 package 的提示信息用中文\n'
CHAPTERS = sorted(p.name for p in (ROOT / "chapters-zh").glob("[0-9][0-9]_*.ipynb"))
RUN = ["04_saved_tensors.ipynb", "06_training_step.ipynb", "09_debugging.ipynb"]  # 00: see above
PROBE = "from autogradlab.i18n import language\nprint(language(), end='')"  # a last cell: the kernel's language
PACKAGE_CATALOG = ROOT / "widgets" / "autogradlab" / "locale" / "zh" / "LC_MESSAGES" / "autogradlab.mo"


def _code(path: Path) -> tuple[list[tuple], str]:
    """(source, tags, nbgrader metadata) of every code cell but the setup cell, and the setup cell's source."""
    nb = nbformat.read(path, as_version=4)
    setup = [c.source for c in nb.cells if SETUP_TAG in c.metadata.get("tags", [])]
    cells = [
        (c.source, c.metadata.get("tags", []), c.metadata.get("nbgrader"))
        for c in nb.cells
        if c.cell_type == "code" and SETUP_TAG not in c.metadata.get("tags", [])
    ]
    return cells, setup[0] if len(setup) == 1 else ""


def test_every_chapter_has_a_zh_copy():
    assert CHAPTERS == sorted(p.name for p in (ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))
    assert set(RUN) <= set(CHAPTERS)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_zh_chapter_has_the_english_code(chapter):
    zh_cells, zh_setup = _code(ROOT / "chapters-zh" / chapter)
    en_cells, en_setup = _code(ROOT / "chapters" / chapter)
    assert zh_cells == en_cells, f"{chapter}: a code cell differs from chapters/{chapter}"
    assert LANGUAGE_LINE in zh_setup, f"{chapter}: the setup cell does not set AUTOGRADLAB_LANG=zh"
    english_lines = {line for line in en_setup.splitlines() if not line.startswith(("#@title", "        print("))}
    assert english_lines <= set(zh_setup.splitlines()), f"{chapter}: the setup cell's code differs from the English"


def test_readme_zh_lists_each_chapter_by_its_title_and_its_commands_are_make_targets():
    """README.zh.md's table: every zh chapter, linked, under the title its first cell has (the catalog's)."""
    readme = (ROOT / "README.zh.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| \d\d \| \[(.+?)\]\(chapters-zh/(\d\d_\w+\.ipynb)\)", readme, re.M))
    listed = {chapter: title for title, chapter in rows.items()}
    for chapter in CHAPTERS:
        first = nbformat.read(ROOT / "chapters-zh" / chapter, as_version=4).cells[0].source.splitlines()[0]
        assert listed.get(chapter) == first.lstrip("# ").split(" · ", 1)[1], f"README.zh.md's title of {chapter}"
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    commands = set(re.findall(r"`?make ([\w-]+)", readme))
    assert commands and commands <= targets, f"README.zh.md names make targets that do not exist: {commands - targets}"


def test_the_zh_nbgrader_source_is_the_solution_in_chinese_with_the_zh_setup_cell():
    """`python -m autogradlab.release --nbgrader-source DIR --lang zh` (docs/instructors.md): chapters-zh's prose and
    setup cell around the solution's code; the English source is the solution itself; an unknown chapter is named."""
    from autogradlab.release.__main__ import nbgrader_sources
    from autogradlab.release.student import ReleaseError

    chapter = CHAPTERS[0].removesuffix(".ipynb")
    ((path, text),) = nbgrader_sources(ROOT, "zh", [chapter]).items()
    assert path == Path(chapter) / f"{chapter}.ipynb"
    source = nbformat.reads(text, as_version=4)
    zh = nbformat.read(ROOT / "chapters-zh" / CHAPTERS[0], as_version=4)
    solution = nbformat.read(ROOT / "solutions" / CHAPTERS[0], as_version=4)
    assert [c.source for c in source.cells if c.cell_type == "markdown"] == [
        c.source for c in zh.cells if c.cell_type == "markdown"
    ]
    assert [c.source for c in source.cells if c.cell_type == "code"] == [zh.cells[1].source] + [
        c.source for c in solution.cells if c.cell_type == "code"
    ]
    (english,) = nbgrader_sources(ROOT, "en", [chapter]).values()
    assert english == (ROOT / "solutions" / CHAPTERS[0]).read_text(encoding="utf-8")
    with pytest.raises(ReleaseError, match="99_nothing"):
        nbgrader_sources(ROOT, "zh", ["99_nothing"])


def run(path: Path, folder: Path) -> nbformat.NotebookNode:
    """Execute the notebook at ``path`` in ``folder`` with nbclient, as Run All does (errors kept, not raised)."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    env_before = os.environ.pop("AUTOGRADLAB_LANG", None)  # the setup cell must set it, not the test's environment
    try:
        NotebookClient(
            nb, timeout=300, kernel_name="python3", allow_errors=True, resources={"metadata": {"path": str(folder)}}
        ).execute()
    finally:
        if env_before is not None:
            os.environ["AUTOGRADLAB_LANG"] = env_before
    return nb


@pytest.mark.slow
@pytest.mark.parametrize("chapter", RUN)
def test_a_zh_chapter_runs_and_only_its_exercises_raise(chapter, tmp_path):
    start = time.monotonic()
    nb = run(ROOT / "chapters-zh" / chapter, tmp_path)
    print(f"\n{chapter}: ran in {time.monotonic() - start:.0f} s")
    wrong, checks = outcome(nb)
    assert not wrong, f"{chapter}: cells that raised where they should not:\n" + "\n".join(wrong)
    assert "".join(o.get("text", "") for o in nb.cells[-1].outputs) == "zh", "the setup cell did not select Chinese"
    if PACKAGE_CATALOG.is_file():  # the package's Chinese messages (autogradlab.i18n)
        assert checks and all(CJK.search(m) for m in checks), f"{chapter}: a check spoke English: {checks}"
