"""Seeded set-ups on which chapters 07 and 08 run a training step: models, micro-batches, optimizers, scalers.

Each builder returns fresh objects for a seed, so a learner's step, the reference step and
each wrong variant start from the same state (``autogradlab.checks.stateful.run_variants``).
The token data of chapter 07 lives in :mod:`autogradlab.models.token_accumulation`.

>>> model, optimizer, scaler, window = amp_window(0, input_scale=3.0, overflow=True)
>>> len(window), window[1][0][0, 0].item(), scaler.get_scale()
(3, inf, 4096.0)
"""

from __future__ import annotations

import torch
from torch import nn


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def regression_mlp(seed: int, sizes=(5, 4, 2), dtype: torch.dtype = torch.float64) -> nn.Sequential:
    """Linear → tanh → Linear, seeded (chapter 07, Exercise 1's model)."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(sizes[0], sizes[1]), nn.Tanh(), nn.Linear(sizes[1], sizes[2])).to(dtype)


def regression_micro_batches(seed: int, count: int, size: int = 3, dims=(5, 2), dtype=torch.float64, scale=1.0):
    """``count`` micro-batches ``(inputs, targets)`` of ``size`` samples, Gaussian times ``scale``."""
    gen = _gen(200 + seed)
    return [tuple(torch.randn(size, d, generator=gen, dtype=dtype) * scale for d in dims) for _ in range(count)]


def stale_gradients(model: nn.Module, seed: int) -> None:
    """Fill ``.grad`` with large leftovers (e.g. from a logging pass), so they cannot hide in a tolerance."""
    gen = _gen(900 + seed)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=gen, dtype=p.dtype) * 5


AMP_INIT_SCALE = 2.0**12


def amp_window(seed: int, input_scale: float, overflow: bool):
    """Chapter 07, Exercise 3: a float32 MLP, SGD, ``GradScaler('cpu')`` growing after every good step, 3 micro-batches.

    ``input_scale`` puts the window's gradient norm above or below the clip threshold;
    ``overflow`` writes an inf into one input, so the window's gradients overflow.
    """
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=AMP_INIT_SCALE, growth_interval=1)
    window = regression_micro_batches(100 + seed, 3, size=4, dims=(6, 3), dtype=torch.float32, scale=input_scale)
    if overflow:
        window[1][0][0, 0] = float("inf")
    return model, optimizer, scaler, window


def two_optimizer_model(seed: int, scaler: torch.amp.GradScaler | None):
    """Chapter 08, Exercise 2: an MLP whose first layer (momentum SGD) and last layer (SGD) have their own optimizer."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))
    optimizers = [
        torch.optim.SGD(model[0].parameters(), lr=0.1, momentum=0.9),
        torch.optim.SGD(model[2].parameters(), lr=0.05),
    ]
    return model, optimizers, scaler


def spread_gradient(gen: torch.Generator, n: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``n`` gradient elements whose sizes span six orders of magnitude (chapter 08, Exercise 3)."""
    g = torch.randn(n, generator=gen, dtype=torch.float64)
    return (g * 10.0 ** (-6 * torch.rand(n, generator=gen, dtype=torch.float64))).to(dtype)
