"""One home per concept: each test fails when a second home appears in the package.

The concepts: walking an autograd graph (``autogradlab.graph``), finding the learner's
line in a traceback and reading what an error message means (``autogradlab.tracebacks``),
flattening parameters or gradients into one vector (``torch.nn.utils.parameters_to_vector``).
Private torch reads have their own test in ``test_torch_internals.py``.

Each ``NOT_YET_MIGRATED`` entry is a file still being edited elsewhere; the lead empties the
lists (move the code to the concept's home, then delete the entry), and a second test fails
when an entry is no longer needed.
"""

import io
import re
import tokenize
from pathlib import Path

import pytest

from autogradlab.tracebacks import ERROR_KINDS

PACKAGE = Path(__file__).resolve().parent.parent / "widgets" / "autogradlab"


def _tokens(source: str) -> list[tokenize.TokenInfo]:
    return list(tokenize.generate_tokens(io.StringIO(source).readline))


def attribute_reads(source: str, names: set[str]) -> list[str]:
    """``line: .name`` for each ``x.name`` in the code (not in docstrings, comments or strings)."""
    tokens = _tokens(source)
    return [
        f"{t.start[0]}: .{t.string}"
        for i, t in enumerate(tokens)
        if t.type == tokenize.NAME and t.string in names and i and tokens[i - 1].string == "."
    ]


def error_text_tests(source: str) -> list[str]:
    """``line: 'text'`` for each ``"text" in ...`` whose text is one of the error messages ERROR_KINDS knows."""
    tokens = [t for t in _tokens(source) if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT)]
    found = []
    for i, t in enumerate(tokens[:-1]):
        following = tokens[i + 1].string
        if t.type == tokenize.STRING and (following == "in" or (following == "not" and tokens[i + 2].string == "in")):
            text = t.string.strip("rbfu").strip("\"'")
            if any(pattern.search(text) for pattern in ERROR_KINDS.values()):
                found.append(f"{t.start[0]}: {t.string}")
    return found


_FLATTEN = re.compile(r"torch\.cat\(\s*\[[^\]]*\.(reshape|view)\(-1\)[^\]]*\bfor\b")


def flatteners(source: str) -> list[str]:
    """``line: code`` for each ``torch.cat([x.reshape(-1) for ...])``: use ``parameters_to_vector``."""
    return [f"{n}: {line.strip()}" for n, line in enumerate(source.splitlines(), 1) if _FLATTEN.search(line)]


CONCEPTS = {
    # concept: (finder, its home(s), files not yet migrated)
    "graph walk (next_functions)": (
        lambda source: attribute_reads(source, {"next_functions"}),
        {"graph/traverse.py"},
        {
            # the reverse-sweep exercise's reference, and its typical wrong orders (BFS, DFS) for the
            # hints, walk the graph on purpose: they are what the learner writes
            "checks/ch01.py",
        },
    ),
    "learner's line (extract_tb / extract_stack)": (
        lambda source: attribute_reads(source, {"extract_tb", "extract_stack"}),
        {"tracebacks.py"},
        set(),
    ),
    "error text -> hint": (error_text_tests, {"tracebacks.py"}, set()),
    "flattening parameters or gradients": (
        flatteners,
        set(),
        {
            "checks/ch07.py",
            "checks/ch08.py",
            "models/loss_scale.py",
            "models/ddp_demo.py",
            "models/token_accumulation.py",
            "models/experiments/clip.py",
            "models/experiments/accumulation_rounding.py",
            "models/experiments/underflow.py",
        },
    ),
}


def _sources():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), path.read_text()


@pytest.mark.parametrize("concept", sorted(CONCEPTS))
def test_the_concept_lives_only_in_its_home(concept):
    find, homes, not_yet = CONCEPTS[concept]
    offenders = {rel: hits for rel, source in _sources() if rel not in homes | not_yet and (hits := find(source))}
    assert not offenders, f"{concept} outside its home {sorted(homes) or 'torch'}: {offenders}"


@pytest.mark.parametrize("concept", sorted(CONCEPTS))
def test_the_not_yet_migrated_list_has_no_stale_entry(concept):
    find, _, not_yet = CONCEPTS[concept]
    stale = [rel for rel in sorted(not_yet) if not (PACKAGE / rel).exists() or not find((PACKAGE / rel).read_text())]
    assert not stale, f"{concept}: remove {stale} from its not-yet-migrated list"


def test_the_finders_see_a_second_home():
    source = (
        "import torch, traceback\n"
        "def f(fn, exc, model):\n"
        "    kids = fn.next_functions\n"
        "    frames = traceback.extract_tb(exc.__traceback__)\n"
        "    if 'does not require grad' in str(exc):\n"
        "        return torch.cat([p.detach().reshape(-1) for p in model.parameters()])\n"
        "    '''fn.next_functions in a docstring is prose'''\n"
    )
    assert attribute_reads(source, {"next_functions"}) == ["3: .next_functions"]
    assert attribute_reads(source, {"extract_tb"}) == ["4: .extract_tb"]
    assert error_text_tests(source) == ["5: 'does not require grad'"]
    assert [hit.split(":")[0] for hit in flatteners(source)] == ["6"]
