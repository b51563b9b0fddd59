"""nbgrader on the English course: every chapter's student version, and the whole pipeline on chapter 00;
see nbgrader_course.py for why that proves every chapter's scores."""

from nbgrader_course import NOTEBOOKS, ROOT, code_sources, grade_chapter, release_all, skip_without_grader


@skip_without_grader
def test_nbgrader_student_versions_are_the_chapters(tmp_path):
    released = release_all(tmp_path)
    assert sorted(p.name for p in released.glob("*.ipynb")) == [p.name for p in NOTEBOOKS]
    for solution in NOTEBOOKS:
        assert code_sources(released / solution.name) == code_sources(ROOT / "chapters" / solution.name), (
            f"nbgrader's student version of {solution.name} differs from chapters/"
        )


@skip_without_grader
def test_nbgrader_autogrades_chapter_00(tmp_path):
    # chapter 00 (the shortest) also proves the guide's add_missing_cells setting: a deleted check cell comes back
    grade_chapter(NOTEBOOKS[0], tmp_path, deleted_check_cell=True)
