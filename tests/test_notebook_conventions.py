"""Every solution notebook follows the course's shape (see DESIGN.md): question first,
summary table last, checkers from its own chapter module, Python 3 kernel, no stray state."""

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(params=SOLUTIONS, ids=[p.name for p in SOLUTIONS])
def notebook(request):
    return request.param, nbformat.read(request.param, as_version=4)


def test_opens_with_title_and_question(notebook):
    path, nb = notebook
    first = nb.cells[0]
    assert first.cell_type == "markdown"
    assert first.source.startswith(f"# {path.name[:2]} · "), "title '# NN · Topic' first"
    assert "**The question this chapter answers:**" in first.source


def test_ends_with_a_summary_table(notebook):
    _, nb = notebook
    summaries = [c for c in nb.cells if c.cell_type == "markdown" and "## Summary" in c.source]
    assert summaries, "a '## Summary' section is missing"
    assert re.search(r"^\|.*\|$", summaries[-1].source.split("## Summary", 1)[1], re.M), "the summary needs a table"


def test_imports_checkers_of_its_own_chapter(notebook):
    path, nb = notebook
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    modules = set(re.findall(r"autogradlab\.checks\.(ch\d\d)", code))
    assert modules <= {f"ch{path.name[:2]}"}, f"checkers must come from autogradlab.checks.ch{path.name[:2]}"
    if any(c.metadata.get("nbgrader", {}).get("grade") for c in nb.cells):
        assert modules, "a notebook with check cells imports its chapter's checkers"


def test_python3_kernel_and_fully_executed(notebook):
    _, nb = notebook
    assert nb.metadata["kernelspec"]["name"] == "python3"
    counts = [c.execution_count for c in nb.cells if c.cell_type == "code"]
    assert all(counts), "solutions are committed executed: run `make execute NB=...`"
    assert counts == list(range(1, len(counts) + 1)), "executed top to bottom in one kernel"


def test_no_error_outputs_in_solutions(notebook):
    _, nb = notebook
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            assert output.output_type != "error", f"a solution cell raised: {cell.source[:80]}"


PREDICT = re.compile(r"\*\*Predict(?::\*\*|\*\*)")
CHAPTERS = ROOT / "chapters"


def _prompt_answer_pairs(nb):
    """(prompt markdown index, index of the code cell that answers it) for every **Predict** prompt."""
    pairs = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown" and PREDICT.search(cell.source):
            nxt = next((j for j in range(i + 1, len(nb.cells)) if nb.cells[j].cell_type == "code"), None)
            pairs.append((i, nxt))
    return pairs


def test_predict_prompts_are_answered_by_a_tagged_cell(notebook):
    """The cell after a **Predict** prompt is tagged answers-prediction, so the release hides its output."""
    path, nb = notebook
    for prompt, answer in _prompt_answer_pairs(nb):
        assert answer is not None, f"{path.name} cell {prompt}: a Predict prompt with no code cell after it"
        tags = nb.cells[answer].metadata.get("tags", [])
        assert "answers-prediction" in tags, (
            f"{path.name} cell {answer} answers the Predict prompt in cell {prompt}: tag it 'answers-prediction'"
        )


def test_no_predict_answer_is_visible_in_chapters(notebook):
    """In chapters/, the learner sees no output of a cell that answers a Predict prompt before running it."""
    path, _ = notebook
    chapter = nbformat.read(CHAPTERS / path.name, as_version=4)
    for prompt, answer in _prompt_answer_pairs(chapter):
        assert answer is None or not chapter.cells[answer].get("outputs"), (
            f"chapters/{path.name} cell {answer} shows the answer to the Predict prompt in cell {prompt}"
        )


def test_states_its_estimated_time_by_the_course_rule(notebook):
    """The first cell states the time the pace rule computes (autogradlab.release.pace), at most MAX_MINUTES."""
    from autogradlab.release.pace import MAX_MINUTES, estimate

    path, nb = notebook
    pace = estimate(nb)
    headings = [c for c in nb.cells if c.cell_type == "markdown" and re.search(r"^#+ *Exercise\b", c.source, re.M)]
    assert len(pace.exercise_minutes) == len(headings), (
        f"{path.name}: every exercise heading states its time, e.g. '### Exercise 1 — the VJP of softmax (about 15 min)'"
    )
    assert pace.stated is not None, (
        f"{path.name}: the first cell needs '*Estimated time: about {pace.rounded} minutes.*'"
    )
    assert pace.stated == pace.rounded, (
        f"{path.name} states {pace.stated} minutes; the rule gives {pace.minutes} → about {pace.rounded} minutes "
        f"({pace.words} words, {pace.demo_cells} demo cells, exercises {pace.exercise_minutes})"
    )
    assert pace.rounded <= MAX_MINUTES, f"{path.name} needs about {pace.rounded} minutes; trim or split it"


# --- Predict prompts the cell's own code answers (answer-bearing labels, announcing try/except) ---

# Words in a print label or a comment that state a verdict the learner was asked to predict.
VERDICT = re.compile(
    r"\b(doubled?|twice|triples?|halved|accumulat(ed|es)|equals?|same as|agrees?|identical|raises|raised|fails?|failed|"
    r"no error|works|worked|ran|runs|because|should|rightly|wrongly|correct(ly)?|wrong)\b|\d\s*[×x]\s*\w",
    re.I,
)


def verdicts_in_code(source: str) -> list[str]:
    """String literals (print labels, f-string parts) and comments of ``source`` that state a verdict."""
    import ast
    import io
    import tokenize

    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    texts = [n.value for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    texts += [t.string for t in tokenize.generate_tokens(io.StringIO(code).readline) if t.type == tokenize.COMMENT]
    return [text for text in texts if VERDICT.search(text)]


def announces_an_error(source: str) -> bool:
    """Whether ``source`` wraps code in try/except: the cell then tells the learner an error is expected."""
    import ast

    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    return any(isinstance(node, ast.Try) for node in ast.walk(ast.parse(code)))


def test_a_predict_cell_does_not_announce_its_answer(notebook):
    """The answer appears only in the output: no verdict in labels or comments, no try/except around the code
    (print bare values under neutral names; show an error with ``autogradlab.outcome.outcome(lambda: ...)``)."""
    path, nb = notebook
    problems = []
    for _, answer in _prompt_answer_pairs(nb):
        source = nb.cells[answer].source
        if announces_an_error(source):
            problems.append(f"cell {answer}: try/except announces the error (use outcome(lambda: ...))")
        problems += [f"cell {answer}: {text.strip()[:70]!r} states the answer" for text in verdicts_in_code(source)]
    assert not problems, f"{path.name}, Predict prompts answered by their own cell's code:\n" + "\n".join(problems)


def test_the_answer_finders_can_fail():
    source = 'try:\n    y.backward()\nexcept RuntimeError:\n    pass\nprint(f"(accumulated: 2 × 2w) {x}")  # doubled\n'
    assert announces_an_error(source)
    assert len(verdicts_in_code(source)) == 2
    assert not announces_an_error("outcome(lambda: y.backward())") and not verdicts_in_code('print("w.grad =", w)')
