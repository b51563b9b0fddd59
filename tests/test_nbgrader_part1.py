"""nbgrader generate_assignment + autograde on every third chapter, from the 1st on; see nbgrader_course.py."""

import pytest
from nbgrader_course import NOTEBOOKS, grade_chapter, skip_without_grader

CHAPTERS = NOTEBOOKS[0::3]


@skip_without_grader
@pytest.mark.parametrize("solution", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_nbgrader_generates_and_autogrades(solution, tmp_path):
    # chapter 00 (the shortest) also proves the guide's add_missing_cells setting: a deleted check cell comes back
    grade_chapter(solution, tmp_path, deleted_check_cell=solution == NOTEBOOKS[0])
