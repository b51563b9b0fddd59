"""A ``train_step`` run line by line, with a snapshot of the six states after every line.

>>> session = StepSession()
>>> [t.changed for t in session.run()][:2]
[['mode'], []]
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from autogradlab.models.stepper import Stepper
from autogradlab.models.train_state.state import Snapshot, changed_states, snapshot
from autogradlab.models.train_state.table import Cell, describe


def train_step(model, batch, optimizer, loss_fn, device="cpu", max_norm=0.5):
    """The robust training step of chapter 06 (the inspector's default program).

    >>> train_step(**small_setup()).grad_fn is None
    True
    """
    model.train()
    inputs, targets = batch[0].to(device), batch[1].to(device)
    optimizer.zero_grad(set_to_none=True)
    outputs = model(inputs)
    loss = loss_fn(outputs, targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.detach()


def small_setup(seed: int = 0) -> dict:
    """A small MLP with Dropout, an Adam optimizer that has taken one step, a batch, and MSE.

    The model is left in eval mode (as after a validation pass) and its ``.grad``
    buffers are full, so every line of :func:`train_step` has something to change.

    >>> sorted(small_setup())
    ['batch', 'loss_fn', 'model', 'optimizer']
    """
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = torch.nn.Sequential()
    model.add_module("hidden", torch.nn.Linear(4, 8))
    model.add_module("act", torch.nn.ReLU())
    model.add_module("drop", torch.nn.Dropout(0.5))
    model.add_module("out", torch.nn.Linear(8, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loss_fn = torch.nn.MSELoss()
    batch = (torch.randn(16, 4, generator=gen), torch.randn(16, 2, generator=gen))
    loss_fn(model(batch[0]), batch[1]).backward()
    optimizer.step()
    model.eval()
    return {"model": model, "batch": batch, "optimizer": optimizer, "loss_fn": loss_fn}


def _graph_roots(values: Iterable) -> list[torch.Tensor]:
    roots = []
    for value in values:
        items = value if isinstance(value, (list, tuple)) else (value,)
        roots.extend(v for v in items if isinstance(v, torch.Tensor))
    return roots


@dataclass(frozen=True)
class LineTrace:
    """One executed line: which states it changed, and the error it raised (or None)."""

    source: str
    changed: list[str]
    error: str | None


class StepSession:
    """A ``train_step`` run line by line on a fresh setup, with a snapshot after every line.

    ``step``: a function whose arguments are filled from ``setup()``'s dict (by name);
    ``setup``: returns at least ``model`` (and usually ``optimizer``, ``batch``, ``loss_fn``).

    >>> session = StepSession()
    >>> session.next().line.source
    'model.train()'
    >>> session.changed
    ['mode']
    """

    def __init__(self, step=None, setup=None):
        self.step_fn = step or train_step
        self.setup = setup or small_setup
        self.reset()

    def reset(self) -> None:
        """Rebuild the setup (same seed, same state) and go back before the first line."""
        objects = self.setup()
        if "model" not in objects:
            raise ValueError("setup() must return a dict with at least a 'model' entry")
        self.model, self.optimizer = objects["model"], objects.get("optimizer")
        wanted = inspect.signature(self.step_fn).parameters
        arguments = {k: v for k, v in objects.items() if k in wanted}
        self.stepper = Stepper(self.step_fn, arguments)
        self.before = self.current = self._snapshot()
        self.last = None
        self.history: list[LineTrace] = []

    def _snapshot(self) -> Snapshot:
        return snapshot(self.model, self.optimizer, _graph_roots(self.stepper.locals.values()))

    @property
    def lines(self):
        return self.stepper.lines

    @property
    def done(self) -> bool:
        return self.stepper.done

    @property
    def error(self) -> str | None:
        return self.stepper.error

    @property
    def changed(self) -> list[str]:
        """States changed by the last line run."""
        return self.history[-1].changed if self.history else []

    def next(self):
        """Run the next line and snapshot the state after it."""
        result = self.stepper.step()
        self.before, self.current = self.current, self._snapshot()
        self.last = result
        self.history.append(LineTrace(result.line.source, changed_states(self.before, self.current), result.error))
        return result

    def run(self) -> list[LineTrace]:
        """Run the remaining lines; returns the trace of every line run so far."""
        while not self.done:
            self.next()
        return self.history

    def cells(self) -> list[Cell]:
        """The state table after the last line, marking what that line changed."""
        return describe(self.current, self.before if self.history else None)
