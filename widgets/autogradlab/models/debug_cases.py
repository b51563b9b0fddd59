"""The data, models and reference step of chapter 09's case studies: one home for the notebook and its checkers.

Generated data (nothing downloads): :func:`stripes` (images of horizontal or vertical stripes) and
:func:`blobs` (points around class centres), cut into batches by :func:`batches_of`. Case 1 trains
:class:`TinyConvNet`; :func:`reference_amp_step` is its training step done right under fp16 autocast,
with the constants its exercise states.

>>> x, y = stripes(4)
>>> tuple(x.shape), tuple(y.shape), len(batches_of(x, y, 3))
((4, 1, 12, 12), (4,), 2)
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from autogradlab.i18n import _


def stripes(n: int, seed: int = 0, size: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` noisy stripe images (n, 1, size, size) and labels (n,) as floats: 1 = horizontal, 0 = vertical."""
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=gen).float()
    phase = torch.rand(n, 1, 1, generator=gen) * 2 * math.pi
    period = 3 + torch.rand(n, 1, 1, generator=gen) * 3
    r = torch.arange(size, dtype=torch.float32)
    rows = torch.sin(2 * math.pi * r.view(1, -1, 1) / period + phase).expand(n, size, size)
    cols = torch.sin(2 * math.pi * r.view(1, 1, -1) / period + phase).expand(n, size, size)
    x = torch.where(y.view(-1, 1, 1) > 0, rows, cols) + 0.5 * torch.randn(n, size, size, generator=gen)
    return x.unsqueeze(1), y


