"""underflow: which gradients fp16 flushes to zero, with and without loss scaling.

One backward pass in fp32 gives the reference gradients of every layer's output
(the activation gradients, which fp16 autocast carries in fp16). The same backward
under fp16 autocast, with the loss multiplied by each scale, shows which of them
became exactly zero: the fraction *flushed*.

The weight gradients are compared with two references. Against fp32 the error
stops falling at a floor that no scale moves: the target is the model's own fp32
output plus a little noise, so the true gradient is tiny (the noise nearly
cancels over the batch), while the fp16 forward pass computes a slightly
different function (weights, inputs and outputs of every matmul rounded to fp16)
whose difference adds up coherently. The second reference removes the forward
from the comparison: the exact (fp32) backward through the values of that same
fp16 forward pass, which is what scaling can rescue.

>>> from autogradlab.models.experiments.underflow import run_underflow
>>> result = run_underflow("cpu", preset="cpu-small", scales=(1.0,))
>>> 0.0 <= result.rows[0]["flushed_fraction"] <= 1.0
True
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector

from autogradlab.models.experiments.common import (
    FP16_MAX,
    FP16_MIN_NORMAL,
    FP16_MIN_SUBNORMAL,
    as_record,
    experiment_device,
    markdown_table,
    mlp,
    progress,
    resolve_preset,
)
from autogradlab.models.loss_scale import fp16_fate  # noqa: F401  (re-exported: the experiment's view of fp16's range)


@dataclass(frozen=True)
class UnderflowConfig:
    batch: int
    width: int
    depth: int
    residual: float  # how far the target is from the prediction: small residual, small gradients


SIZES = {
    "cpu-small": UnderflowConfig(batch=256, width=128, depth=4, residual=1e-3),
    "medium": UnderflowConfig(batch=1024, width=512, depth=4, residual=1e-3),
    "gpu-large": UnderflowConfig(batch=4096, width=1024, depth=6, residual=1e-3),
}

DEFAULT_SCALES = (1.0, 2.0**8, 2.0**16, 2.0**24)
HISTOGRAM_EDGES = list(range(-48, 5))  # log2 |g| bins, one per power of two


@dataclass
class UnderflowResult:
    """Reference log2|g| histogram, fp16's range, and per loss scale the fraction flushed to zero."""

    device: str
    preset: str
    fp16_min_subnormal: float
    fp16_min_normal: float
    fp16_max: float
    histogram_edges: list[int]
    histogram_counts: list[int]
    reference_zero_fraction: float
    forward_floor: float = (
        0.0  # relative difference between the fp32 gradient and the exact gradient of the fp16 forward
    )
    rows: list[dict] = field(default_factory=list)

    def table(self) -> str:
        return underflow_table(self)


def underflow_table(result) -> str:
    """Markdown table of an underflow result (live or loaded from JSON)."""
    rec = as_record(result)
    rows = [
        [
            r["scale"],
            r["flushed_fraction"],
            r["subnormal_fraction"],
            r["overflow_fraction"],
            r["param_grad_flushed_fraction"],
            r["relative_error"],
            r["relative_error_same_forward"],
        ]
        for r in rec["rows"]
    ]
    head = [
        "loss scale",
        "activation grads flushed to 0",
        "subnormal",
        "inf/NaN",
        "weight grads flushed to 0",
        "weight grads: rel. error vs fp32",
        "rel. error vs exact backward of the fp16 forward",
    ]
    return markdown_table(head, rows)


def _rounded(t: torch.Tensor) -> torch.Tensor:
    """``t`` rounded to fp16 in the forward pass, the identity in backward (so backward stays exact fp32)."""
    return t + (t.to(torch.float16).float() - t).detach()


def _fp16_linear_outputs(model, x) -> list[torch.Tensor]:
    """Every Linear's output in the real fp16-autocast forward pass (the values the fp16 backward starts from)."""
    outputs: list[torch.Tensor] = []
    handles = [
        m.register_forward_hook(lambda _m, _i, out: outputs.append(out.detach().float()))
        for m in model
        if isinstance(m, torch.nn.Linear)
    ]
    try:
        with torch.no_grad(), torch.autocast(device_type=x.device.type, dtype=torch.float16):
            model(x)
    finally:
        for h in handles:
            h.remove()
    return outputs


