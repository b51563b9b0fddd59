"""accumulation: K micro-batches with loss/K versus one large batch, in fp32 and bf16 autocast.

The gradients of the mean loss over B samples equal the sum of the K micro-batch
gradients of (mean loss over B/K) / K, exactly in real numbers; in floating point
they differ by rounding. We measure that difference against the fp32 full batch
and against a float64 reference, and what forgetting the /K does.

>>> from autogradlab.models.experiments.accumulation_rounding import run_accumulation
>>> result = run_accumulation("cpu", preset="cpu-small", ks=(1, 4))
>>> [round(r["forgot_divide_norm_ratio"]) for r in result.rows if r["mode"] == "fp32"]
[1, 4]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from autogradlab.models.experiments.common import experiment_device, markdown_table, mlp, mode_unavailable, precision, progress, resolve_preset


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
DEFAULT_KS = (1, 2, 4, 8)


@dataclass
class AccumulationResult:
    """Per (precision, K): relative gradient error vs the fp32 full batch and vs float64."""

    device: str
    preset: str
    batch: int
    fp32_full_vs_fp64: float
    rows: list[dict] = field(default_factory=list)

    def table(self) -> str:
        return accumulation_table(self)


def accumulation_table(result) -> str:
    """Markdown table of an accumulation result (live or loaded from JSON)."""
    rec = result if isinstance(result, dict) else result.__dict__
    rows = [[r["mode"], r["k"], r["micro_batch"], r["rel_error_vs_fp32_full"], r["rel_error_vs_fp64"], r["forgot_divide_norm_ratio"]]
            for r in rec["rows"]]
    head = ["precision", "K", "micro-batch", "rel. error vs fp32 full batch", "rel. error vs float64", "‖g‖ ratio if /K forgotten"]
    return markdown_table(head, rows)


def _flat_grads(model) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()]).double()


def accumulated_grads(model, x, y, k: int, mode: str, device, divide: bool = True) -> torch.Tensor:
    """Gradient of the mean MSE over the batch, summed over ``k`` micro-batches of loss/k (all flattened)."""
    if x.shape[0] % k:
        raise ValueError(f"batch {x.shape[0]} is not divisible by K={k}")
    model.zero_grad(set_to_none=True)
    for xs, ys in zip(x.chunk(k), y.chunk(k)):
        with precision(mode, device):
            loss = F.mse_loss(model(xs).float(), ys)
        (loss / k if divide else loss).backward()
    return _flat_grads(model)


def run_accumulation(device="auto", preset: str = "auto", *, ks=DEFAULT_KS, modes=("fp32", "bf16"), progress_bar: bool = False) -> AccumulationResult:
    """Compare K-micro-batch gradients with the full batch's for every K and precision."""
    device = experiment_device(device)
    preset = resolve_preset(preset, device)
    cfg = SIZES[preset]
    model = mlp([cfg.width] * (cfg.depth + 1), device, seed=0)
    gen = torch.Generator(device=device).manual_seed(1)
    x = torch.randn(cfg.batch, cfg.width, device=device, generator=gen)
    y = torch.randn(cfg.batch, cfg.width, device=device, generator=gen)

    ref32 = accumulated_grads(model, x, y, 1, "fp32", device)
    model64 = mlp([cfg.width] * (cfg.depth + 1), device, seed=0).double()
    ref64 = accumulated_grads(model64, x.double(), y.double(), 1, "fp32", device)
    result = AccumulationResult(device.type, preset, cfg.batch, float((ref32 - ref64).norm() / ref64.norm()))
    work = [(m, k) for m in modes if not mode_unavailable(m, device) for k in ks]
    for mode, k in progress(work, desc="accumulation", enabled=progress_bar):
        g = accumulated_grads(model, x, y, k, mode, device)
        forgot = accumulated_grads(model, x, y, k, mode, device, divide=False)
        result.rows.append({
            "mode": mode, "k": int(k), "micro_batch": cfg.batch // int(k),
            "rel_error_vs_fp32_full": float((g - ref32).norm() / ref32.norm()),
            "rel_error_vs_fp64": float((g - ref64).norm() / ref64.norm()),
            "forgot_divide_norm_ratio": float(forgot.norm() / g.norm()),
        })
    return result
