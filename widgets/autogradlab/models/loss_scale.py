"""Dynamic loss scaling as ``torch.amp.GradScaler`` does it, as a plain simulation (LossScaleLab's model).

The rule, applied by ``scaler.update()`` after every step: on a step whose
gradients had an inf/NaN, skip the optimizer step, multiply the scale by
``backoff_factor`` and reset the count of good steps; otherwise count the step,
and after ``growth_interval`` good steps in a row multiply the scale by
``growth_factor`` (unless that overflows float32) and reset the count. The scale
is a float32, so every product is rounded to float32 as GradScaler's kernel does.

>>> trace = scale_trace([False, True, False, False], init_scale=8.0, growth_interval=2)
>>> trace.scales, trace.skipped_steps, trace.final_scale
([8.0, 8.0, 4.0, 4.0], [1], 8.0)
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.nn.utils import parameters_to_vector

FP16_MAX = float(torch.finfo(torch.float16).max)  # 65504 = (2 − 2⁻¹⁰)·2¹⁵
FP16_MIN_NORMAL = float(torch.finfo(torch.float16).tiny)  # 2⁻¹⁴
FP16_MIN_SUBNORMAL = 2.0**-24  # 2⁻¹⁴ · 2⁻¹⁰: the smallest value above zero


def _f32(x: float) -> float:
    """Round a Python float (double) to the nearest float32, as a C++ ``static_cast<float>`` does."""
    try:
        return struct.unpack("f", struct.pack("f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def _check(init_scale=1.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=1) -> None:
    if not (init_scale > 0 and math.isfinite(init_scale)):
        raise ValueError(f"init_scale must be a positive finite number, got {init_scale}")
    if not growth_factor > 1.0:
        raise ValueError(f"growth_factor must be > 1, got {growth_factor}")
    if not 0.0 < backoff_factor < 1.0:
        raise ValueError(f"backoff_factor must be between 0 and 1, got {backoff_factor}")
    if int(growth_interval) != growth_interval or growth_interval < 1:
        raise ValueError(f"growth_interval must be a whole number ≥ 1, got {growth_interval}")


def update_scale(
    scale: float,
    growth_tracker: int,
    found_inf: bool,
    *,
    growth_factor: float = 2.0,
    backoff_factor: float = 0.5,
    growth_interval: int = 2000,
) -> tuple[float, int]:
    """One ``scaler.update()``: the new (scale, growth_tracker) after a step with or without inf/NaN.

    >>> update_scale(1024.0, 0, True)
    (512.0, 0)
    >>> update_scale(1024.0, 1, False, growth_interval=2)
    (2048.0, 0)
    """
    if found_inf:
        return _f32(scale * backoff_factor), 0
    successful = growth_tracker + 1
    if successful == growth_interval:
        grown = _f32(scale * growth_factor)
        return (grown if math.isfinite(grown) else scale), 0
    return scale, successful


@dataclass(frozen=True)
class ScaleTrace:
    """What a GradScaler did over a run: the scale each step used, which steps it skipped."""

    scales: list[float]  # the scale used by step i (before its update)
    overflows: list[bool]  # step i had an inf/NaN gradient, so the optimizer skipped it
    final_scale: float  # after the last update
    growth_tracker: int  # good steps since the last change, after the last update

    @property
    def skipped_steps(self) -> list[int]:
        return [i for i, o in enumerate(self.overflows) if o]

    @property
    def optimizer_steps(self) -> int:
        return len(self.overflows) - len(self.skipped_steps)


def scale_trace(
    overflows: Sequence[bool],
    *,
    init_scale: float = 2.0**16,
    growth_factor: float = 2.0,
    backoff_factor: float = 0.5,
    growth_interval: int = 2000,
) -> ScaleTrace:
    """Replay GradScaler's rule over a sequence of steps (True = that step's gradients had inf/NaN).

    The defaults are ``torch.amp.GradScaler``'s.

    >>> scale_trace([True, True]).final_scale
    16384.0
    """
    _check(init_scale, growth_factor, backoff_factor, growth_interval)
    scale, tracker, scales = _f32(float(init_scale)), 0, []
    for found_inf in overflows:
        scales.append(scale)
        scale, tracker = update_scale(
            scale,
            tracker,
            bool(found_inf),
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=int(growth_interval),
        )
    return ScaleTrace(scales, [bool(o) for o in overflows], scale, tracker)


def injected_overflows(steps: int, rate: float, seed: int = 0) -> list[bool]:
    """A reproducible random sequence where each step overflows with probability ``rate`` (a bad batch, a spike).

    >>> injected_overflows(5, 0.0)
    [False, False, False, False, False]
    """
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"the overflow rate is a probability between 0 and 1, got {rate}")
    if steps < 0:
        raise ValueError(f"steps must be ≥ 0, got {steps}")
    draws = torch.rand(int(steps), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return [bool(d < rate) for d in draws]


def simulate(
    steps: int,
    *,
    init_scale: float = 2.0**16,
    growth_interval: int = 2000,
    backoff_factor: float = 0.5,
    growth_factor: float = 2.0,
    overflow_rate: float = 0.0,
    grad_max: float | None = None,
    seed: int = 0,
) -> ScaleTrace:
    """Run the scaler for ``steps`` steps: a step overflows if an injected overflow hits it, or if the
    largest gradient magnitude ``grad_max`` times the current scale is inf in fp16.

    >>> simulate(6, init_scale=2.0**20, grad_max=0.5).skipped_steps   # 2**20 · 0.5 > 65504: back off to 2**16
    [0, 1, 2, 3]
    """
    _check(init_scale, growth_factor, backoff_factor, growth_interval)
    injected = injected_overflows(steps, overflow_rate, seed)
    scale, tracker = _f32(float(init_scale)), 0
    scales, overflows = [], []
    for hit in injected:
        natural = grad_max is not None and _overflows_fp16_cached(grad_max * scale)
        scales.append(scale)
        overflows.append(hit or natural)
        scale, tracker = update_scale(
            scale,
            tracker,
            hit or natural,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=int(growth_interval),
        )
    return ScaleTrace(scales, overflows, scale, tracker)


def overflows_fp16(value: float) -> bool:
    """Whether ``value`` becomes inf when cast to fp16 (values up to 65519.99… round down to 65504).

    >>> overflows_fp16(65519.0), overflows_fp16(65520.0)
    (False, True)
    """
    return bool(torch.isinf(torch.tensor(float(value), dtype=torch.float64).to(torch.float16)))


# simulate asks once per step, almost always for one of a few scales: remembering the answers makes it about 3x faster
_overflows_fp16_cached = functools.lru_cache(maxsize=4096)(overflows_fp16)


def fp16_fate(magnitudes: torch.Tensor, scale: float = 1.0) -> dict:
    """What casting ``magnitudes·scale`` to fp16 does: fractions that become 0, subnormal, normal, inf.

    >>> fp16_fate(torch.tensor([1e-9, 1e-6, 1.0, 1e6]))
    {'zero': 0.25, 'subnormal': 0.25, 'normal': 0.25, 'overflow': 0.25}
    """
    values = (magnitudes.detach().double() * scale).to(torch.float16).double().abs()
    n = max(values.numel(), 1)
    zero = int((values == 0).sum())
    overflow = int(torch.isinf(values).sum())
    subnormal = int(((values > 0) & (values < FP16_MIN_NORMAL)).sum())
    return {
        "zero": zero / n,
        "subnormal": subnormal / n,
        "normal": (values.numel() - zero - overflow - subnormal) / n,
        "overflow": overflow / n,
    }


def example_gradients(
    seed: int = 0, batch: int = 128, width: int = 64, depth: int = 3, residual: float = 1e-3
) -> torch.Tensor:
    """Magnitudes |g| of real fp32 gradients, nonzero ones only: every layer output's and every weight's gradient
    of a small MLP whose predictions are already close to the target (late in training: small gradients).

    >>> g = example_gradients()
    >>> bool((g > 0).all()) and g.dtype == torch.float32
    True
    """
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    layers = [torch.nn.Linear(width, width) for _ in range(depth)]
    x = torch.randn(batch, width, generator=gen)
    outputs = []
    h = x
    for i, layer in enumerate(layers):
        h = layer(h)
        h.retain_grad()
        outputs.append(h)
        if i < depth - 1:
            h = torch.relu(h)
    target = h.detach() + residual * torch.randn(batch, width, generator=gen)
    torch.nn.functional.mse_loss(h, target).backward()
    grads = parameters_to_vector([t.grad for t in outputs] + [layer.weight.grad for layer in layers]).abs()
    return grads[grads > 0].detach()
