"""Chapter 01's forward passes, whose graphs depend on what the code does: the page and its checker run these.

* :func:`branchy_forward`: an ``if`` and a ``for`` on its arguments (the page's example).
* :func:`routed_forward`: an ``if`` and a ``for`` on values it computes (exercise 1).
* :func:`broken_scaled_scores`: right values, a graph cut in three places (exercise 2).

>>> params = {n: torch.ones(3, requires_grad=True) for n in "abcd"}
>>> branchy_forward(torch.ones(2, 3), params, "plain", 0).backward()
>>> [n for n, p in params.items() if p.grad is not None]
['a']
"""

from __future__ import annotations

import torch


def branchy_forward(x: torch.Tensor, params: dict, mode: str, steps: int) -> torch.Tensor:
    """A forward pass whose graph depends on Python control flow over its arguments."""
    h = x * params["a"]
    if mode == "gate":
        h = h * torch.sigmoid(params["b"])
    for _ in range(steps):
        h = torch.tanh(h + params["c"])
    scale = params["d"].detach()
    return (h * scale).sum()


def routed_forward(x: torch.Tensor, params: dict) -> torch.Tensor:
    """A forward pass whose graph depends on the values it computes: x is (N, 3), a is (3, 4), b, c, d are (4,)."""
    h = torch.relu(x @ params["a"])
    if h.sum() > 1.0:
        h = h * torch.sigmoid(params["b"])
    for _ in range(int(x.abs().max())):
        h = torch.tanh(h + params["c"])
    return (h * params["d"].detach()).sum()


def broken_scaled_scores(x: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """Standardise ``x`` over all its elements, cap the scores at ±3, divide by a learned temperature.

    The values are right; the graph is cut in three places.
    """
    mean = x.mean().item()
    std = torch.tensor(x.std(), dtype=x.dtype)
    z = (x - mean) / std.clamp_min(1e-6)
    with torch.no_grad():
        z = z.clamp(-3.0, 3.0)
    return z / temperature.to(x.dtype)
