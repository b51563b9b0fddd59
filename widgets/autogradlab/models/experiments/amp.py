"""amp: one training step in fp32, TF32, bf16 autocast and fp16 autocast + GradScaler.

Deterministic measures first: the FLOPs of a step (a formula per model, checked
against ``FlopCounterMode`` in the tests) and the dtype conversions autocast adds
to it (counted at the dispatcher). Then the step
time (``torch.utils.benchmark``: warm-up, fixed threads, median and IQR), peak
memory (CUDA), achieved TFLOP/s as a fraction of the same device's measured
matmul peak in the same precision (a reference, not a hard limit: a step whose
matmuls are all large can land a little above it, as fp32 did on an H100), and the loss curve of each precision against
fp32's.

>>> from autogradlab.models.experiments.amp import run_amp
>>> result = run_amp("cpu", preset="cpu-small", modes=("fp32", "bf16"), curve_steps=3, time_runs=False)
>>> sorted(result.curves["mlp"])
['bf16', 'fp32']
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from autogradlab.models.experiments.common import (
    MODES,
    as_record,
    experiment_device,
    float32_matmuls,
    forward_autocast,
    markdown_table,
    matmul_peak_flops,
    mlp,
    mode_unavailable,
    peak_memory,
    progress,
    resolve_preset,
    time_stats,
)


@dataclass(frozen=True)
class AmpConfig:
    mlp_sizes: tuple[tuple[int, int, int], ...]  # (batch, width, depth), smallest first
    block: tuple[int, int, int, int]  # (batch, seq, d_model, heads)
    curve_mlp: int  # which MLP size the loss curves use
    curve_steps: int
    peak_n: int  # n of the n×n×n matmul that measures the device's peak
    min_run_time: float  # seconds of timing per measurement
    lr: float = 0.05


SIZES = {
    "cpu-small": AmpConfig(
        ((64, 128, 3), (256, 256, 3)), (4, 32, 64, 4), curve_mlp=0, curve_steps=30, peak_n=256, min_run_time=0.05
    ),
    "medium": AmpConfig(
        ((512, 512, 4), (1024, 1024, 4)), (8, 256, 256, 4), curve_mlp=0, curve_steps=100, peak_n=1024, min_run_time=0.2
    ),
    "gpu-large": AmpConfig(
        ((1024, 1024, 4), (4096, 4096, 4), (8192, 8192, 4)),
        (16, 1024, 1024, 16),
        curve_mlp=0,
        curve_steps=200,
        peak_n=8192,
        min_run_time=1.0,
    ),
}


class Block(torch.nn.Module):
    """A pre-norm transformer block: attention (SDPA, no mask) and a 4× MLP, both residual."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model={d_model} must be divisible by heads={heads}")
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(d_model)
        self.qkv = torch.nn.Linear(d_model, 3 * d_model)
        self.out = torch.nn.Linear(d_model, d_model)
        self.norm2 = torch.nn.LayerNorm(d_model)
        self.up = torch.nn.Linear(d_model, 4 * d_model)
        self.down = torch.nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, d)
        x = x + self.out(attn)
        return x + self.down(F.gelu(self.up(self.norm2(x))))


def mlp_step_flops(batch: int, width: int, depth: int) -> int:
    """Matmul FLOPs of one forward+backward of a width×width MLP whose input needs no gradient.

    Forward and the weight gradient are 2·B·W² each per layer; the input gradient
    is 2·B·W² for every layer but the first.

    >>> mlp_step_flops(2, 3, 1)
    72
    """
    per_matmul = 2 * batch * width * width
    return depth * 2 * per_matmul + (depth - 1) * per_matmul


def block_step_flops(batch: int, seq: int, d_model: int) -> int:
    """Model FLOPs of one forward+backward of :class:`Block` (linears 72·T·d², attention 12·T·S·d).

    >>> block_step_flops(1, 2, 4)
    2496
    """
    tokens = batch * seq
    return 72 * tokens * d_model**2 + 12 * tokens * seq * d_model


