"""accumulation: K micro-batches with loss/K versus one large batch, with ``.grad`` in fp32 or in bf16.

The gradients of the mean loss over B samples equal the sum of the K micro-batch
gradients of (mean loss over B/K) / K, exactly in real numbers; in floating point
each ``backward()`` *adds* its micro-batch gradient into ``.grad``, rounding to
``.grad``'s dtype every time. Under autocast the parameters, and so ``.grad``,
stay fp32: the sum is kept to about 7 digits whatever K. With the parameters
themselves in bf16 (``model.to(torch.bfloat16)``), ``.grad`` is bf16 and every
addition rounds to about 3 digits, so the error of the sum grows with K.

Two errors per row: the accumulated ``.grad`` against the exact (float64) sum of
the same K micro-batch gradients (what accumulating costs), and the result against
the float64 full-batch gradient (everything, the 16-bit forward pass included).
At the gpu-large sizes even fp32's second error is about 1e-4, on the CPU and on
an H100 alike: one or two of each layer's 16.7 million ReLU pre-activations lie
within fp32's rounding of zero and take the other branch than in float64, and
each such unit changes the gradient by its whole contribution (measured
2026-11-24: 1.8e-4 on the CPU with 1–2 sign flips per layer; 4.1e-4 on the H100).

>>> from autogradlab.models.experiments.accumulation_rounding import run_accumulation
>>> result = run_accumulation("cpu", preset="cpu-small", ks=(1, 4))
>>> [r["grad_dtype"] for r in result.rows if r["k"] == 4]
['torch.float32', 'torch.float32', 'torch.bfloat16']
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


@dataclass(frozen=True)
class AccumulationConfig:
    batch: int
    width: int
    depth: int


SIZES = {
    "cpu-small": AccumulationConfig(batch=256, width=128, depth=3),
    "medium": AccumulationConfig(batch=2048, width=512, depth=4),
    "gpu-large": AccumulationConfig(batch=8192, width=2048, depth=4),
}
DEFAULT_KS = (1, 4, 16, 64)

# precision -> (parameter dtype, autocast dtype or None)
PRECISIONS = {
    "fp32": (torch.float32, None),
    "bf16 autocast": (torch.float32, torch.bfloat16),
    "bf16 parameters": (torch.bfloat16, None),
}


@dataclass
class AccumulationResult:
    """Per (precision, K): the error accumulation adds, and the total error vs the float64 full batch."""

    device: str
    preset: str
    batch: int
    rows: list[dict] = field(default_factory=list)

    def table(self) -> str:
        return accumulation_table(self)


def accumulation_table(result) -> str:
    """Markdown table of an accumulation result (live or loaded from JSON)."""
    rec = as_record(result)
    rows = [
        [
            r["precision"],
            r["grad_dtype"].replace("torch.", ""),
            r["k"],
            r["micro_batch"],
            r["accumulation_error"],
            r["rel_error_vs_fp64"],
        ]
        for r in rec["rows"]
    ]
    head = [
        "precision",
        ".grad dtype",
        "K",
        "micro-batch",
        "rel. error of the accumulated .grad vs the exact sum",
        "rel. error vs float64 full batch",
    ]
    return markdown_table(head, rows)


def _flat_grads(model) -> torch.Tensor:
    return parameters_to_vector(p.grad for p in model.parameters()).double()


def _micro_backward(model, xs, ys, k: int, autocast_dtype) -> None:
    xs = xs.to(next(model.parameters()).dtype)
    with torch.autocast(
        device_type=xs.device.type, dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None
    ):
        out = model(xs)
    # the loss in float32 at least, and never below the model's own precision: `.float()` would round the
    # float64 reference's output to float32 (and CUDA's mse_loss backward refuses float32 against float64)
    loss_dtype = torch.promote_types(out.dtype, torch.float32)
    loss = F.mse_loss(out.to(loss_dtype), ys.to(loss_dtype))
    (loss / k).backward()


def accumulated_grads(model, x, y, k: int, autocast_dtype=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(``.grad`` after K backward passes of loss/K, the exact float64 sum of the K micro-batch gradients), flattened."""
    if x.shape[0] % k:
        raise ValueError(f"batch {x.shape[0]} is not divisible by K={k}")
    exact = 0
    for xs, ys in zip(x.chunk(k), y.chunk(k)):  # each micro-batch's gradient on its own, summed in float64
        model.zero_grad(set_to_none=True)
        _micro_backward(model, xs, ys, k, autocast_dtype)
        exact = exact + _flat_grads(model)
    model.zero_grad(set_to_none=True)
    for xs, ys in zip(x.chunk(k), y.chunk(k)):  # what a training loop does: backward adds into .grad
        _micro_backward(model, xs, ys, k, autocast_dtype)
    return _flat_grads(model), exact


def run_accumulation(
    device="auto", preset: str = "auto", *, ks=DEFAULT_KS, progress_bar: bool = False
) -> AccumulationResult:
    """Accumulate over K micro-batches in each precision; compare with the exact sum and with float64."""
    device = experiment_device(device)
    preset = resolve_preset(preset, device)
    cfg = SIZES[preset]
    widths = [cfg.width] * (cfg.depth + 1)
    gen = torch.Generator(device=device).manual_seed(1)
    x = torch.randn(cfg.batch, cfg.width, device=device, generator=gen)
    y = torch.randn(cfg.batch, cfg.width, device=device, generator=gen)

    ref64, _ = accumulated_grads(mlp(widths, device, seed=0).double(), x.double(), y.double(), 1)
    result = AccumulationResult(device.type, preset, cfg.batch)
    work = [(p, k) for p in PRECISIONS for k in ks]
    for precision, k in progress(work, desc="accumulation", enabled=progress_bar):
        param_dtype, autocast_dtype = PRECISIONS[precision]
        model = mlp(widths, device, seed=0).to(param_dtype)
        got, exact = accumulated_grads(model, x, y, int(k), autocast_dtype)
        result.rows.append(
            {
                "precision": precision,
                "grad_dtype": str(next(model.parameters()).grad.dtype),
                "k": int(k),
                "micro_batch": cfg.batch // int(k),
                "accumulation_error": float((got - exact).norm() / exact.norm()),
                "rel_error_vs_fp64": float((got - ref64).norm() / ref64.norm()),
            }
        )
    return result
