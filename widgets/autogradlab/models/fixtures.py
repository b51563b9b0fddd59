"""Small models, data and measurements the chapters build on (not checkers, not the answer to an exercise).

The notebooks import them from here, and the checkers use the same builders so a check
measures what the chapter shows. Chapter 04: :func:`make_mlp`, :func:`mlp_loss`,
:func:`measure_saved_bytes`, :data:`OPS`; chapter 05: :func:`jacobians`.

>>> model = make_mlp([3, 4, 2])
>>> x = torch.randn(5, 3)
>>> params = {p.untyped_storage().data_ptr() for p in model.parameters()}
>>> _, saved = measure_saved_bytes(lambda: mlp_loss(model, x), exclude=params)
>>> saved  # float32: x (5×3), ReLU's output (5×4: saved by ReLU and the second Linear, one storage), the output (5×2)
180
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from autogradlab.graph.saved_bytes import SavedBytes

# --------------------------------------------------------------------------- chapter 04: saved tensors and memory

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "gelu": nn.GELU}


def make_mlp(
    sizes: list[int], dtype: torch.dtype = torch.float32, seed: int = 0, activation: str = "relu"
) -> nn.Sequential:
    """Linear(sizes[0], sizes[1]) -> activation -> ... -> Linear(sizes[-2], sizes[-1]) (none after the last)."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(n_in, n_out, dtype=dtype))
        if i < len(sizes) - 2:
            layers.append(ACTIVATIONS[activation]())
    return nn.Sequential(*layers)


def mlp_loss(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The loss of the exercise: mean of the squared outputs."""
    return model(x).pow(2).mean()


def saved_storages(build: Callable, exclude: set[int] = frozenset()) -> tuple[object, dict[int, int]]:
    """Run ``build()``; return its result and {storage ptr: bytes} autograd saved, in the order first saved.

    Storages whose ``data_ptr`` is in ``exclude`` (parameters) are left out. Counted by
    :class:`autogradlab.graph.saved_bytes.SavedBytes`, the one home of saved-bytes accounting.
    """
    with SavedBytes() as saved:
        result = build()
    return result, {key: s.nbytes for key, s in saved.storages.items() if key not in exclude}


def measure_saved_bytes(build: Callable, exclude: set[int] = frozenset()) -> tuple[object, int]:
    """Run ``build()``; return its result and the bytes autograd saved (each storage once, ``exclude`` left out)."""
    result, storages = saved_storages(build, exclude)
    return result, sum(storages.values())


# Chapter 04's single ops: each one is changed in place to see whether backward still runs.
OPS = {
    "exp": torch.exp,
    "sin": torch.sin,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "relu": torch.relu,
    "log": torch.log,
    "sqrt": torch.sqrt,
    "square": lambda a: a**2,
    "add_one": lambda a: a + 1,
    "times_three": lambda a: a * 3,
    "softmax": lambda a: a.softmax(-1),
    "abs": torch.abs,
    "reciprocal": torch.reciprocal,
}


# --------------------------------------------------------------------------- chapter 05: custom Functions


def jacobians(fn: Callable, args: Sequence[torch.Tensor], eps: float = 1e-6) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """For each floating input: (the Jacobian the backward gives, a central-difference Jacobian), both 2-D.

    >>> [(analytic, numeric)] = jacobians(lambda x: x.sum(), [torch.ones(3, dtype=torch.float64)])
    >>> torch.allclose(analytic, numeric), tuple(analytic.shape)
    (True, (1, 3))
    """
    leaves = [a.detach().clone().requires_grad_(True) for a in args]
    out = fn(*leaves)
    m = out.numel()
    analytic = [torch.zeros(m, a.numel(), dtype=torch.float64) for a in args]
    for k in range(m):
        e = torch.zeros(m, dtype=out.dtype)
        e[k] = 1.0
        grads = torch.autograd.grad(out, leaves, e.reshape(out.shape), retain_graph=True, allow_unused=True)
        for i, g in enumerate(grads):
            if g is not None:
                analytic[i][k] = g.reshape(-1).double()
    numeric = []
    with torch.no_grad():
        for i, a in enumerate(args):
            cols = []
            for j in range(a.numel()):
                shifted = []
                for sign in (1.0, -1.0):
                    moved = [t.detach().clone() for t in args]
                    moved[i].view(-1)[j] += sign * eps
                    shifted.append(fn(*moved).reshape(-1).double())
                cols.append((shifted[0] - shifted[1]) / (2 * eps))
            numeric.append(torch.stack(cols, dim=1) if cols else torch.zeros(m, 0, dtype=torch.float64))
    return list(zip(analytic, numeric))


__all__ = ["ACTIVATIONS", "OPS", "jacobians", "make_mlp", "measure_saved_bytes", "mlp_loss", "saved_storages"]
