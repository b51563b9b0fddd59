"""nbgrader generate_assignment + autograde on chapter 00 of the Chinese edition, its source written by
`python -m autogradlab.release --nbgrader-source DIR --lang zh 00_welcome` (docs/instructors.md); a module of
its own so that `make test` (--dist loadfile) runs it beside the English one. See nbgrader_course.py."""

from nbgrader_course import NOTEBOOKS, grade_chapter, skip_without_grader


@skip_without_grader
def test_nbgrader_generates_and_autogrades_a_zh_chapter(tmp_path):
    grade_chapter(NOTEBOOKS[0], tmp_path, lang="zh")
