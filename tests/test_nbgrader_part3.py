"""nbgrader generate_assignment + autograde on every third chapter, from the 3rd on; see nbgrader_course.py."""

import pytest
from nbgrader_course import NOTEBOOKS, grade_chapter, skip_without_grader

CHAPTERS = NOTEBOOKS[2::3]


@skip_without_grader
@pytest.mark.parametrize("solution", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_nbgrader_generates_and_autogrades(solution, tmp_path):
    grade_chapter(solution, tmp_path)