def _fp16_forward_in_fp32(model, x, fp16_outputs):
    """The fp16-autocast forward with an exact fp32 backward: each Linear sees fp16-rounded input, weight and bias
    and *returns the real fp16 pass's output* (``fp16_outputs``), so the forward values are those of the real
    fp16 pass bit for bit on any device, whatever order its matmul summed in."""
    h, outputs = x, iter(fp16_outputs)
    for m in model:
        if isinstance(m, torch.nn.Linear):
            z = F.linear(_rounded(h), _rounded(m.weight), _rounded(m.bias))
            h = next(outputs) + (z - z.detach())  # value: the fp16 pass's, exactly (z - z is 0); gradient: z's
        else:
            h = m(h)
    return h


def _weight_grads_of_fp16_forward(model, x, target) -> torch.Tensor:
    fp16_outputs = _fp16_linear_outputs(model, x)
    model.zero_grad(set_to_none=True)
    F.mse_loss(_fp16_forward_in_fp32(model, x, fp16_outputs), target).backward()
    return parameters_to_vector(m.weight.grad for m in model if isinstance(m, torch.nn.Linear))


def _activation_grads(model, x, target, scale: float, autocast: bool):
    """Gradients of every Linear's output (and the weights) for loss·scale, fp16 autocast or fp32."""
    grads: list[torch.Tensor] = []

    def keep_grad(_module, _inputs, out):  # returns None: a forward hook's return value replaces the output
        out.register_hook(lambda g: grads.append(g.detach().clone()))

    handles = [m.register_forward_hook(keep_grad) for m in model if isinstance(m, torch.nn.Linear)]
    model.zero_grad(set_to_none=True)
    try:
        with torch.autocast(device_type=x.device.type, dtype=torch.float16, enabled=autocast):
            loss = F.mse_loss(model(x).float(), target)
        (loss * scale).backward()
    finally:
        for h in handles:
            h.remove()
    weights = parameters_to_vector(m.weight.grad for m in model if isinstance(m, torch.nn.Linear))
    return parameters_to_vector(grads), weights


def run_underflow(
    device="auto", preset: str = "auto", *, scales=DEFAULT_SCALES, progress_bar: bool = False
) -> UnderflowResult:
    """Backward in fp16 autocast for each loss scale; compare every gradient with fp32's and with the fp16 forward's."""
    device = experiment_device(device)
    preset = resolve_preset(preset, device)
    cfg = SIZES[preset]
    model = mlp([cfg.width] * (cfg.depth + 1), device, seed=0)
    gen = torch.Generator(device=device).manual_seed(1)
    x = torch.randn(cfg.batch, cfg.width, device=device, generator=gen)
    with torch.no_grad():
        target = model(x) + cfg.residual * torch.randn(cfg.batch, cfg.width, device=device, generator=gen)

    ref_act, ref_w = _activation_grads(model, x, target, 1.0, autocast=False)
    same_forward = _weight_grads_of_fp16_forward(model, x, target).double()
    magnitudes = ref_act.abs().double()
    nonzero = magnitudes > 0
    log2 = torch.log2(magnitudes[nonzero]).clamp(HISTOGRAM_EDGES[0], HISTOGRAM_EDGES[-1] - 1e-9)
    counts = torch.histc(log2, bins=len(HISTOGRAM_EDGES) - 1, min=HISTOGRAM_EDGES[0], max=HISTOGRAM_EDGES[-1])
    result = UnderflowResult(
        device.type,
        preset,
        FP16_MIN_SUBNORMAL,
        FP16_MIN_NORMAL,
        FP16_MAX,
        list(HISTOGRAM_EDGES),
        [int(c) for c in counts.tolist()],
        float((~nonzero).double().mean()),
        float((same_forward - ref_w.double()).norm() / ref_w.double().norm()),
    )
    for scale in progress(scales, desc="underflow", enabled=progress_bar):
        act, weights = _activation_grads(model, x, target, float(scale), autocast=True)
        act64 = act.double()
        finite = torch.isfinite(act64)
        small = finite & (act64.abs() < FP16_MIN_NORMAL) & (act64 != 0)
        w_nonzero = ref_w != 0
        unscaled = weights.double() / float(scale)
        result.rows.append(
            {
                "scale": float(scale),
                "flushed_fraction": float(((act64 == 0) & nonzero).double().sum() / nonzero.sum()),
                "subnormal_fraction": float(small.double().mean()),
                "overflow_fraction": float((~finite).double().mean()),
                "param_grad_flushed_fraction": float(((weights == 0) & w_nonzero).double().sum() / w_nonzero.sum()),
                "relative_error": float((unscaled - ref_w.double()).norm() / ref_w.double().norm()),
                "relative_error_same_forward": float((unscaled - same_forward).norm() / same_forward.norm()),
            }
        )
    return result
