"""The models chapter 11 compiles, and selective-checkpoint policies for them.

* ``"mlp"``: two residual MLP blocks with GPT-2's hand-written tanh GELU (:func:`new_gelu`, as in
  nanoGPT): a chain of pointwise ops whose intermediates eager autograd saves one by one;
* ``"block"``: chapter 08's pre-norm transformer block (LayerNorm, attention, a 4× MLP with ``F.gelu``).

>>> model, x = build("mlp")
>>> tuple(model(x).shape), sum(p.numel() for p in model.parameters())
((16, 32), 16704)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable

import torch
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from autogradlab.i18n import N_
from autogradlab.torch_internals import attention_kernels


def new_gelu(x: torch.Tensor) -> torch.Tensor:
    """GELU's tanh approximation written out, as GPT-2 and nanoGPT do: eight pointwise ops.

    >>> torch.allclose(new_gelu(torch.linspace(-3, 3, 7)), nn.functional.gelu(torch.linspace(-3, 3, 7), approximate="tanh"))
    True
    """
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GeluMLP(nn.Module):
    """``x + down(new_gelu(up(x)))`` with ``up``: width → 4·width and ``down``: 4·width → width."""

    def __init__(self, width: int, bias: bool = True):
        super().__init__()
        self.up = nn.Linear(width, 4 * width, bias=bias)
        self.down = nn.Linear(4 * width, width, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(new_gelu(self.up(x)))


def mlp_stack(depth: int, width: int, bias: bool = True, seed: int = 0) -> nn.Sequential:
    """``depth`` :class:`GeluMLP` blocks, seeded."""
    torch.manual_seed(seed)
    return nn.Sequential(*(GeluMLP(width, bias) for _ in range(depth)))


def build(name: str) -> tuple[nn.Module, torch.Tensor]:
    """A chapter model and a seeded input batch: ``"mlp"`` or ``"block"``."""
    if name == "mlp":
        model = mlp_stack(2, 32)
        return model, torch.randn(16, 32, generator=torch.Generator().manual_seed(1))
    if name == "block":
        from autogradlab.models.experiments.amp import Block  # here: the experiments package imports this module

        torch.manual_seed(0)
        return Block(32, 4), torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(1))
    raise ValueError(f"unknown model {name!r}: choose 'mlp' or 'block'")


MODELS = ("mlp", N_("block"))  # CompileView's labels, through _() ("mlp" reads the same in every language)

_ATEN = torch.ops.aten
#: The ops a "save the matmuls" policy keeps: recomputing them costs FLOPs; everything else is cheap.
MATMULS = (
    _ATEN.mm.default,
    _ATEN.addmm.default,
    _ATEN.bmm.default,
    _ATEN.baddbmm.default,
    *attention_kernels(),
)


def save_only(ops: Iterable) -> Callable:
    """A selective-checkpoint policy: save the outputs of ``ops``, recompute everything else.

    >>> policy = save_only([torch.ops.aten.mm.default])
    >>> policy(None, torch.ops.aten.mm.default).name, policy(None, torch.ops.aten.tanh.default).name
    ('MUST_SAVE', 'PREFER_RECOMPUTE')
    """
    keep = frozenset(ops)

    def policy(ctx, op, *args, **kwargs) -> CheckpointPolicy:
        return CheckpointPolicy.MUST_SAVE if op in keep else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def with_policy(model: nn.Module, policy: Callable) -> Callable[[torch.Tensor], torch.Tensor]:
    """``model`` run under ``torch.utils.checkpoint`` with a selective policy (what a compiled step calls)."""
    context = functools.partial(create_selective_checkpoint_contexts, policy)

    def forward(x: torch.Tensor) -> torch.Tensor:
        return checkpoint(model, x, use_reentrant=False, context_fn=context)

    return forward
