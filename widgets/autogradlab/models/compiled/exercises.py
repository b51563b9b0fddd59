"""The course material behind chapter 11's exercises: the step with graph breaks, the functions whose saved
memory is read from their graphs, and the stacks a checkpoint policy must fit into a byte budget.

The checkers (:mod:`autogradlab.checks.ch11`) run these; the chapter shows them.

>>> model, x, y = step_case("clamped, large loss")
>>> with contextlib.redirect_stdout(io.StringIO()) as log:
...     loss = logged_step(model, x, y)
>>> loss.item(), log.getvalue().startswith("loss ")
(1.0, True)
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from autogradlab.i18n import N_
from autogradlab.models.compiled.course_models import mlp_stack

# --------------------------------------------------------------------------- exercise 1: saved memory from the graphs


def _norm(x, g):
    return ((x - x.mean(-1, keepdim=True)) * torch.rsqrt(x.var(-1, keepdim=True) + 1e-5) * g).sum()


def _attention(q, k, v):
    return torch.softmax(q @ k.transpose(-1, -2) / 2, -1) @ v


def _bf16_linear(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return F.silu(x @ w)


def _reshaped(x, w):
    return (x @ w).reshape(3, 16).exp().reshape(6, 8).exp()


def _seeded(*shapes, dtype=torch.float32, grad=()):
    tensors = [torch.randn(s, dtype=dtype, generator=torch.Generator().manual_seed(i)) for i, s in enumerate(shapes)]
    return tuple(t.requires_grad_(i in grad) for i, t in enumerate(tensors))


@dataclass(frozen=True)
class TracedCase:
    """A function, its inputs, the partitioner to compile it with, and what it shows."""

    label: str
    fn: Callable
    inputs: Callable[[], tuple]
    partition: str


SAVED_CASES = (
    TracedCase(
        N_("a matmul, reshaped, exp'd twice, default partition"),
        _reshaped,
        lambda: _seeded((6, 5), (5, 8), grad=(1,)),
        "default",
    ),
    TracedCase(
        N_("a layer norm by hand in float64, min-cut"),
        _norm,
        lambda: _seeded((6, 5), (5,), dtype=torch.float64, grad=(0, 1)),
        "min-cut",
    ),
    TracedCase(
        N_("attention on q, k, v, default partition"),
        _attention,
        lambda: _seeded((2, 5, 4), (2, 5, 4), (2, 5, 4), grad=(0, 1, 2)),
        "default",
    ),
    TracedCase(
        N_("a bf16-autocast matmul and SiLU, min-cut"),
        _bf16_linear,
        lambda: _seeded((6, 4), (4, 8), grad=(0, 1)),
        "min-cut",
    ),
)


# --------------------------------------------------------------------------- exercise 2: a step with graph breaks


def logged_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = model(x)
    if out.abs().max() > 10:  # outliers: clamp them
        out = out.clamp(-10, 10)
    loss = F.mse_loss(out, y)
    print(f"loss {loss.item():.4f}")
    if loss.item() > 1:  # keep a large loss at 1
        loss = loss / loss.item()
    return loss


#: label -> (input scale, target offset): small or large outputs (clamped or not), loss below or above 1
STEP_CASES = {
    N_("small outputs, small loss"): (0.1, 0.0),
    N_("small outputs, large loss"): (0.1, 3.0),
    N_("clamped, large loss"): (20.0, 0.0),
    N_("clamped, small loss"): (20.0, "clamp"),
}


def step_case(label: str) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """A fresh seeded model, batch and target for one of :data:`STEP_CASES`."""
    scale, target = STEP_CASES[label]
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(1)) * scale
    with torch.no_grad():
        out = model(x)
    noise = 0.1 * torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    y = out.clamp(-10, 10) + noise if target == "clamp" else out + target + noise
    return model, x, y


# --------------------------------------------------------------------------- exercise 3: a checkpoint policy under a byte budget

#: (tokens, width, depth, bias) of the stacks a policy must fit: sizes the page does not use
POLICY_CASES = ((16, 24, 2, True), (8, 16, 3, False), (32, 8, 1, True))
BUDGET_SHARE = 0.25  # of the bytes that saving every matmul's output would keep


def policy_case(tokens: int, width: int, depth: int, bias: bool) -> tuple[nn.Module, torch.Tensor]:
    return mlp_stack(depth, width, bias=bias), torch.randn(tokens, width, generator=torch.Generator().manual_seed(3))


def all_matmul_bytes(tokens: int, width: int, depth: int, element_size: int = 4) -> int:
    """Bytes of every matmul output of the stack: per block ``up`` (tokens × 4·width) and ``down`` (tokens × width)."""
    return depth * tokens * 5 * width * element_size


def least_recompute_flops(tokens: int, width: int, depth: int) -> int:
    """The fewest matmul FLOPs a policy within :data:`BUDGET_SHARE` recomputes: one ``up`` per block.

    Within a quarter of all matmul bytes (depth < 16) the ``down`` outputs (a fifth) fit and no ``up``
    output does (each is four fifths of its block's): saving the downs and recomputing the ups is best.
    """
    return depth * 2 * tokens * width * 4 * width


def quiet_print() -> contextlib.AbstractContextManager:
    """Swallow what ``print`` writes (the logged step logs every call)."""
    return contextlib.redirect_stdout(io.StringIO())
