"""clip: gradient clipping after ``scaler.unscale_`` (right) and before it (the bug).

``scaler.scale(loss).backward()`` leaves gradients multiplied by the scale S.
Clipping them there measures S·‖g‖ and clips to ``max_norm`` in *scaled* units;
``scaler.step`` then divides by S, so the update is S times smaller than intended.

>>> from autogradlab.models.experiments.clip import run_clip
>>> result = run_clip("cpu", preset="cpu-small")
>>> round(result.norm_seen_before_unscale / result.true_grad_norm) == result.scale
True
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from autogradlab.models.experiments.common import experiment_device, markdown_table, mlp, resolve_preset


@dataclass(frozen=True)
class ClipConfig:
    batch: int
    width: int
    scale: float
    lr: float


SIZES = {
    "cpu-small": ClipConfig(batch=64, width=64, scale=2.0**12, lr=0.1),
    "medium": ClipConfig(batch=512, width=512, scale=2.0**12, lr=0.1),
    "gpu-large": ClipConfig(batch=4096, width=1024, scale=2.0**12, lr=0.1),
}


@dataclass
class ClipResult:
    """Norms seen by clip_grad_norm_ and the resulting update norms, right order vs bug vs fp32 reference."""

    device: str
    preset: str
    scale: float
    max_norm: float
    lr: float
    true_grad_norm: float  # ‖g‖ of the fp32 reference
    norm_seen_after_unscale: float  # what clip_grad_norm_ returns in the right order
    norm_seen_before_unscale: float  # what it returns in the buggy order (≈ S·‖g‖)
    update_norm_reference: float  # ‖Δθ‖ = lr·‖g used by optimizer.step‖, fp32 training with clipping
    update_norm_right_order: float
    update_norm_clip_before_unscale: float
    update_norm_no_clip: float
    cosine_bug_vs_right: float  # direction is the same: only the length is wrong

    def table(self) -> str:
        return clip_table(self)


def clip_table(result) -> str:
    """Markdown table of a clip result (live or loaded from JSON)."""
    r = result if isinstance(result, dict) else result.__dict__
    rows = [
        ["fp32 reference", r["true_grad_norm"], r["update_norm_reference"]],
        ["scale → backward → unscale_ → clip → step", r["norm_seen_after_unscale"], r["update_norm_right_order"]],
        ["scale → backward → clip → step (bug)", r["norm_seen_before_unscale"], r["update_norm_clip_before_unscale"]],
        ["no clipping", None, r["update_norm_no_clip"]],
    ]
    return markdown_table(["order", "norm clip_grad_norm_ saw", "update norm ‖Δθ‖"], rows)


def _update(model, x, y, lr, max_norm, order: str, scale: float, device) -> tuple[torch.Tensor, float | None]:
    """One SGD step in the given order; returns the gradient optimizer.step used and the norm clip saw."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    used: list[torch.Tensor] = []
    # what optimizer.step really receives (after scaler.step has unscaled): Δθ = −lr · this
    opt.register_step_pre_hook(lambda o, *_: used.append(torch.cat([p.grad.reshape(-1).clone() for p in model.parameters()])))
    scaler = torch.amp.GradScaler(device.type, init_scale=scale, enabled=order != "reference")
    opt.zero_grad(set_to_none=True)
    # fp16 autocast for the scaled orders; the reference is plain fp32
    with torch.autocast(device_type=device.type, dtype=torch.float16, enabled=order != "reference"):
        loss = F.mse_loss(model(x).float(), y)
    scaler.scale(loss).backward()
    seen = None
    if order == "right":
        scaler.unscale_(opt)
    if order in ("right", "bug", "reference"):
        seen = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
    scaler.step(opt)
    scaler.update()
    return used[0], seen


def run_clip(device="auto", preset: str = "auto", *, max_norm: float | None = None, progress_bar: bool = False) -> ClipResult:
    """Clip in the right order, in the buggy order and not at all, from identical starting weights."""
    device = experiment_device(device)
    preset = resolve_preset(preset, device)
    cfg = SIZES[preset]
    gen = torch.Generator(device=device).manual_seed(1)
    x = torch.randn(cfg.batch, cfg.width, device=device, generator=gen)
    y = torch.randn(cfg.batch, cfg.width, device=device, generator=gen)

    def fresh():
        return mlp([cfg.width, cfg.width, cfg.width], device, seed=0)

    model = fresh()
    loss = F.mse_loss(model(x), y)
    true_norm = float(torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(model.parameters()))]).norm())
    max_norm = true_norm / 4 if max_norm is None else float(max_norm)  # clipping is active: it must shrink g

    ref, _ = _update(fresh(), x, y, cfg.lr, max_norm, "reference", cfg.scale, device)
    right, seen_right = _update(fresh(), x, y, cfg.lr, max_norm, "right", cfg.scale, device)
    bug, seen_bug = _update(fresh(), x, y, cfg.lr, max_norm, "bug", cfg.scale, device)
    none, _ = _update(fresh(), x, y, cfg.lr, max_norm, "none", cfg.scale, device)
    cosine = float(F.cosine_similarity(bug.double(), right.double(), dim=0))
    return ClipResult(
        device.type, preset, cfg.scale, max_norm, cfg.lr, true_norm, seen_right, seen_bug,
        *(cfg.lr * float(g.double().norm()) for g in (ref, right, bug, none)), cosine,
    )
