"""The training-step doctor: run your own step on a few batches and get a diagnosis.

>>> import torch
>>> from autogradlab.models.doctor import diagnose
>>> torch.manual_seed(0)  # doctest: +ELLIPSIS
<torch._C.Generator object at ...>
>>> model = torch.nn.Linear(3, 1)
>>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
>>> def step(batch):
...     x, y = batch
...     opt.zero_grad()
...     loss = torch.nn.functional.mse_loss(model(x), y)
...     loss.backward()
...     opt.step()
...     return loss
>>> batches = [(torch.randn(8, 3), torch.randn(8, 1)) for _ in range(3)]
>>> diagnose(step, model, opt, batches).ok
True

The codes and what each detects: :func:`code_table` (``code_table(blind_spots=True)``
for what each misses). Observing changes nothing: the doctor never calls
``zero_grad``/``step`` itself, only reads clones, and removes every hook it installed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from autogradlab.models.doctor.findings import (
    CODES,
    UPDATE_RATIO_HIGH,
    UPDATE_RATIO_LOW,
    Code,
    Finding,
    Report,
    code_table,
)
from autogradlab.models.doctor.observe import Observer, graph_leaves, watch_scaler
from autogradlab.models.doctor.rules import run_rules

__all__ = [
    "diagnose",
    "Report",
    "Finding",
    "Code",
    "CODES",
    "code_table",
    "graph_leaves",
    "watch_scaler",
    "UPDATE_RATIO_HIGH",
    "UPDATE_RATIO_LOW",
]


def _as_optimizers(optimizer: Any) -> list[torch.optim.Optimizer]:
    optimizers = list(optimizer) if isinstance(optimizer, (list, tuple)) else [optimizer]
    for opt in optimizers:
        if not isinstance(opt, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer (or a list of them), got {type(opt).__name__}")
    if not optimizers:
        raise ValueError("optimizer is an empty list: pass the optimizer your step uses")
    return optimizers


def diagnose(
    train_step: Callable[[Any], Any],
    model: nn.Module,
    optimizer: torch.optim.Optimizer | list[torch.optim.Optimizer],
    batches: Iterable[Any],
    scaler: Any = None,
    *,
    max_steps: int | None = None,
) -> Report:
    """Run ``train_step(batch)`` for each batch (a few are enough) and report what looks wrong.

    ``train_step`` is your complete step (zero_grad, forward, backward, step, ...) and
    should return the loss. Pass the ``model`` and ``optimizer`` it uses, and the
    GradScaler as ``scaler`` if it uses one. A step that raises becomes a
    ``step-raised`` finding quoting your line; the doctor stops there.

    >>> report = diagnose(step, model, opt, batches)      # doctest: +SKIP
    >>> report.codes, report.ok                            # doctest: +SKIP
    (set(), True)
    """
    if not callable(train_step):
        raise TypeError(f"train_step must be a function taking one batch, got {type(train_step).__name__}")
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    optimizers = _as_optimizers(optimizer)
    if scaler is not None and not (hasattr(scaler, "step") and hasattr(scaler, "is_enabled")):
        raise TypeError(f"scaler must be a torch.amp.GradScaler (or None), got {type(scaler).__name__}")
    if isinstance(batches, torch.Tensor):
        raise TypeError("batches must be a list (or DataLoader) of batches, not a single tensor: wrap it as [batch]")
    with Observer(model, optimizers, scaler) as observer:
        for batch in batches:
            if max_steps is not None and len(observer.steps) >= max_steps:
                break
            if not observer.run_step(train_step, batch):
                break
    if not observer.steps:
        raise ValueError("batches is empty: pass a few batches (a list or a DataLoader), e.g. 3")
    return Report(run_rules(observer), steps=len(observer.steps), losses=[s.loss for s in observer.steps])
