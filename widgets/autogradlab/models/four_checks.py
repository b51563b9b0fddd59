"""Data, models and reference loops of chapter 10's four checks before debugging (Karpathy's recipe, 2019).

The notebook and the checkers use the same ones: :func:`clusters` (2-D points of three classes in unequal
shares), :func:`entropy` (the loss of the best input-independent prediction), :class:`SmallClassifier`
(batch norm, so its two modes differ), :func:`overfit` (train a copy on one batch), the four models of the
dependency chart and :func:`dependencies` (‖∂ out_i / ∂ x_j‖ from the full Jacobian).

>>> x, y = clusters(6, seed=0)
>>> tuple(x.shape), tuple(y.shape), y.dtype
((6, 2), (6,), torch.int64)
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn

CLASS_SHARES = (0.6, 0.3, 0.1)


def clusters(n: int, seed: int = 0, shares: tuple[float, ...] = CLASS_SHARES) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` 2-D points (n, 2) in three separate clusters, and their class (n,), drawn with probabilities ``shares``."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.tensor([[2.0, 0.0], [-1.0, 1.7], [-1.0, -1.7]])
    y = torch.multinomial(torch.tensor(shares), n, replacement=True, generator=gen)
    return centres[y] + 0.6 * torch.randn(n, 2, generator=gen), y


def entropy(labels: torch.Tensor) -> float:
    """The labels' entropy H(p̂) in nats: the cross-entropy of the best input-independent prediction.

    >>> round(entropy(torch.tensor([0, 1, 0, 1])), 4)  # ln 2
    0.6931
    """
    p = torch.bincount(labels).double() / len(labels)
    p = p[p > 0]
    return float(-(p * p.log()).sum())


class SmallClassifier(nn.Module):
    """Linear → BatchNorm → ReLU → linear: a classifier whose training and eval modes compute different things."""

    def __init__(self, hidden: int = 32, d_in: int = 2, classes: int = 3):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x):
        return self.net(x)


def overfit(model: nn.Module, loss_fn: Callable, batch, steps: int = 100, lr: float = 1e-2) -> list[float]:
    """Train a deep copy of ``model`` (in training mode) on one batch with Adam; the loss of every step, before its update.

    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> losses = overfit(SmallClassifier(), nn.functional.cross_entropy, clusters(8), steps=50, lr=0.05)
    >>> losses[-1] < 0.05 < losses[0]
    True
    """
    copied = copy.deepcopy(model)
    copied.train()
    optimizer = torch.optim.Adam(copied.parameters(), lr=lr)
    x, y = batch
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = loss_fn(copied(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


# --------------------------------------------------------------------------- models for the dependency chart


class PerExample(nn.Module):
    """An MLP: every example's output depends on that example's input only."""

    def __init__(self, d_in: int = 4, d_out: int = 3, softmax: bool = False):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, 8), nn.Tanh(), nn.Linear(8, d_out))
        self.softmax = softmax

    def forward(self, x):
        out = self.net(x)
        return out.softmax(dim=-1) if self.softmax else out


class TimeMean(nn.Module):
    """Sequences (B, T, D) → (B, D): a per-step linear layer, then the mean over time.

    ``bug=True`` takes the mean through ``view(T, B, D)``, as if the batch were time-major: a reshape that
    mixes examples (the intended op is ``mean(dim=1)``)."""

    def __init__(self, d: int = 3, bug: bool = False):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.bug = bug

    def forward(self, x):
        h = torch.tanh(self.lin(x))
        batch, steps, d = h.shape
        return h.view(steps, batch, d).mean(dim=0) if self.bug else h.mean(dim=1)


class Normed(nn.Module):
    """Linear → BatchNorm → linear, one output per example (B,): in training mode batch norm normalises with
    the batch's statistics, so every output depends on every example."""

    def __init__(self, d_in: int = 4):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, 6), nn.BatchNorm1d(6), nn.Tanh(), nn.Linear(6, 1))

    def forward(self, x):
        return self.net(x).squeeze(1)


class PerStep(nn.Module):
    """Sequences (B, T, D) → per-step class scores (B, T, C), no mixing across examples."""

    def __init__(self, d: int = 3, classes: int = 2):
        super().__init__()
        self.lin = nn.Linear(d, classes)

    def forward(self, x):
        return self.lin(x).log_softmax(dim=-1)


def dependencies(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """D[i, j] = ‖∂ model(x)[i] / ∂ x[j]‖ (Frobenius), from the full Jacobian; buffers may change (batch norm).

    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> d = dependencies(PerExample(), torch.randn(3, 4))
    >>> bool((d - torch.diag(d.diag())).abs().max() == 0)
    True
    """
    jac = torch.autograd.functional.jacobian(model, x)  # out.shape + x.shape
    batch = x.shape[0]
    out_per, in_per = jac.numel() // (batch * x.numel()), x.numel() // batch
    return jac.reshape(batch, out_per, batch, in_per).permute(0, 2, 1, 3).reshape(batch, batch, -1).norm(dim=-1)