def count_casts(fn) -> int:
    """How many dtype conversions (``aten._to_copy``) ``fn`` runs: the casts autocast inserts, counted at the dispatcher.

    >>> count_casts(lambda: torch.ones(2).to(torch.float16) + 1)
    1
    """
    from autogradlab.torch_internals import ATEN_TO_COPY, TorchDispatchMode

    class _Casts(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is ATEN_TO_COPY:
                _Casts.count += 1
            return func(*args, **(kwargs or {}))

    with _Casts():
        fn()
    return _Casts.count


def _make_step(model, opt, scaler, x, y, mode, device):
    def step():
        with float32_matmuls(mode):  # TF32 covers backward's matmuls too
            opt.zero_grad(set_to_none=True)
            with forward_autocast(mode, device):
                loss = F.mse_loss(model(x).float(), y)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
        return loss.detach()

    return step


def _models(cfg: AmpConfig, device: torch.device):
    """(name, label, factory of (student, inputs, target), flops) for every model the experiment runs."""
    out = []
    for i, (batch, width, depth) in enumerate(cfg.mlp_sizes):

        def factory(batch=batch, width=width, depth=depth):
            gen = torch.Generator(device=device).manual_seed(1)
            x = torch.randn(batch, width, device=device, generator=gen)
            teacher = mlp([width] * (depth + 1), device, seed=2)
            with torch.no_grad():
                y = teacher(x)
            return mlp([width] * (depth + 1), device, seed=3), x, y

        name = "mlp" if i == cfg.curve_mlp else f"mlp-{i}"
        out.append((name, f"MLP B={batch} W={width} depth={depth}", factory, mlp_step_flops(batch, width, depth)))
    batch, seq, d_model, heads = cfg.block

    def block_factory():
        gen = torch.Generator(device=device).manual_seed(1)
        x = torch.randn(batch, seq, d_model, device=device, generator=gen)
        torch.manual_seed(2)
        teacher = Block(d_model, heads).to(device)
        with torch.no_grad():
            y = teacher(x)
        torch.manual_seed(3)
        return Block(d_model, heads).to(device), x, y

    out.append(
        (
            "block",
            f"block B={batch} S={seq} d={d_model} h={heads}",
            block_factory,
            block_step_flops(batch, seq, d_model),
        )
    )
    return out


@dataclass
class AmpResult:
    """Per (model, precision): step time, TFLOP/s, fraction of the matmul peak, peak memory; loss curves."""

    device: str
    preset: str
    modes: list[str]
    skipped_modes: dict[str, str]
    matmul_peak_tflops: dict[str, float]
    rows: list[dict] = field(default_factory=list)
    curves: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    curve_deviation: dict[str, dict[str, float]] = field(default_factory=dict)

    def table(self) -> str:
        return amp_table(self)


def amp_table(result) -> str:
    """Markdown table of an amp result (a live AmpResult or a dict loaded from JSON)."""
    rec = as_record(result)
    speedup = speedups(rec)
    rows = [
        [
            r["label"],
            r["mode"],
            r["flops"] / 1e6,
            r["casts"],
            r["step_ms"],
            r["step_iqr_ms"],
            speedup.get((r["model"], r["mode"])),
            r["tflops"],
            r["fraction_of_peak"],
            None if r["peak_memory_bytes"] is None else r["peak_memory_bytes"] / 2**20,
            rec["curve_deviation"].get(r["model"], {}).get(r["mode"]),
        ]
        for r in rec["rows"]
    ]
    head = [
        "model",
        "precision",
        "MFLOP per step",
        "casts per step",
        "step ms (median)",
        "IQR ms",
        "speed-up vs fp32",
        "TFLOP/s",
        "fraction of matmul peak",
        "peak MiB",
        "max loss deviation vs fp32",
    ]
    return markdown_table(head, rows)


def speedups(result) -> dict[tuple[str, str], float]:
    """fp32's step time over each precision's, per (model, precision): how many times faster than fp32.

    >>> speedups({"rows": [{"model": "mlp", "mode": "fp32", "step_ms": 3.0}, {"model": "mlp", "mode": "bf16", "step_ms": 1.5}]})
    {('mlp', 'fp32'): 1.0, ('mlp', 'bf16'): 2.0}
    """
    rec = as_record(result)
    fp32_ms = {r["model"]: r["step_ms"] for r in rec["rows"] if r["mode"] == "fp32" and r["step_ms"]}
    return {
        (r["model"], r["mode"]): fp32_ms[r["model"]] / r["step_ms"]
        for r in rec["rows"]
        if r["step_ms"] and r["model"] in fp32_ms
    }


def largest_mlp_fraction(result, mode: str = "bf16") -> float | None:
    """Fraction of the measured matmul peak reached by the largest MLP in ``mode`` (None if not run)."""
    rec = as_record(result)
    rows = [
        r
        for r in rec["rows"]
        if r["model"].startswith("mlp") and r["mode"] == mode and r["fraction_of_peak"] is not None
    ]
    return max(rows, key=lambda r: r["flops"])["fraction_of_peak"] if rows else None


def run_amp(
    device="auto",
    preset: str = "auto",
    *,
    modes=MODES,
    curve_steps: int | None = None,
    time_runs: bool = True,
    progress_bar: bool = False,
) -> AmpResult:
    """Train each model for a few steps in each precision, then time one step of each.

    ``time_runs=False`` skips the timings (and the matmul peaks), leaving only the
    loss curves: the cheap part, which is what tests need.
    """
    device = experiment_device(device)
    preset = resolve_preset(preset, device)
    cfg = SIZES[preset]
    steps = cfg.curve_steps if curve_steps is None else int(curve_steps)
    skipped = {m: why for m in modes if (why := mode_unavailable(m, device))}
    run_modes = [m for m in modes if m not in skipped]
    if "fp32" not in run_modes:
        raise ValueError("the amp experiment compares against fp32: include 'fp32' in modes")
    result = AmpResult(device.type, preset, run_modes, skipped, {})

    models = _models(cfg, device)
    work = [(m, mode) for m in models for mode in run_modes]
    for (name, label, factory, flops), mode in progress(work, desc="amp", enabled=progress_bar):
        model, x, y = factory()
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
        scaler = torch.amp.GradScaler(device.type) if mode == "fp16" else None
        step = _make_step(model, opt, scaler, x, y, mode, device)
        if name in ("mlp", "block"):
            result.curves.setdefault(name, {})[mode] = [float(step()) for _ in range(steps)]
        row = {
            "model": name,
            "label": label,
            "mode": mode,
            "flops": flops,
            "casts": count_casts(step),
            "step_ms": None,
            "step_iqr_ms": None,
            "threads": None,
            "tflops": None,
            "fraction_of_peak": None,
            "peak_memory_bytes": None,
        }
        if time_runs:
            stats = time_stats(step, device, cfg.min_run_time)
            if mode not in result.matmul_peak_tflops:
                result.matmul_peak_tflops[mode] = matmul_peak_flops(device, mode, cfg.peak_n, cfg.min_run_time) / 1e12
            tflops = row["flops"] / stats["median_s"] / 1e12
            row.update(
                step_ms=stats["median_s"] * 1e3,
                step_iqr_ms=stats["iqr_s"] * 1e3,
                threads=stats["threads"],
                tflops=tflops,
                fraction_of_peak=tflops / result.matmul_peak_tflops[mode],
                peak_memory_bytes=peak_memory(step, device),
            )
        result.rows.append(row)

    for name, curves in result.curves.items():
        ref = curves["fp32"]
        result.curve_deviation[name] = {
            mode: max(abs(a - b) / abs(b) for a, b in zip(c, ref)) for mode, c in curves.items()
        }
    return result


__all__ = [
    "AmpConfig",
    "AmpResult",
    "Block",
    "SIZES",
    "amp_table",
    "block_step_flops",
    "count_casts",
    "largest_mlp_fraction",
    "mlp_step_flops",
    "run_amp",
    "speedups",
]
