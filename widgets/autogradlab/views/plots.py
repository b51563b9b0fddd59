"""All of the package's matplotlib drawing: plots of experiment results, and the figure helpers they use.

Figures are :class:`~matplotlib.figure.Figure` objects (never pyplot: no global state,
no backend switching). The ``plot_*`` functions draw an experiment result (live, or a
dict loaded from JSON) onto an Axes. The interactive views do not use matplotlib: they
redraw on every control change, so they draw SVG charts (:mod:`autogradlab.render.chart`),
which build in about a millisecond where a PNG of a figure takes 50 to 300 ms.

>>> from autogradlab.models.experiments import run_checkpoint
>>> ax = new_figure().add_subplot()
>>> plot_checkpoint(ax, run_checkpoint("cpu", "cpu-small", depths=(1, 2), time_runs=False))
>>> figure_png(ax.figure)[:4]
b'\x89PNG'
"""

from __future__ import annotations

import io
import math

from matplotlib.figure import Figure

from autogradlab.models.experiments.common import as_record


def new_figure(width: float = 5.5, height: float = 3.2) -> Figure:
    """A figure not registered with pyplot, so it is never shown twice or leaked."""
    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def figure_png(fig: Figure) -> bytes:
    """Render ``fig`` to PNG bytes (deterministic metadata, so the same plot gives the same bytes)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


_COLORS = {"fp32": "tab:blue", "tf32": "tab:cyan", "bf16": "tab:green", "fp16": "tab:orange"}


def plot_underflow(ax, result) -> None:
    """Histogram of fp32 gradient magnitudes (log₂) with fp16's range, and where each loss scale moves them."""
    rec = as_record(result)
    edges = rec["histogram_edges"]
    centers = [(a + b) / 2 for a, b in zip(edges[:-1], edges[1:])]
    unscaled = next((r for r in rec["rows"] if r["scale"] == 1.0), None)
    label = "|g| in fp32" + (
        f": {100 * unscaled['flushed_fraction']:.2g}% flushed in fp16 backward" if unscaled else ""
    )
    ax.bar(centers, rec["histogram_counts"], width=1.0, color="gray", alpha=0.6, label=label)
    lo, tiny, hi = (math.log2(rec[k]) for k in ("fp16_min_subnormal", "fp16_min_normal", "fp16_max"))
    ax.axvspan(edges[0], lo - 1, color="crimson", alpha=0.12, label="fp16: flushed to 0")
    ax.axvspan(lo - 1, tiny, color="orange", alpha=0.15, label="fp16: subnormal")
    ax.axvline(hi, color="purple", ls="--", lw=1, label="fp16 max (65504)")
    for row, color in zip(
        (r for r in rec["rows"] if r["scale"] != 1.0), ("tab:blue", "tab:green", "tab:olive", "tab:cyan")
    ):
        shift = math.log2(row["scale"])  # multiplying the loss by S moves every log₂|g| right by log₂ S
        ax.stairs(
            rec["histogram_counts"],
            [e + shift for e in edges],
            color=color,
            lw=1.2,
            label=f"|g| × 2^{shift:.3g}: {100 * row['flushed_fraction']:.2g}% flushed in fp16 backward",
        )
    ax.set_xlabel("log₂ |gradient|")
    ax.set_ylabel("count")
    ax.legend(fontsize=7, loc="upper left")


def plot_scale_trace(ax, result) -> None:
    """The scale GradScaler used at every step; skipped steps marked, injected ones labelled."""
    rec = as_record(result)
    steps = range(len(rec["scale_before"]))
    ax.step(list(steps), [math.log2(s) for s in rec["scale_before"]], where="post", label="scale used by the step")
    skipped = rec["skipped_steps"]
    ax.plot(skipped, [math.log2(rec["scale_before"][i]) for i in skipped], "x", color="crimson", label="skipped step")
    for step, kind in zip(rec["injected"], rec["injected_kinds"]):
        ax.annotate(
            kind,
            (step, math.log2(rec["scale_before"][step])),
            textcoords="offset points",
            xytext=(0, 6),
            ha="center",
            fontsize=7,
            color="crimson",
        )
    ax.set_xlabel("step")
    ax.set_ylabel("log₂ scale")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)


def plot_lr_drift(ax, result) -> None:
    """LR of a warm-up schedule advanced every iteration vs only on real optimizer steps."""
    rec = as_record(result)
    ax.plot(rec["lr_per_iteration"], label="scheduler.step() every iteration")
    ax.plot(rec["lr_per_real_step"], label="only after real optimizer steps")
    ax.set_xlabel("iteration")
    ax.set_ylabel("learning rate")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)


def plot_loss_curves(ax, result, model: str = "mlp") -> None:
    """Training loss per step in each precision for one model of an amp result."""
    rec = as_record(result)
    for mode, losses in rec["curves"].get(model, {}).items():
        ax.plot(losses, label=mode, color=_COLORS.get(mode), ls="-" if mode == "fp32" else "--")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(model, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)


def plot_fraction_of_peak(ax, result) -> None:
    """Achieved TFLOP/s of each model and precision as a fraction of the device's measured matmul peak."""
    rec = as_record(result)
    rows = [r for r in rec["rows"] if r["fraction_of_peak"] is not None]
    labels = [f"{r['label']}\n{r['mode']}" for r in rows]
    ax.barh(range(len(rows)), [r["fraction_of_peak"] for r in rows], color=[_COLORS.get(r["mode"]) for r in rows])
    ax.set_yticks(range(len(rows)), labels, fontsize=6)
    ax.axvline(0.5, color="gray", ls=":", lw=1)
    ax.set_xlabel("fraction of the measured matmul peak in the same precision")
    ax.invert_yaxis()


def plot_checkpoint(ax, result) -> None:
    """Saved-activation bytes over depth, with and without checkpointing: predicted, and measured where available."""
    rec = as_record(result)
    for ckpt, color in ((False, "tab:red"), (True, "tab:green")):
        rows = [r for r in rec["rows"] if r["checkpoint"] == ckpt]
        name = "checkpointed" if ckpt else "plain"
        ax.plot(
            [r["depth"] for r in rows],
            [r["predicted_saved_bytes"] / 2**20 for r in rows],
            "o-",
            color=color,
            label=f"{name}: predicted from the graph",
        )
        measured = [
            (r["depth"], r["measured_held_bytes"] / 2**20) for r in rows if r["measured_held_bytes"] is not None
        ]
        if measured:
            ax.plot(*zip(*measured), "s", mfc="none", ms=9, color=color, label=f"{name}: measured (CUDA allocator)")
    ax.set_xlabel("depth (blocks)")
    ax.set_ylabel("MiB held for backward")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
