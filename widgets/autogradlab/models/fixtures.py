"""Small models, data and measurements the chapters build on (not checkers, not the answer to an exercise).

The notebooks import them from here, and the checkers use the same builders so a check
measures what the chapter shows. Chapter 04: :func:`make_mlp`, :func:`mlp_loss`,
:func:`memory_peak`, :data:`OPS` (saved bytes are counted by :mod:`autogradlab.graph.saved_bytes`);
chapter 05: :func:`jacobians`.

>>> from autogradlab.graph.saved_bytes import SavedBytes
>>> model = make_mlp([3, 4, 2])
>>> with SavedBytes(exclude=model.parameters()) as saved:
...     loss = mlp_loss(model, torch.randn(5, 3))
>>> saved.total  # float32: x (5×3), ReLU's output (5×4: saved by ReLU and the second Linear, one storage), the output (5×2)
180
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn

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


#: The memory profiler's categories, in the order of its timeline (``export_memory_timeline``).
MEMORY_KINDS = (
    "parameters",
    "optimizer state",
    "input",
    "temporaries",
    "activations",
    "gradients",
    "activation gradients",  # the profiler's AUTOGRAD_DETAIL: gradients flowing backward through the activations
    "unknown",
)


@dataclass(frozen=True)
class MemoryPeak:
    """What was alive when a training step held the most memory (bytes): the total and its kinds."""

    peak: int
    by_kind: dict[str, int]


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence the profiler's own C++ log lines (they carry timestamps) for the duration of the block."""
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def memory_peak(step: Callable[[], object]) -> MemoryPeak:
    """Run ``step()`` once under ``torch.profiler``'s memory profiler (CPU) and return the peak of live bytes.

    The profiler sorts every allocation into :data:`MEMORY_KINDS` from the graph and the optimizer it
    sees; the timeline is read at the moment the total is highest. Run the step once before, so the
    optimizer state exists (the first step creates it).

    >>> model = make_mlp([8, 8, 2])
    >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> def step():
    ...     optimizer.zero_grad()
    ...     mlp_loss(model, torch.ones(4, 8)).backward()
    ...     optimizer.step()
    >>> measured = memory_peak(step)
    >>> measured.peak == sum(measured.by_kind.values()), measured.by_kind["parameters"]
    (True, 360)
    """
    from torch.profiler import ProfilerActivity, profile

    options = {"activities": [ProfilerActivity.CPU], "profile_memory": True, "record_shapes": True, "with_stack": True}
    with _quiet_stderr(), warnings.catch_warnings(), tempfile.TemporaryDirectory() as folder:
        warnings.simplefilter("ignore")  # export_memory_timeline is deprecated in favour of a CUDA-only recorder
        with profile(**options) as profiler:
            step()
        path = os.path.join(folder, "timeline.json")
        profiler.export_memory_timeline(path, device="cpu")
        with open(path) as file:
            _, sizes = json.load(file)
    at_peak = max(sizes, key=sum)[1:]  # index 0 of each row is unused
    return MemoryPeak(sum(at_peak), dict(zip(MEMORY_KINDS, at_peak)))


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


__all__ = ["ACTIVATIONS", "MEMORY_KINDS", "OPS", "MemoryPeak", "jacobians", "make_mlp", "memory_peak", "mlp_loss"]