def blobs(n: int, seed: int = 0, dim: int = 6, classes: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` points (n, dim) around ``classes`` random centres, and their class (n,) as int64."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, dim, generator=torch.Generator().manual_seed(1234)) * 2.0
    y = torch.randint(0, classes, (n,), generator=gen)
    return centres[y] + torch.randn(n, dim, generator=gen), y


def batches_of(x: torch.Tensor, y: torch.Tensor, size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Consecutive ``(x, y)`` batches of ``size`` rows."""
    return [(x[i : i + size], y[i : i + size]) for i in range(0, len(x), size)]


class TinyConvNet(nn.Module):
    """Conv features, L2-normalised per example, then a linear head giving one logit per image."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()
        )
        self.head = nn.Linear(channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = F.normalize(self.features(x), dim=1)  # f / ‖f‖ per example
        return self.head(features).squeeze(1)


# Case 1's training step: the constants its exercises state.
CONV_LR, CONV_MOMENTUM = 0.5, 0.9
# Measured: TinyConvNet's true gradient norms in the checker's first steps lie between 0.11 and 0.19,
# so this clip is active in some steps and not in others (tests/test_checks_ch09.py holds it).
CLIP_NORM = 0.15
HEAD_LIMIT = 0.4  # the head's weights pass 0.4 within the first steps, so the clamp is active too


def conv_setup(seed: int = 0, model_class: type[nn.Module] = TinyConvNet) -> tuple[nn.Module, torch.optim.SGD]:
    """Case 1's model (seeded) and its optimizer: SGD with lr ``CONV_LR`` and momentum ``CONV_MOMENTUM``."""
    torch.manual_seed(seed)
    model = model_class()
    return model, torch.optim.SGD(model.parameters(), lr=CONV_LR, momentum=CONV_MOMENTUM)


def reference_amp_step(model: nn.Module, optimizer, scaler, batch, counter: dict) -> torch.Tensor:
    """Case 1's step done right: fp16 autocast, scale → backward → unscale_ → clip → step → update, the head
    kept in [-HEAD_LIMIT, HEAD_LIMIT] under no_grad, ``counter["updates"]`` advanced only for an update the
    optimizer really applied (``update()`` lowers the scale exactly when ``step()`` was skipped)."""
    x, y = batch
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.binary_cross_entropy_with_logits(model(x).float(), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
    scale = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    if scaler.get_scale() >= scale:
        counter["updates"] += 1
    with torch.no_grad():
        for p in model.head.parameters():
            p.clamp_(-HEAD_LIMIT, HEAD_LIMIT)
    return loss.detach()


# --------------------------------------------------------------------------- graphs for the graph-walk exercise


class VisitCounter(torch.autograd.Function):
    """An identity whose backward node counts how often a graph walker reads its ``next_functions``.

    Set ``VISITS["limit"]`` and a walk that reads them more often raises :class:`WalkTooLong`: a walk
    without a visited set on a residual graph (2^depth paths) stops instead of running for ever.

    >>> h = VisitCounter.apply(torch.ones(2, requires_grad=True) * 2)
    >>> VISITS.update(reads=0, limit=None); _ = h.grad_fn.next_functions; VISITS["reads"]
    1
    """

    @staticmethod
    def forward(ctx, x):
        ctx.upstream = ((x.grad_fn, x.output_nr),)  # what next_functions holds for a non-leaf input
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad


class WalkTooLong(RuntimeError):
    """A graph walk read more ``next_functions`` than ``VISITS["limit"]`` allows."""


VISITS: dict[str, int | None] = {"reads": 0, "limit": None}


def _counted_next_functions(node):
    VISITS["reads"] += 1
    if VISITS["limit"] is not None and VISITS["reads"] > VISITS["limit"]:
        raise WalkTooLong(f"more than {VISITS['limit']} node visits")
    return node.upstream


# The engine runs backward from its own C++ edges; only Python reads of next_functions see this property.
type(VisitCounter.apply(torch.zeros(1, requires_grad=True) * 1).grad_fn).next_functions = property(
    _counted_next_functions
)


class ScaledMLP(nn.Module):
    """Linear layers, each output multiplied by a scale kept in ``holder`` ("list", "dict" or "registered" in
    nn.ParameterList); ``unused`` adds a scale the forward never uses; ``mask`` is a constant factor."""

    def __init__(self, holder: str = "list", parameter: bool = True, unused: bool = False, sizes=(6, 8, 3)):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))
        make = nn.Parameter if parameter else (lambda t: t.requires_grad_())
        scales = [make(torch.ones(b)) for b in sizes[1:]] + ([make(torch.ones(3))] if unused else [])
        if holder == "registered":
            self.scales = nn.ParameterList(scales)
        else:
            self.scales = {f"s{i}": t for i, t in enumerate(scales)} if holder == "dict" else scales
        self.mask = torch.ones(sizes[-1])  # (None, 0) in next_functions

    def used_scales(self) -> list[torch.Tensor]:
        scales = list(self.scales.values()) if isinstance(self.scales, dict) else list(self.scales)
        return scales[: len(self.layers)]

    def forward(self, x):
        for i, (layer, scale) in enumerate(zip(self.layers, self.used_scales())):
            x = layer(x) * scale
            x = torch.relu(x) if i < len(self.layers) - 1 else x
        return x * self.mask


class TiedNet(nn.Module):
    """A weight used twice and a hidden gate used twice; a frozen layer; a constant kept beside the gate."""

    def __init__(self):
        super().__init__()
        self.inner, self.frozen = nn.Linear(4, 4), nn.Linear(4, 4).requires_grad_(False)
        self.extras = [torch.ones(4, requires_grad=True), torch.full((4,), 2.0)]  # [hidden gate, constant]

    def forward(self, x):
        gate, constant = self.extras
        return self.inner(self.frozen(torch.tanh(self.inner(x) * gate)) * constant) * gate


class ChainNet(nn.Module):
    """A hidden scale ``w`` used at each of ``depth`` steps: ``h = h * w`` (a chain), or ``residual``
    ``h = h * w + h``, where every node is reached along 2^depth paths (each step passes a VisitCounter)."""

    def __init__(self, depth: int, residual: bool = False):
        super().__init__()
        self.depth, self.residual = depth, residual
        self.first = nn.Linear(3, 3)
        self.hidden = [torch.full((3,), 0.01 if residual else 0.999, requires_grad=True)]

    def forward(self, x):
        h = self.first(x)
        for _step in range(self.depth):
            if self.residual:
                h = VisitCounter.apply(h)
                h = h * self.hidden[0] + h
            else:
                h = h * self.hidden[0]
        return h


def leaf_cases() -> list[tuple[str, Any]]:
    """``(label, build)`` pairs; ``build()`` returns ``(model, loss, the tensors backward reaches that are not in
    model.parameters())``: the graphs on which the graph-walk exercise is checked."""

    def scaled(after_backward=False, **options):
        def build():
            torch.manual_seed(0)
            model = ScaledMLP(**options)
            x, y = blobs(10, seed=1)
            loss = F.cross_entropy(model(x), y)
            if after_backward:
                loss.backward()
            return model, loss, [] if options.get("holder") == "registered" else model.used_scales()

        return build

    def tied():
        torch.manual_seed(0)
        model = TiedNet()
        x = torch.randn(5, 4, requires_grad=True)  # an input that asks for a gradient: a leaf too
        return model, model(x).pow(2).mean(), [model.extras[0], x]

    def chain(depth, residual):
        def build():
            torch.manual_seed(0)
            model = ChainNet(depth, residual)
            return model, model(torch.randn(2, 3)).sum(), model.hidden

        return build

    return [
        (_("nn.Parameters in a Python list (a constant factor in the graph too)"), scaled()),
        (_("plain tensors that require grad, in a dict"), scaled(holder="dict", parameter=False)),
        (_("scales registered in nn.ParameterList (nothing hidden)"), scaled(holder="registered")),
        (_("a hidden list that also holds a tensor the forward never uses"), scaled(unused=True)),
        (_("the same model after loss.backward() (the graph's structure survives)"), scaled(after_backward=True)),
        (_("a weight and a gate each used twice, a frozen layer, an input that requires grad"), tied),
        (_("a chain 3,000 ops deep"), chain(3000, False)),
        (_("30 residual steps h = h * w + h (2^30 paths from the loss to the input)"), chain(30, True)),
    ]
