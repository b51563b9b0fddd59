"""What every experiment shares: presets, the device, timing, peak memory, the JSON header.

>>> from autogradlab.models.experiments.common import resolve_preset, experiment_device
>>> resolve_preset("auto", experiment_device("cpu"))
'cpu-small'
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import sys
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import torch
from torch.utils import benchmark

from autogradlab.device import device_name, pick_device

# 'cpu-small' keeps notebooks and tests fast on 2 CPU cores; 'gpu-large' is sized so
# that matmuls dominate a training step on a datacenter GPU.
PRESETS = ("cpu-small", "medium", "gpu-large")

# The precisions an experiment can compare. fp16 needs a GradScaler; tf32 is a CUDA mode.
MODES = ("fp32", "tf32", "bf16", "fp16")

FP16_MAX = float(torch.finfo(torch.float16).max)  # 65504
FP16_MIN_NORMAL = float(torch.finfo(torch.float16).tiny)  # 2**-14
FP16_MIN_SUBNORMAL = 2.0**-24


def experiment_device(device: str | torch.device | None = "auto") -> torch.device:
    """The device to run on: ``auto`` picks CUDA when present, else the CPU.

    Experiments run on CUDA or the CPU; Apple's MPS is not supported (no GradScaler
    dynamics to compare there), so ``auto`` never picks it.

    >>> experiment_device("cpu").type
    'cpu'
    """
    if device is None or (isinstance(device, str) and device.lower() == "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = pick_device(device)
    if dev.type not in ("cuda", "cpu"):
        raise ValueError(f"experiments run on 'cuda' or 'cpu', not {dev.type!r}")
    return dev


def resolve_preset(preset: str | None, device: torch.device) -> str:
    """``auto`` → 'cpu-small' on the CPU and 'gpu-large' on CUDA; otherwise check the name.

    >>> resolve_preset("medium", torch.device("cpu"))
    'medium'
    """
    if preset is None or preset == "auto":
        return "cpu-small" if device.type == "cpu" else "gpu-large"
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}: choose one of auto, {', '.join(PRESETS)}")
    return preset


def mode_unavailable(mode: str, device: torch.device) -> str | None:
    """Why ``mode`` cannot run on ``device``, or None when it can."""
    if mode not in MODES:
        raise ValueError(f"unknown precision mode {mode!r}: choose from {', '.join(MODES)}")
    if mode == "tf32" and device.type != "cuda":
        return "TF32 is a CUDA tensor-core mode"
    if mode == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return "this GPU has no bf16 support"
    return None


def autocast_dtype(mode: str) -> torch.dtype | None:
    """The dtype autocast runs matmuls in for ``mode`` (None: no autocast)."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(mode)


