"""One home per concept: each test fails when a second home appears in the package.

The concepts: walking an autograd graph (``autogradlab.graph``), finding the learner's
line in a traceback and reading what an error message means (``autogradlab.tracebacks``),
flattening parameters or gradients into one vector (``torch.nn.utils.parameters_to_vector``).
Private torch reads have their own test in ``test_torch_internals.py``.

Each ``NOT_YET_MIGRATED`` entry is a file still being edited elsewhere; the lead empties the
lists (move the code to the concept's home, then delete the entry), and a second test fails
when an entry is no longer needed.
"""

import ast
import functools
import io
import re
import tokenize
from pathlib import Path

import pytest

from autogradlab.tracebacks import ERROR_KINDS

PACKAGE = Path(__file__).resolve().parent.parent / "widgets" / "autogradlab"


@functools.cache  # each concept's finder reads every file: tokenize and parse each once (callers only read them)
def _tokens(source: str) -> tuple[tokenize.TokenInfo, ...]:
    return tuple(tokenize.generate_tokens(io.StringIO(source).readline))


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


@functools.cache
def _tree(source: str) -> ast.AST:
    return ast.parse(source)


@functools.cache
def _package_names() -> frozenset[str]:
    """Every name the package defines itself (functions, classes, variables, attributes, arguments)."""
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(_tree(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
    return frozenset(names)


_ATTRIBUTE_BUILTINS = {"getattr", "hasattr", "setattr", "delattr"}
# Public API spelled with one underscore: os._exit, namedtuple's methods.
_PUBLIC_UNDERSCORE = {"_exit", "_asdict", "_replace", "_fields", "_make"}


def private_reads(source: str, own: set[str] = frozenset()) -> list[str]:
    """``line: name`` for each private attribute of someone else's object: ``x._name`` or ``getattr(x, "_name")``.

    Our own private names (defined anywhere in the package) and ``self``/``cls`` attributes are not
    reads of someone else's internals; dunder names are public protocol.
    """
    found = []
    for node in ast.walk(_tree(source)):
        name = None
        if isinstance(node, ast.Attribute) and not (
            isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
        ):
            name = node.attr
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _ATTRIBUTE_BUILTINS
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            name = node.args[1].value
        if name and name.startswith("_") and not name.startswith("__") and name not in own | _PUBLIC_UNDERSCORE:
            found.append(f"{node.lineno}: {name}")
        modules = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for module in modules:
            private = [part for part in module.split(".") if part.startswith("_") and not part.startswith("__")]
            if private and module.split(".")[0] != "autogradlab":
                found.append(f"{node.lineno}: import {module}")
                break
    return found


def _module_roots(tree: ast.AST) -> set[str]:
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
    return roots


def patches(source: str) -> list[str]:
    """``line: how`` for each replacement of an attribute while code runs: setattr/delattr, ``unittest.mock``
    patching, a ``__code__`` swap, an assignment to a module's attribute, ``sys.setprofile``/``settrace``."""
    tree = _tree(source)
    roots = _module_roots(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            if func in ("setattr", "delattr") or func.split(".")[-1] in ("setprofile", "settrace"):
                found.append(f"{node.lineno}: {func}")
            elif "patch" in func.split(".") or func.startswith(("mock.patch", "patch.")):
                found.append(f"{node.lineno}: {func}")
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute):
                    head = target
                    while isinstance(head, ast.Attribute):
                        head = head.value
                    if target.attr == "__code__" or (isinstance(head, ast.Name) and head.id in roots):
                        found.append(f"{node.lineno}: {ast.unparse(target)} = ...")
    return found


_FRAME_ATTRIBUTES = {"f_back", "f_code", "f_globals", "f_locals", "co_filename", "tb_frame", "tb_next"}


def frame_reads(source: str) -> list[str]:
    """``line: attribute`` for each read of a stack frame or traceback (``frame.f_back``, ``extract_tb`` ...)."""
    return [
        f"{node.lineno}: .{node.attr}"
        for node in ast.walk(_tree(source))
        if isinstance(node, ast.Attribute) and node.attr in _FRAME_ATTRIBUTES | {"extract_tb", "extract_stack"}
    ]


CONCEPTS = {
    # concept: (finder, its home(s), files not yet migrated)
    "graph walk (next_functions)": (
        lambda source: attribute_reads(source, {"next_functions"}),
        {"graph/traverse.py"},
        {
            # the reverse-sweep exercise's reference, and its typical wrong orders (BFS, DFS) for the
            # hints, walk the graph on purpose: they are what the learner writes
            "checks/ch01.py",
            # chapter 09's exercise graph counts the learner's reads of next_functions to bound a walk
            "models/debug_cases.py",
        },
    ),
    "reading stack frames and tracebacks (the learner's line, who called)": (
        frame_reads,
        {"tracebacks.py"},
        set(),
    ),
    "private attributes of torch objects": (
        lambda source: private_reads(source, _package_names()),
        {"torch_internals.py"},
        set(),
    ),
    "replacing attributes while code runs (refusing or observing)": (
        patches,
        # the kernel refuses what an exercise rules out; the doctor observes a training step
        {"checks/core.py", "models/doctor/observe.py"},
        set(),
    ),
    "error text -> hint": (error_text_tests, {"tracebacks.py"}, set()),
    "flattening parameters or gradients": (
        flatteners,
        set(),
        set(),
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


def test_the_concept_finders_see_a_second_home():
    source = (
        "import sys, torch\n"
        "from unittest import mock\n"
        "def f(scaler, fn, frame, helper):\n"
        "    scale = scaler._scale\n"
        "    tracker = getattr(scaler, '_growth_tracker', None)\n"
        "    setattr(torch.autograd, 'backward', fn)\n"
        "    torch.autograd.grad = fn\n"
        "    helper.__code__ = fn.__code__\n"
        "    sys.setprofile(fn)\n"
        "    with mock.patch.object(torch, 'exp', fn):\n"
        "        return frame.f_back.f_code.co_filename, self._mine\n"
    )
    assert private_reads(source) == ["4: _scale", "5: _growth_tracker"]
    assert private_reads("import torch._dynamo\nfrom torch.utils._pytree import tree_map\n") == [
        "1: import torch._dynamo",
        "2: import torch.utils._pytree",
    ]
    assert private_reads(source, own={"_scale"}) == ["5: _growth_tracker"]
    assert sorted(int(hit.split(":")[0]) for hit in patches(source)) == [6, 7, 8, 9, 10]
    assert [hit.split(": ")[1] for hit in frame_reads(source)] == [".co_filename", ".f_code", ".f_back"]


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
