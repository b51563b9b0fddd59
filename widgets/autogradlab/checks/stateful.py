"""What the stateful checkers (chapters 06–09) share: run a learner's training step and watch it.

:func:`recorded_scaler_calls` logs the calls a ``GradScaler`` receives, in order.
``torch.optim.Optimizer`` has public step hooks (``register_step_pre_hook`` /
``register_step_post_hook``): use those to watch an optimizer. ``GradScaler`` has none,
so this is the one place that wraps a scaler's methods, for one object, and undoes it.

>>> import torch
>>> model = torch.nn.Linear(2, 1)
>>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
>>> scaler = torch.amp.GradScaler("cpu")
>>> with recorded_scaler_calls(scaler) as calls:
...     scaler.scale(model(torch.ones(1, 2)).sum()).backward()
...     scaler.step(optimizer)
...     scaler.update()
>>> calls, "step" in vars(scaler)  # scaler.step unscales itself when the learner did not
(['scale', 'step', 'unscale_', 'update'], False)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

SCALER_METHODS = ("scale", "unscale_", "step", "update")


@contextlib.contextmanager
def recorded_scaler_calls(scaler: torch.amp.GradScaler, methods=SCALER_METHODS) -> Iterator[list[str]]:
    """Log the names of ``scaler``'s ``methods`` as they are called, in order; the list stays readable after.

    Instance attributes shadow the class's methods for this one object only (GradScaler has
    no hooks to observe it otherwise); they are removed on exit.
    """
    log: list[str] = []
    for method in methods:
        original = getattr(scaler, method)

        def recorded(*args, _original=original, _method=method, **kwargs):
            log.append(_method)
            return _original(*args, **kwargs)

        setattr(scaler, method, recorded)
    try:
        yield log
    finally:
        for method in methods:
            vars(scaler).pop(method, None)


__all__ = ["SCALER_METHODS", "recorded_scaler_calls"]