@contextlib.contextmanager
def float32_matmuls(mode: str):
    """TF32 matmuls for ``mode == 'tf32'``, full fp32 otherwise; restored on exit.

    TF32 is a global mode, not part of the graph: a step must run its *backward*
    inside this too, or only the forward's matmuls use TF32.
    """
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if mode == "tf32" else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def forward_autocast(mode: str, device: torch.device):
    """Autocast for bf16/fp16 (the forward pass only: backward follows the dtypes autocast recorded)."""
    dtype = autocast_dtype(mode)
    return torch.autocast(device_type=device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# Timings run on one thread: on a CPU whose other cores are busy (a shared machine, a laptop doing
# other work), a multi-threaded op waits for its slowest thread, and the times scatter by 10x or more.
TIMING_THREADS = 1


def time_stats(fn: Callable[[], Any], device: torch.device, min_run_time: float) -> dict:
    """Seconds per call of ``fn``: median, interquartile range and fastest block, by ``torch.utils.benchmark``.

    One warm-up call first (first-call allocations and kernel selection are not what
    we measure), a fixed thread count (:data:`TIMING_THREADS`), then
    ``blocked_autorange``, which repeats ``fn`` in blocks for ``min_run_time``
    seconds and syncs CUDA. The median and IQR describe a typical call and its
    spread; the fastest block is the right statistic for a *peak* (other
    processes only ever slow a run down).

    >>> stats = time_stats(lambda: sum(range(100)), torch.device("cpu"), 0.01)
    >>> sorted(stats), stats["min_s"] <= stats["median_s"]
    (['blocks', 'iqr_s', 'median_s', 'min_s', 'threads'], True)
    """
    fn()
    synchronize(device)
    threads = TIMING_THREADS
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
    measurement = timer.blocked_autorange(min_run_time=min_run_time)
    return {
        "median_s": float(measurement.median),
        "iqr_s": float(measurement.iqr),
        "min_s": float(min(measurement.times)),
        "blocks": len(measurement.times),
        "threads": threads,
    }


def count_flops(fn: Callable[[], Any]) -> int:
    """FLOPs of the matmuls and convolutions ``fn`` runs, counted by ``torch.utils.flop_counter.FlopCounterMode``.

    Deterministic: the same program gives the same count on every machine.

    >>> count_flops(lambda: torch.ones(2, 3) @ torch.ones(3, 4))   # 2·2·3·4
    48
    """
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def peak_memory(fn: Callable[[], Any], device: torch.device) -> int | None:
    """Peak bytes allocated on the GPU while ``fn`` runs (None on the CPU: no allocator statistics)."""
    if device.type != "cuda":
        return None
    synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    synchronize(device)
    return int(torch.cuda.max_memory_allocated(device))


def matmul_peak_flops(device: torch.device, mode: str, n: int, min_run_time: float) -> float:
    """Measured FLOP/s of square matmuls in ``mode``'s matmul dtype on ``device``: the best of n/4, n/2, n.

    This is the ceiling a training step is compared with: the same device, the
    same precision, the best case for the hardware (one big square matmul). It
    calls ``F.linear`` like ``nn.Linear`` does (on the CPU fp16 ``a @ b`` takes a
    slower path than ``F.linear``).
    """
    dtype = autocast_dtype(mode) or torch.float32
    gen = torch.Generator(device=device).manual_seed(0)
    best = 0.0
    for size in (max(n // 4, 1), max(n // 2, 1), n):
        a = torch.randn(size, size, device=device, dtype=dtype, generator=gen)
        b = torch.randn(size, size, device=device, dtype=dtype, generator=gen)
        with float32_matmuls(mode):
            seconds = time_stats(lambda a=a, b=b: torch.nn.functional.linear(a, b), device, min_run_time)["min_s"]
        best = max(best, 2.0 * size**3 / seconds)
    return best


def header(device: torch.device, preset: str, command: str | None = None) -> dict:
    """Where, when and how results were measured: written at the top of every results JSON."""
    return {
        "device": device.type,
        "device_name": device_name(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda if device.type == "cuda" else None,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "preset": preset,
        "command": command
        if command is not None
        else " ".join(["python", "-m", "autogradlab.models.experiments", *sys.argv[1:]]),
        # timings from a busy machine are slower: say how busy it was (None where the OS cannot tell)
        "load_average_1min": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "cpu_threads": torch.get_num_threads(),
    }


def as_record(result: Any) -> dict:
    """A result as a plain dict (dataclasses converted; dicts from a JSON file pass through)."""
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        return dataclasses.asdict(result)
    if isinstance(result, dict):
        return result
    raise TypeError(f"expected an experiment result (dataclass or dict), got {type(result).__name__}")


def json_safe(value: Any) -> Any:
    """Replace inf/NaN (not valid JSON) with None, recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def progress(iterable: Iterable, *, desc: str, enabled: bool, total: int | None = None):
    """tqdm.auto around ``iterable`` when ``enabled`` (the CLI), the plain iterable otherwise (notebooks, tests)."""
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, total=total, leave=False)


def mlp(widths: list[int], device: torch.device, seed: int, activation=torch.nn.ReLU) -> torch.nn.Sequential:
    """Linear layers of the given widths with ``activation`` between them, seeded, in fp32."""
    torch.manual_seed(seed)
    layers: list[torch.nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:])):
        if i:
            layers.append(activation())
        layers.append(torch.nn.Linear(fan_in, fan_out))
    return torch.nn.Sequential(*layers).to(device)


def markdown_table(headers: list[str], rows: list[list[Any]]) -> str:
    """A small Markdown table (for the CLI's summary and closing notes)."""

    def cell(v: Any) -> str:
        if v is None:
            return "–"
        if isinstance(v, float):
            return f"{v:.3g}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
