"""compile: one forward+backward, eager vs ``torch.compile``, for chapter 11's two models in fp32 and bf16.

Per model and precision: the step time of each (``torch.utils.benchmark``: warm-up, median and
IQR), the first compiled call (tracing, partitioning and, with inductor, generating kernels)
against the step time it saves, peak memory (CUDA) and the bytes each forward saves for backward
(the saved-tensor hooks: :class:`autogradlab.graph.saved_bytes.SavedBytes`). Inductor generates
kernels with a C++ or Triton compiler, which takes minutes on a small CPU: the notebook shows the
mechanism with graph-only backends, and this experiment is meant for a GPU. On a CPU, pass
``backend="aot_eager"`` (the same graphs and partition, run eagerly) for a quick run.

>>> from autogradlab.models.experiments.compile import run_compile
>>> result = run_compile("cpu", "cpu-small", backend="aot_eager", models=("mlp",), modes=("fp32",), time_runs=False)
>>> row = result.rows[0]
>>> row["model"], row["precision"], row["compiled_saved_bytes"] < row["eager_saved_bytes"]
('mlp', 'fp32', True)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from autogradlab.graph.saved_bytes import SavedBytes
from autogradlab.models.experiments.amp import Block
from autogradlab.models.experiments.common import (
    as_record,
    experiment_device,
    forward_autocast,
    markdown_table,
    mode_unavailable,
    peak_memory,
    progress,
    resolve_preset,
    synchronize,
    time_stats,
)


@dataclass(frozen=True)
class CompileConfig:
    mlp: tuple[int, int, int]  # (tokens, width, depth) of the GELU MLP stack
    block: tuple[int, int, int, int]  # (batch, seq, d_model, heads) of chapter 08's transformer block
    min_run_time: float


SIZES = {
    "cpu-small": CompileConfig(mlp=(64, 64, 2), block=(2, 32, 64, 4), min_run_time=0.05),
    "medium": CompileConfig(mlp=(4096, 512, 4), block=(8, 256, 256, 4), min_run_time=0.2),
    "gpu-large": CompileConfig(mlp=(16384, 1024, 4), block=(16, 1024, 1024, 16), min_run_time=0.5),
}


@dataclass
class CompileResult:
    """One row per (model, precision): eager and compiled step times, first-call time, peak memory, saved bytes."""

    device: str
    preset: str
    backend: str
    rows: list[dict] = field(default_factory=list)

    def table(self) -> str:
        return compile_table(self)


def _build(model: str, cfg: CompileConfig, device: torch.device) -> tuple[torch.nn.Module, torch.Tensor]:
    # Imported here, not at the top: autogradlab.models.compiled loads torch._dynamo (1.5 s), which chapter 08,
    # importing this package for its other experiments, never uses.
    from autogradlab.models.compiled.course_models import mlp_stack

    gen = torch.Generator(device=device).manual_seed(1)
    if model == "mlp":
        tokens, width, depth = cfg.mlp
        return mlp_stack(depth, width).to(device), torch.randn(tokens, width, device=device, generator=gen)
    batch, seq, d_model, heads = cfg.block
    torch.manual_seed(0)
    return Block(d_model, heads).to(device), torch.randn(batch, seq, d_model, device=device, generator=gen)


def _fwd_bwd(forward, model: torch.nn.Module, x: torch.Tensor, mode: str):
    def step():
        model.zero_grad(set_to_none=True)
        with forward_autocast(mode, x.device):
            loss = forward(x).float().square().mean()
        loss.backward()

    return step


def _saved_bytes(forward, model: torch.nn.Module, x: torch.Tensor, mode: str) -> int:
    with SavedBytes(exclude=[*model.parameters(), x]) as saved, forward_autocast(mode, x.device):
        forward(x).float().square().mean()
    return saved.total


def _break_even(first_call: float, eager: dict | None, fast: dict | None) -> int | None:
    """Steps after which the first call has paid for itself, or None when the compiled step is not faster by
    more than its own spread (median + IQR still below eager's median): a gain the timing cannot tell from noise.

    >>> _break_even(1.0, {"median_s": 0.003}, {"median_s": 0.001, "iqr_s": 0.0005})
    500
    >>> _break_even(1.0, {"median_s": 0.003}, {"median_s": 0.002, "iqr_s": 0.002}) is None
    True
    """
    if eager is None or fast is None or fast["median_s"] + fast["iqr_s"] >= eager["median_s"]:
        return None
    return round(first_call / (eager["median_s"] - fast["median_s"]))


def compile_table(result) -> str:
    """Markdown table of a compile result (live or loaded from JSON)."""
    rec = as_record(result)
    mib = lambda b: None if b is None else b / 2**20  # noqa: E731
    rows = [
        [
            r["model"],
            r["precision"],
            r["eager_ms"],
            r["eager_iqr_ms"],
            r["compiled_ms"],
            r["compiled_iqr_ms"],
            r["first_call_s"],
            r["break_even_steps"],
            mib(r["eager_peak_bytes"]),
            mib(r["compiled_peak_bytes"]),
            mib(r["eager_saved_bytes"]),
            mib(r["compiled_saved_bytes"]),
        ]
        for r in rec["rows"]
    ]
    head = [
        "model",
        "precision",
        "eager ms",
        "IQR",
        f"{rec['backend']} ms",
        "IQR",
        "first call s",
        "steps to pay off (–: no gain beyond the spread)",
        "eager peak MiB",
        "compiled peak MiB",
        "eager saved MiB",
        "compiled saved MiB",
    ]
    return markdown_table(head, rows)


def run_compile(
    device="auto",
    preset: str = "auto",
    *,
    backend: str = "inductor",
    models=("mlp", "block"),
    modes=("fp32", "bf16"),
    time_runs: bool = True,
    progress_bar: bool = False,
) -> CompileResult:
    """Eager vs ``torch.compile(model, backend=backend)`` per model and precision (see the module docstring)."""
    from autogradlab.models.compiled.record import quiet  # see _build: loaded when the experiment runs

    device = experiment_device(device)
    preset = resolve_preset(preset, device)
    cfg = SIZES[preset]
    result = CompileResult(device.type, preset, backend)
    work = [(m, p) for m in models for p in modes if mode_unavailable(p, device) is None]
    for name, mode in progress(work, desc="compile", enabled=progress_bar):
        model, x = _build(name, cfg, device)
        eager_step = _fwd_bwd(model, model, x, mode)
        torch.compiler.reset()
        compiled = torch.compile(model, backend=backend)
        compiled_step = _fwd_bwd(compiled, model, x, mode)
        with quiet():
            synchronize(device)
            start = time.perf_counter()
            compiled_step()  # the first call traces, partitions and generates code
            synchronize(device)
            first_call = time.perf_counter() - start
            eager = time_stats(eager_step, device, cfg.min_run_time) if time_runs else None
            fast = time_stats(compiled_step, device, cfg.min_run_time) if time_runs else None
            row = {
                "model": name,
                "precision": mode,
                "eager_ms": None if eager is None else eager["median_s"] * 1e3,
                "eager_iqr_ms": None if eager is None else eager["iqr_s"] * 1e3,
                "compiled_ms": None if fast is None else fast["median_s"] * 1e3,
                "compiled_iqr_ms": None if fast is None else fast["iqr_s"] * 1e3,
                "first_call_s": first_call,
                "eager_peak_bytes": peak_memory(eager_step, device),
                "compiled_peak_bytes": peak_memory(compiled_step, device),
                "eager_saved_bytes": _saved_bytes(model, model, x, mode),
                "compiled_saved_bytes": _saved_bytes(compiled, model, x, mode),
            }
        row["break_even_steps"] = _break_even(first_call, eager, fast)
        result.rows.append(row)
    torch.compiler.reset()
    return result
