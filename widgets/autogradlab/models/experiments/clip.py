"""clip: gradient clipping after ``scaler.unscale_`` (right) and before it (the bug), with SGD and with Adam.

``scaler.scale(loss).backward()`` leaves gradients multiplied by the scale S.
Clipping them there measures S·‖g‖ and clips to ``max_norm`` in *scaled* units;
``scaler.step`` then divides by S. The gradient the optimizer receives is
therefore S times too small when the right order clips too, and
S·‖g‖/max_norm times too small when the right order would not clip at all.

What that does to the *update* depends on the optimizer. SGD's update is
proportional to the gradient: S times too small. Adam divides each element by
its own magnitude plus ε, which cancels the shrink as long as the shrunk element
is still well above ε. Each element of the buggy gradient is about
max_norm·|gᵢ|/(S·‖g‖), and |gᵢ|/‖g‖ falls like 1/√n with the number of
parameters n: so the bug costs Adam little on small models and more and more on
large ones. :func:`run_clip` measures one step of both on a small MLP, then sweeps
Adam (and SGD) over model sizes.

Every step is real: a ``torch.amp.GradScaler``, ``clip_grad_norm_``, the
optimizer. The models run in float64, so the orders differ only in where the
clip sits (the scale is a power of two, so unscaling is exact), and no update is
lost to the rounding of the weights themselves: with fp32 weights near 0.1
(spacing 7e-9), the bug's SGD updates of about 1e-9 would mostly vanish.

>>> from autogradlab.models.experiments.clip import run_clip
>>> result = run_clip("cpu", preset="cpu-small", sweep_widths=(16,))
>>> round(result.norm_seen_before_unscale / result.true_grad_norm) == result.scale
True
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector

from autogradlab.models.experiments.common import (
    as_record,
    experiment_device,
    markdown_table,
    mlp,
    progress,
    resolve_preset,
)

ORDERS = ("right", "bug", "none")
ORDER_LABELS = {
    "right": "scale → backward → unscale_ → clip → step",
    "bug": "scale → backward → clip → step (bug)",
    "none": "scale → backward → step (no clipping)",
}
OPTIMIZERS = {
    "SGD": lambda params: torch.optim.SGD(params, lr=0.1),
    "Adam": lambda params: torch.optim.Adam(params, lr=1e-3),  # eps = 1e-8, PyTorch's default
}


@dataclass(frozen=True)
class ClipConfig:
    batch: int
    width: int  # of the 3-layer MLP of the first table
    sweep_widths: tuple[int, ...]  # two-layer width×width MLPs: 2·w² + 2·w parameters
    sweep_max_norm: float = 1.0  # the usual setting in training scripts


SIZES = {
    # 1e4, 1e5, 1e6, 3e6 parameters: the largest holds about 100 MiB of float64 weights, gradients and Adam state
    "cpu-small": ClipConfig(batch=64, width=64, sweep_widths=(70, 223, 707, 1224)),
    "medium": ClipConfig(batch=512, width=512, sweep_widths=(70, 707, 2236, 3873)),
    "gpu-large": ClipConfig(batch=4096, width=1024, sweep_widths=(70, 707, 3873, 7071)),
}
SCALE = 2.0**16  # GradScaler's default init_scale


@dataclass
class ClipResult:
    """One step in each order with SGD and Adam (rows), and Adam vs SGD over model sizes (sweep)."""

    device: str
    preset: str
    scale: float
    max_norm: float  # of the first table: a quarter of ‖g‖, so that the right order clips as well
    true_grad_norm: float  # ‖g‖ before any clipping
    norm_seen_after_unscale: float  # what clip_grad_norm_ returns in the right order
    norm_seen_before_unscale: float  # what it returns in the buggy order (S·‖g‖)
    rows: list[dict] = field(default_factory=list)  # optimizer, order, update_norm
    cosine_bug_vs_right: dict = field(default_factory=dict)  # per optimizer: the direction of the update
    sweep_max_norm: float = 1.0
    sweep: list[dict] = field(default_factory=list)  # parameters, grad_norm, SGD and Adam update ratio bug/right

    def table(self) -> str:
        return clip_table(self)

    def update_ratio(self, optimizer: str) -> float:
        """‖update in the right order‖ / ‖update with the bug‖ for ``optimizer`` in the first table."""
        norms = {r["order"]: r["update_norm"] for r in self.rows if r["optimizer"] == optimizer}
        return norms["right"] / norms["bug"]


def clip_table(result) -> str:
    """Markdown table of the one-step comparison (live or loaded from JSON)."""
    r = as_record(result)
    seen = {"right": r["norm_seen_after_unscale"], "bug": r["norm_seen_before_unscale"], "none": None}
    rows = [[row["optimizer"], ORDER_LABELS[row["order"]], seen[row["order"]], row["update_norm"]] for row in r["rows"]]
    return markdown_table(["optimizer", "order", "norm clip_grad_norm_ saw", "update norm ‖Δθ‖"], rows)


def clip_sweep_table(result) -> str:
    """Markdown table of the model-size sweep: how much smaller the bug makes one update, SGD and Adam."""
    r = as_record(result)
    rows = [[s["parameters"], s["grad_norm"], s["SGD"], s["Adam"]] for s in r["sweep"]]
    head = ["parameters", "‖g‖", "SGD: ‖Δθ bug‖ / ‖Δθ right‖", "Adam: ‖Δθ bug‖ / ‖Δθ right‖"]
    return markdown_table(head, rows)


def one_step(
    model, x, y, optimizer: str, order: str, max_norm: float, scale: float = SCALE
) -> tuple[torch.Tensor, float | None]:
    """One real step of ``model`` (changed in place) in ``order``; returns (Δθ flattened, the norm clip saw).

    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> model, x, y = torch.nn.Linear(3, 2), torch.randn(4, 3), torch.randn(4, 2)
    >>> delta, seen = one_step(model, x, y, "SGD", "bug", max_norm=1.0)
    >>> seen > 1000   # the bug clips S·‖g‖
    True
    """
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)}, got {order!r}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    params = list(model.parameters())
    opt = OPTIMIZERS[optimizer](params)
    scaler = torch.amp.GradScaler(x.device.type, init_scale=scale)
    start = parameters_to_vector(params).detach()
    opt.zero_grad(set_to_none=True)
    scaler.scale(F.mse_loss(model(x), y)).backward()
    seen = None
    if order == "right":
        scaler.unscale_(opt)
    if order != "none":
        seen = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    scaler.step(opt)
    scaler.update()
    return parameters_to_vector(params).detach() - start, seen


def _grad_norm(model, x, y) -> float:
    grads = torch.autograd.grad(F.mse_loss(model(x), y), list(model.parameters()))
    return float(parameters_to_vector(grads).norm())


def run_clip(device="auto", preset: str = "auto", *, sweep_widths=None, progress_bar: bool = False) -> ClipResult:
    """One step from identical weights in each order with SGD and Adam; then the update ratio over model sizes."""
    device = experiment_device(device)
    preset = resolve_preset(preset, device)
    cfg = SIZES[preset]
    widths = cfg.sweep_widths if sweep_widths is None else tuple(sweep_widths)
    gen = torch.Generator(device=device).manual_seed(1)
    x = torch.randn(cfg.batch, cfg.width, device=device, generator=gen, dtype=torch.float64)
    y = torch.randn(cfg.batch, cfg.width, device=device, generator=gen, dtype=torch.float64)

    def fresh():
        return mlp([cfg.width, cfg.width, cfg.width, cfg.width], device, seed=0).double()

    true_norm = _grad_norm(fresh(), x, y)
    max_norm = true_norm / 4  # clipping is active in the right order too: the bug's factor is then exactly S
    result = ClipResult(device.type, preset, SCALE, max_norm, true_norm, 0.0, 0.0, sweep_max_norm=cfg.sweep_max_norm)
    deltas = {}
    for optimizer in OPTIMIZERS:
        for order in ORDERS:
            delta, seen = one_step(fresh(), x, y, optimizer, order, max_norm)
            deltas[optimizer, order] = delta.double()
            if optimizer == "SGD" and order == "right":
                result.norm_seen_after_unscale = seen
            if optimizer == "SGD" and order == "bug":
                result.norm_seen_before_unscale = seen
            result.rows.append({"optimizer": optimizer, "order": order, "update_norm": float(delta.double().norm())})
        result.cosine_bug_vs_right[optimizer] = float(
            F.cosine_similarity(deltas[optimizer, "bug"], deltas[optimizer, "right"], dim=0)
        )

    for width in progress(widths, desc="clip sweep", enabled=progress_bar):
        gen = torch.Generator(device=device).manual_seed(2)
        xs = torch.randn(16, width, device=device, generator=gen, dtype=torch.float64)
        ys = torch.randn(16, width, device=device, generator=gen, dtype=torch.float64)

        def model(width=width):
            return mlp([width, width, width], device, seed=0).double()

        row = {"width": width, "parameters": 2 * width * width + 2 * width, "grad_norm": _grad_norm(model(), xs, ys)}
        for optimizer in OPTIMIZERS:
            norms = {}
            for order in ("right", "bug"):  # one model at a time
                delta, _ = one_step(model(), xs, ys, optimizer, order, cfg.sweep_max_norm)
                norms[order] = float(delta.double().norm())
                del delta
            row[optimizer] = norms["bug"] / norms["right"]
        result.sweep.append(row)
    return result
