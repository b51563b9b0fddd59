"""The course's text for the state table: one cell per state and parameter, and the line-by-line trace.

>>> print(trace_table([]))
line | graph | grad | param | optimizer | mode | rng
----------------------------------------------------
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from autogradlab.i18n import N_
from autogradlab.models.train_state.state import STATES, Snapshot, _changed

STATE_TITLES = {  # TrainStepInspector's row and column titles, shown through _()
    # (the cells' texts stay English: chapter 06 quotes them, e.g. "not in optimizer", in both editions)
    "graph": N_("forward graph"),
    "grad": ".grad",
    "param": N_("parameter value"),
    "optimizer": N_("optimizer state"),
    "mode": N_("module mode"),
    "rng": N_("RNG state"),
}


@dataclass(frozen=True)
class Cell:
    """One cell of the state table: ``item`` is a parameter name, or '' for a whole-model state."""

    state: str
    item: str
    text: str
    changed: bool


def _norm(t: torch.Tensor) -> float:
    return float(t.detach().double().norm())


def _optimizer_text(state: dict | None) -> str:
    if state is None:
        return "not in optimizer"
    if not state:
        return "empty"
    parts = []
    for key, value in state.items():
        if value.numel() == 1 and key == "step":
            parts.append(f"step {int(value.item())}")
        else:
            parts.append(f"‖{key}‖ {_norm(value):.3g}")
    return " · ".join(parts)


def describe(after: Snapshot, before: Snapshot | None = None) -> list[Cell]:
    """Table cells for a snapshot; ``changed`` marks cells that differ from ``before``.

    >>> from autogradlab.models.train_state.state import snapshot
    >>> m = torch.nn.Linear(2, 1)
    >>> [c.text for c in describe(snapshot(m)) if c.state == "mode"]
    ['train']
    """
    cells = [
        Cell("graph", "", str(after.graph), False),
        Cell("mode", "", after.mode, False),
        Cell("rng", "", after.rng, False),
    ]
    for name, value in after.params.items():
        grad = after.grads[name]
        grad_text = "None" if grad is None else f"‖g‖ {_norm(grad):.4g}"
        param_text = f"‖p‖ {_norm(value):.5g}"
        if before is not None and name in before.params and before.params[name].shape == value.shape:
            delta = _norm(value - before.params[name])
            if delta:
                param_text += f" (Δ {delta:.2g})"
        if not after.trainable.get(name, True):
            param_text += " · frozen"
        cells += [
            Cell("grad", name, grad_text, False),
            Cell("param", name, param_text, False),
            Cell("optimizer", name, _optimizer_text(after.optimizer[name]), False),
        ]
    if before is None:
        return cells
    return [Cell(c.state, c.item, c.text, _changed(c.state, c.item, before, after)) for c in cells]


def trace_table(history: list, width: int = 44) -> str:
    """A plain-text table: one row per executed line (cut to ``width`` characters), a ✓ under each state it changed.

    ``history``: :class:`~autogradlab.models.train_state.session.LineTrace` records (``source``, ``changed``, ``error``).
    """

    def short(source: str) -> str:
        first = source.splitlines()[0]
        return first if len(first) <= width else first[: width - 1] + "…"

    column = max([len(short(t.source)) for t in history] + [4])
    head = f"{'line':<{column}} | " + " | ".join(STATES)
    rows = [head, "-" * len(head)]
    for t in history:
        marks = " | ".join(f"{'✓' if s in t.changed else '':^{len(s)}}" for s in STATES)
        rows.append(f"{short(t.source):<{column}} | {marks}")
        if t.error:
            rows.append(f"  ✗ {t.error}")
    return "\n".join(rows)
