"""Run the body of a Python function one top-level statement at a time.

TrainStepInspector uses this to stop after every line of a ``train_step`` and take a
snapshot. The function's source is read with :mod:`inspect` (functions defined in a
notebook cell work), its arguments are bound as in a real call, and each statement
runs in one namespace, so later lines see what earlier lines assigned.

>>> def f(x):
...     y = x + 1
...     return y * 2
>>> s = Stepper(f, {"x": 3})
>>> [s.step().line.source for _ in range(2)], s.returned
(['y = x + 1', 'return y * 2'], 8)
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from autogradlab.tracebacks import learner_frame

_RETURN = "__stepper_return__"


@dataclass(frozen=True)
class Line:
    """One statement of the function body: its position, source text and line number in the function."""

    index: int
    source: str
    lineno: int


@dataclass(frozen=True)
class LineResult:
    """What running one statement did: ``error`` is None, or a one-paragraph message naming the line."""

    line: Line
    error: str | None


def function_lines(fn: Callable) -> tuple[list[Line], list[ast.stmt], str]:
    """The top-level statements of ``fn``'s body (docstring skipped), with their source.

    Raises ValueError with a readable message when the source is not available.
    """
    if not inspect.isfunction(fn):
        raise TypeError(f"expected a function defined with `def`, got {type(fn).__name__}")
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as exc:
        raise ValueError(
            f"cannot read the source of {fn.__name__}: define it with `def` in a cell or a file ({exc})"
        ) from None
    try:
        tree = ast.parse(source)
    except SyntaxError:
        raise ValueError(f"{fn.__name__} is not a plain `def` function (a lambda inside an expression?)") from None
    defs = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not defs or defs[0].name != fn.__name__:
        raise ValueError(f"{fn.__name__} is not a plain `def` function (a lambda or a decorated wrapper?)")
    body = list(defs[0].body)
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        if isinstance(body[0].value.value, str):
            body = body[1:]
    first = defs[0].lineno
    lines = [
        Line(i, ast.get_source_segment(source, stmt) or "", stmt.lineno - first + 1) for i, stmt in enumerate(body)
    ]
    return lines, body, fn.__name__


def _compile(stmt: ast.stmt, filename: str):
    if isinstance(stmt, ast.Return):  # a top-level `return` is not allowed in exec: store the value instead
        value = stmt.value if stmt.value is not None else ast.Constant(None)
        stmt = ast.copy_location(ast.Assign(targets=[ast.Name(_RETURN, ast.Store())], value=value), stmt)
    module = ast.fix_missing_locations(ast.Module(body=[stmt], type_ignores=[]))
    return compile(module, filename, "exec")


class Stepper:
    """Execute ``fn(**arguments)`` statement by statement.

    ``step()`` runs the next statement and returns a :class:`LineResult`; an exception
    in the learner's code stops the run and is reported with the line that raised.
    ``namespace`` holds the function's local variables after each step.
    """

    def __init__(self, fn: Callable, arguments: Mapping[str, Any]):
        self.lines, self._body, self.name = function_lines(fn)
        try:
            bound = inspect.signature(fn).bind(**arguments)
        except TypeError as exc:
            raise TypeError(f"cannot call {fn.__name__} with {sorted(arguments)}: {exc}") from None
        bound.apply_defaults()
        # A copy of the globals plus the locals in one dict: comprehensions and
        # nested functions inside the body then see the local names, as in a real call.
        self.namespace: dict[str, Any] = dict(fn.__globals__)
        self.namespace.update(bound.arguments)
        self._local_names = set(bound.arguments)
        self.position = 0
        self.error: str | None = None
        self.returned: Any = None
        self.finished = False

    @property
    def locals(self) -> dict[str, Any]:
        """The function's local variables so far (arguments and names assigned by executed lines)."""
        return {k: self.namespace[k] for k in self._local_names if k in self.namespace}

    @property
    def done(self) -> bool:
        return self.finished or self.error is not None

    def step(self) -> LineResult:
        """Run the next statement. Raises StopIteration when nothing is left to run."""
        if self.done:
            raise StopIteration("the function has finished (or raised); reset to run it again")
        line, stmt = self.lines[self.position], self._body[self.position]
        self._local_names |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        error = None
        try:
            exec(_compile(stmt, f"<{self.name}>"), self.namespace)  # noqa: S102 - the learner's own code
        except Exception as exc:  # the learner's bug, reported in the view
            error = _explain(exc, line, self.name)
        self.position += 1
        if error is not None:
            self.error = error
        elif isinstance(stmt, ast.Return):
            self.returned = self.namespace.pop(_RETURN, None)
            self.finished = True
        elif self.position == len(self.lines):
            self.finished = True
        return LineResult(line, error)

    def run(self) -> list[LineResult]:
        """Run all remaining statements (stops at the first error)."""
        results = []
        while not self.done:
            results.append(self.step())
        return results


def _explain(exc: BaseException, line: Line, name: str) -> str:
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    # The deepest frame in the learner's own helpers (not torch's internals) says most.
    last = learner_frame(exc)
    where = ""
    if last is not None and last.filename != f"<{name}>" and last.line:
        where = f" (inside the call, at: {last.line.strip()})"
    return (
        f"line {line.lineno} of {name}, `{line.source.splitlines()[0]}`, raised {type(exc).__name__}: {message}{where}"
    )
