"""GPU (or CPU) experiments on mixed precision and memory, each returning a plain result record.

Every experiment is a function ``run_NAME(device="auto", preset="auto", ...)``
returning a dataclass; ``as_record`` turns it into the dict stored in JSON, and
each result has ``.table()`` (Markdown). Run them all from a shell with tqdm
progress and a JSON file whose header says where and when they ran::

    python -m autogradlab.models.experiments all --device auto --out results.json

>>> from autogradlab.models.experiments import EXPERIMENTS, run_experiment
>>> sorted(EXPERIMENTS)
['accumulation', 'amp', 'autocast', 'checkpoint', 'clip', 'compile', 'inplace', 'scaler', 'underflow']
>>> run_experiment("inplace", device="cpu").cases[0]["raised"]
True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autogradlab.models.experiments.accumulation_rounding import (
    AccumulationResult,
    accumulation_table,
    run_accumulation,
)
from autogradlab.models.experiments.amp import AmpResult, amp_table, largest_mlp_fraction, run_amp, speedups
from autogradlab.models.experiments.autocast_dtypes import AutocastResult, autocast_table, run_autocast
from autogradlab.models.experiments.checkpoint import (
    CheckpointResult,
    checkpoint_table,
    run_checkpoint,
    saved_activation_bytes,
)
from autogradlab.models.experiments.clip import ClipResult, clip_sweep_table, clip_table, run_clip
from autogradlab.models.experiments.common import PRESETS, as_record, experiment_device, header, resolve_preset
from autogradlab.models.experiments.compile import CompileResult, compile_table, run_compile
from autogradlab.models.experiments.inplace import InplaceResult, inplace_table, run_inplace
from autogradlab.models.experiments.recorded import Recorded, data_dir, latest_recorded, load_results, recorded_files
from autogradlab.models.experiments.scaler import ScalerResult, run_scaler, scaler_table
from autogradlab.models.experiments.underflow import UnderflowResult, fp16_fate, run_underflow, underflow_table

# In the order the chapter meets them (and the CLI runs them); inplace and checkpoint are chapter 04's topics, on the
# device; compile is chapter 11's.
EXPERIMENTS: dict[str, Callable[..., Any]] = {
    "autocast": run_autocast,
    "underflow": run_underflow,
    "scaler": run_scaler,
    "clip": run_clip,
    "amp": run_amp,
    "accumulation": run_accumulation,
    "inplace": run_inplace,
    "checkpoint": run_checkpoint,
    "compile": run_compile,  # chapter 11: eager vs torch.compile (meant for a GPU: inductor)
}

TABLES: dict[str, Callable[[Any], str]] = {
    "autocast": autocast_table,
    "underflow": underflow_table,
    "scaler": scaler_table,
    "clip": lambda rec: clip_table(rec) + "\n\n" + clip_sweep_table(rec),
    "amp": amp_table,
    "accumulation": accumulation_table,
    "inplace": inplace_table,
    "checkpoint": checkpoint_table,
    "compile": compile_table,
}


def run_experiment(name: str, device="auto", preset: str = "auto", **options) -> Any:
    """Run one experiment by name; a typo gets a ValueError listing the names."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}: choose one of {', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[name](device, preset, **options)


def table(name: str, result: Any) -> str:
    """The Markdown table of a result of experiment ``name`` (live dataclass or dict from JSON).

    >>> table("inplace", run_inplace("cpu")).splitlines()[0].startswith("| case |")
    True
    """
    if name not in TABLES:
        raise ValueError(f"unknown experiment {name!r}: choose one of {', '.join(TABLES)}")
    return TABLES[name](as_record(result))


def recorded_summary(kind: str = "gpu", folder=None) -> str:
    """Markdown: the newest recorded ``{kind}_*.json`` with where and when it was measured, then its tables;
    or one line saying there is none.

    >>> recorded_summary("tpu").startswith("No TPU has run")
    True
    """
    recorded = latest_recorded(kind, folder)
    if recorded is None:
        return (
            f"No {kind.upper()} has run these experiments for the course yet (the package has no recorded `{kind}_*.json` in `autogradlab/data/`): "
            "every table and plot in this chapter is measured live on your device."
        )
    parts = [f"**Recorded on a {kind.upper()}** (`{recorded.path.name}`): {recorded.describe()}"]
    for name, rec in recorded.results.items():
        try:
            body = table(name, rec)
        except (KeyError, TypeError, ValueError):
            body = "(recorded in a format this version cannot read: record it again with the command above)"
        parts.append(f"**{name}**\n\n{body}")
    return "\n\n".join(parts)


__all__ = [
    "EXPERIMENTS",
    "PRESETS",
    "AccumulationResult",
    "AmpResult",
    "AutocastResult",
    "CheckpointResult",
    "ClipResult",
    "CompileResult",
    "InplaceResult",
    "Recorded",
    "ScalerResult",
    "UnderflowResult",
    "as_record",
    "clip_sweep_table",
    "compile_table",
    "data_dir",
    "experiment_device",
    "fp16_fate",
    "header",
    "largest_mlp_fraction",
    "latest_recorded",
    "load_results",
    "recorded_files",
    "recorded_summary",
    "resolve_preset",
    "run_accumulation",
    "run_amp",
    "run_autocast",
    "run_checkpoint",
    "run_clip",
    "run_compile",
    "run_experiment",
    "run_inplace",
    "run_scaler",
    "run_underflow",
    "saved_activation_bytes",
    "speedups",
    "table",
]
