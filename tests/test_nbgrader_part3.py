"""nbgrader generate_assignment + autograde on every third chapter, from the 3rd on, and on chapter 00 of the
Chinese edition (its source written by the release, docs/instructors.md); see nbgrader_course.py."""

import pytest
from nbgrader_course import NOTEBOOKS, grade_chapter, skip_without_grader

CHAPTERS = NOTEBOOKS[2::3]


@skip_without_grader
@pytest.mark.parametrize("solution", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_nbgrader_generates_and_autogrades(solution, tmp_path):
    grade_chapter(solution, tmp_path)


@skip_without_grader
def test_nbgrader_generates_and_autogrades_a_zh_chapter(tmp_path):
    grade_chapter(NOTEBOOKS[0], tmp_path, lang="zh")
