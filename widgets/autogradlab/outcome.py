"""Show what came of running some code, value or exception, without the code announcing which.

A **Predict** cell that asks "what does this do?" runs the code through :func:`outcome`, so the
cell's own source has no ``try/except`` that tells the learner an error is coming:

>>> import torch
>>> outcome(lambda: torch.ones(2) * 3)
tensor([3., 3.])
>>> outcome(lambda: torch.ones(2) @ torch.ones(3))
RuntimeError: inconsistent tensor size, expected tensor [2] and src [3] to have the same number of elements, but got 2 and 3 elements respectively
>>> outcome(lambda: None)
None
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def outcome(thunk: Callable[[], Any]) -> None:
    """Run ``thunk()``; print its value (its repr), or the exception's type and the first line of its message."""
    try:
        value = thunk()
    except Exception as exc:  # noqa: BLE001  showing the error is the point
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"{type(exc).__name__}: {first}" if first else type(exc).__name__)
        return
    print(repr(value))


__all__ = ["outcome"]
