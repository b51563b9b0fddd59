"""Graph breaks as data: how many graphs Dynamo makes of a function, and why it broke where it did.

Dynamo reads a function's bytecode and records the tensor operations it can follow into one graph.
Where it cannot continue (a Python value computed from a tensor, ``print``, an unsupported call) it
**breaks**: the graph so far is compiled, that piece of Python runs eagerly, and a new graph starts
after it. :func:`graph_breaks` runs the function once under Dynamo's explanation API (which starts
from an empty compile cache and leaves one behind) and returns what it found.

>>> import torch
>>> def step(x):
...     y = x.sin()
...     if y.sum() > 0:
...         y = y * 2
...     return y.cos()
>>> found = graph_breaks(step, torch.ones(3))
>>> found.graphs, [(b.reason, b.line) for b in found.breaks]
(2, [('generic_jump TensorVariable()', 'if y.sum() > 0:')])
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autogradlab.models.compiled.record import quiet
from autogradlab.torch_internals import explain

_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


@dataclass(frozen=True)
class Break:
    """One graph break: Dynamo's reason (first line), its explanation (if it gives one) and your source line."""

    reason: str
    explanation: str
    line: str
    lineno: int


@dataclass(frozen=True)
class Capture:
    """What Dynamo made of one call: the number of graphs, the breaks between them, the ops it captured."""

    graphs: int
    breaks: tuple[Break, ...]
    ops: int


def _explanation(text: str) -> str:
    for line in text.splitlines()[1:]:
        if line.strip().startswith("Explanation:"):
            return _ADDRESS.sub("", line.strip().removeprefix("Explanation:").strip())
    return ""


def graph_breaks(fn: Callable, *args: Any, **kwargs: Any) -> Capture:
    """Run ``fn(*args, **kwargs)`` once under Dynamo and report its graphs and breaks (in the order met)."""
    with quiet():
        report = explain(fn, *args, **kwargs)
    breaks = []
    for found in report.break_reasons:
        frame = found.user_stack[-1] if found.user_stack else None
        breaks.append(
            Break(
                found.reason.splitlines()[0].strip(),
                _explanation(found.reason),
                (frame.line or "").strip() if frame else "",
                frame.lineno if frame else 0,
            )
        )
    return Capture(report.graph_count, tuple(breaks), report.op_count)
