"""Derivatives of scalar functions by autograd and by finite differences (chapter 00's model).

>>> import torch
>>> t = tangent(torch.sin, 0.0)
>>> (t.value, t.slope)
(0.0, 1.0)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

Fn = Callable[[torch.Tensor], torch.Tensor]

# Functions a learner can pick in the TangentExplorer; each is element-wise.
FUNCTIONS: dict[str, Fn] = {
    "x² · sin(x)": lambda x: x**2 * torch.sin(x),
    "tanh(x)": torch.tanh,
    "relu(x)": torch.relu,
    "x³ − 3x": lambda x: x**3 - 3 * x,
    "sigmoid(x)": torch.sigmoid,
}


@dataclass(frozen=True)
class Tangent:
    """f and f' at one point, with f' from autograd and from a central difference."""

    x: float
    value: float
    slope: float
    numerical_slope: float

    def line(self, xs: torch.Tensor) -> torch.Tensor:
        """The tangent line f(x0) + f'(x0)·(x − x0) at the points ``xs``."""
        return self.value + self.slope * (xs - self.x)


def tangent(fn: Fn, x0: float, h: float = 1e-6) -> Tangent:
    """Evaluate ``fn`` and its derivative at ``x0`` in float64.

    The slope comes from ``torch.autograd.grad``; the central difference
    (f(x0+h) − f(x0−h)) / 2h is computed beside it as an independent check.
    """
    x = torch.tensor(float(x0), dtype=torch.float64, requires_grad=True)
    y = fn(x)
    (slope,) = torch.autograd.grad(y, x)
    y = y.detach()
    with torch.no_grad():
        plus = fn(torch.tensor(x0 + h, dtype=torch.float64))
        minus = fn(torch.tensor(x0 - h, dtype=torch.float64))
    return Tangent(float(x0), y.item(), slope.item(), ((plus - minus) / (2 * h)).item())


def curve(fn: Fn, lo: float, hi: float, points: int = 200) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample ``fn`` on ``points`` evenly spaced x in [lo, hi] (no graph is built)."""
    if not hi > lo:
        raise ValueError(f"need hi > lo, got lo={lo}, hi={hi}")
    xs = torch.linspace(lo, hi, points, dtype=torch.float64)
    with torch.no_grad():
        return xs, fn(xs)
