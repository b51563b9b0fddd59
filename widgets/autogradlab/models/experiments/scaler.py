"""scaler: a real ``torch.amp.GradScaler`` over many steps, with inf/NaN injected on chosen steps.

Records the scale before every step, which steps the scaler skipped, and what a
loop that advances its LR scheduler and step counter on *every* iteration does
compared with one that counts only the optimizer steps that really happened. It
also checks the chapter's rule for telling a skipped step without a hook: the
scale went down (``scaler.get_scale() < before``).

>>> from autogradlab.models.experiments.scaler import run_scaler
>>> result = run_scaler("cpu", preset="cpu-small")
>>> set(result.injected) <= set(result.skipped_steps)   # every injected inf/NaN step was skipped
True
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from autogradlab.models.experiments.common import (
    as_record,
    experiment_device,
    markdown_table,
    mlp,
    progress,
    resolve_preset,
)


@dataclass(frozen=True)
class ScalerConfig:
    batch: int
    width: int
    steps: int
    init_scale: float
    growth_interval: int
    inject: tuple[tuple[int, str], ...]  # (step, 'inf' | 'nan') written into one gradient after backward
    warmup: int  # linear LR warm-up length of the scheduler whose drift we show


_INJECT = ((12, "inf"), (13, "inf"), (20, "nan"), (33, "inf"))
SIZES = {
    "cpu-small": ScalerConfig(
        batch=32, width=32, steps=40, init_scale=2.0**24, growth_interval=5, inject=_INJECT, warmup=30
    ),
    "medium": ScalerConfig(
        batch=256, width=256, steps=40, init_scale=2.0**24, growth_interval=5, inject=_INJECT, warmup=30
    ),
    "gpu-large": ScalerConfig(
        batch=1024, width=1024, steps=40, init_scale=2.0**24, growth_interval=5, inject=_INJECT, warmup=30
    ),
}


@dataclass
class ScalerResult:
    """Scale trace, skipped steps, and how far a per-iteration scheduler drifts from the real step count."""

    device: str
    preset: str
    init_scale: float
    growth_interval: int
    growth_factor: float
    backoff_factor: float
    injected: list[int]
    injected_kinds: list[str]
    scale_before: list[float] = field(default_factory=list)
    scale_after: list[float] = field(default_factory=list)
    skipped_steps: list[int] = field(default_factory=list)
    optimizer_steps: int = 0  # counted by a step hook on the optimizer
    steps_by_scale_rule: int = 0  # counted by the loop's rule: the scale did not go down
    iterations: int = 0
    lr_per_iteration: list[float] = field(default_factory=list)  # a scheduler stepped every iteration
    lr_per_real_step: list[float] = field(default_factory=list)  # a scheduler stepped only after real steps
    scheduler_warnings: list[str] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)

    def table(self) -> str:
        return scaler_table(self)


def scaler_table(result) -> str:
    """Markdown table of a scaler result: one row per step where something happened."""
    rec = as_record(result)
    rows = []
    for i, (before, after) in enumerate(zip(rec["scale_before"], rec["scale_after"])):
        if after != before or i in rec["skipped_steps"]:
            kind = rec["injected_kinds"][rec["injected"].index(i)] if i in rec["injected"] else ""
            rows.append(
                [
                    i,
                    kind,
                    before,
                    after,
                    "skipped" if i in rec["skipped_steps"] else "stepped",
                    rec["lr_per_iteration"][i],
                    rec["lr_per_real_step"][i],
                ]
            )
    head = [
        "step",
        "injected",
        "scale before",
        "scale after",
        "optimizer",
        "LR (scheduler every iteration)",
        "LR (only real steps)",
    ]
    return markdown_table(head, rows)


def warmup_lr(step: int, warmup: int, base_lr: float) -> float:
    """Linear warm-up: the LR a scheduler gives after ``step`` real optimizer steps."""
    return base_lr * min(1.0, (step + 1) / warmup)


def run_scaler(
    device="auto", preset: str = "auto", *, inject=None, steps: int | None = None, progress_bar: bool = False
) -> ScalerResult:
    """Train a small MLP with fp16 autocast and a GradScaler, writing inf/NaN into a gradient on chosen steps."""
    device = experiment_device(device)
    preset = resolve_preset(preset, device)
    cfg = SIZES[preset]
    inject = cfg.inject if inject is None else tuple(inject)
    for step, kind in inject:
        if kind not in ("inf", "nan"):
            raise ValueError(f"inject kind must be 'inf' or 'nan', got {kind!r} at step {step}")
    steps = cfg.steps if steps is None else int(steps)
    inject = tuple((int(s), k) for s, k in inject if s < steps)  # injections past the run's end never happen
    planned = dict(inject)

    model = mlp([cfg.width, cfg.width, cfg.width], device, seed=0)
    gen = torch.Generator(device=device).manual_seed(1)
    x = torch.randn(cfg.batch, cfg.width, device=device, generator=gen)
    y = torch.randn(cfg.batch, cfg.width, device=device, generator=gen)
    base_lr = 0.05
    opt = torch.optim.SGD(model.parameters(), lr=base_lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / cfg.warmup))
    scaler = torch.amp.GradScaler(device.type, init_scale=cfg.init_scale, growth_interval=cfg.growth_interval)
    taken = [0]
    opt.register_step_post_hook(lambda *_: taken.__setitem__(0, taken[0] + 1))  # counts real optimizer steps

    result = ScalerResult(
        device.type,
        preset,
        cfg.init_scale,
        cfg.growth_interval,
        scaler.get_growth_factor(),
        scaler.get_backoff_factor(),
        [s for s, _ in inject],
        [k for _, k in inject],
    )
    for i in progress(range(steps), desc="scaler", enabled=progress_bar):
        result.lr_per_iteration.append(opt.param_groups[0]["lr"])
        result.lr_per_real_step.append(warmup_lr(taken[0], cfg.warmup, base_lr))
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.float16):
            loss = F.mse_loss(model(x).float(), y)
        scaler.scale(loss).backward()
        if i in planned:
            with torch.no_grad():
                model[0].weight.grad[0, 0] = float(planned[i])
        before, steps_before = scaler.get_scale(), taken[0]
        scaler.step(opt)
        scaler.update()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            scheduler.step()  # the pitfall: advanced on every iteration, skipped or not
        result.scheduler_warnings += [str(w.message).split("\n")[0] for w in caught]
        result.scale_before.append(before)
        result.scale_after.append(scaler.get_scale())
        result.losses.append(float(loss.detach()))
        if taken[0] == steps_before:
            result.skipped_steps.append(i)
        if scaler.get_scale() >= before:
            result.steps_by_scale_rule += 1
    result.optimizer_steps, result.iterations = taken[0], steps
    return result
