"""checkpoint: activation memory vs recompute cost with ``torch.utils.checkpoint`` over depth.

The bytes autograd saves for backward are *predicted* from the graph: a
``torch.autograd.graph.saved_tensors_hooks`` pack hook sees every tensor saved
during the forward pass (we count each storage once and skip the parameters and
the batch, which exist before it). With every block checkpointed, only each
block's input is kept; one block's activations come back, recomputed, during
backward. On CUDA the prediction is compared with the memory the allocator really
holds after the forward pass, and the prediction plus one recomputed block with
the peak during backward (which also holds gradients and temporaries). The
price is counted deterministically (``FlopCounterMode``: the FLOPs of forward +
backward, with the recomputed forward) and timed (median and IQR).

>>> from autogradlab.models.experiments.checkpoint import saved_activation_bytes
>>> import torch
>>> w = torch.nn.Linear(3, 4)
>>> saved_activation_bytes(lambda: torch.relu(w(torch.ones(2, 3))).sum(), params=list(w.parameters()))["total"]
56
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from autogradlab.graph.saved_bytes import SavedBytes, storage_key
from autogradlab.models.experiments.common import (
    as_record,
    count_flops,
    experiment_device,
    markdown_table,
    progress,
    resolve_preset,
    synchronize,
    time_stats,
)


@dataclass(frozen=True)
class CheckpointConfig:
    batch: int
    width: int
    depths: tuple[int, ...]
    min_run_time: float


SIZES = {
    "cpu-small": CheckpointConfig(batch=64, width=128, depths=(1, 2, 4, 8), min_run_time=0.05),
    "medium": CheckpointConfig(batch=1024, width=512, depths=(2, 4, 8, 16), min_run_time=0.2),
    "gpu-large": CheckpointConfig(batch=8192, width=1024, depths=(2, 4, 8, 16, 32), min_run_time=0.5),
}


class ResidualMLP(torch.nn.Module):
    """x + down(gelu(up(x))): saves x, up's output and gelu's output, 1 + 4 + 4 = 9 activations of B×W."""

    def __init__(self, width: int):
        super().__init__()
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(x)))


class Stack(torch.nn.Module):
    """``depth`` residual blocks, each optionally run under ``torch.utils.checkpoint``."""

    def __init__(self, width: int, depth: int, use_checkpoint: bool = False):
        super().__init__()
        self.blocks = torch.nn.ModuleList(ResidualMLP(width) for _ in range(depth))
        self.use_checkpoint = use_checkpoint

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.use_checkpoint else block(x)
        return x


def saved_activation_bytes(forward: Callable[[], torch.Tensor], params=(), blocks=(), inputs=()) -> dict:
    """Run ``forward()`` and count the bytes autograd saves for backward, by block (:class:`SavedBytes`).

    Each storage is counted once (views of one tensor share memory); the storages
    of ``params`` and ``inputs`` (the batch) are skipped: they exist before the
    forward pass, so saving them costs no memory. Returns ``total``, the bytes per
    block in ``blocks`` (``per_block``), what recomputing each block allocates again
    under checkpointing (``recomputed``: its saved bytes but its own input, which
    checkpointing keeps), the bytes of the blocks' inputs (``block_inputs``) and the
    bytes saved outside any block (``outside``).
    """
    existing = {storage_key(t) for t in (*params, *inputs)}
    block_inputs: dict[int, int] = {}
    input_of: dict[int, int] = {}  # block index -> its input's storage
    current: list[int | None] = [None]
    handles = []
    for i, block in enumerate(blocks):

        def enter(_m, args, i=i):
            current[0] = i
            input_of[i] = key = storage_key(args[0])
            if key not in existing:
                block_inputs[key] = args[0].untyped_storage().nbytes()

        handles.append(block.register_forward_pre_hook(enter))
        handles.append(block.register_forward_hook(lambda *_: current.__setitem__(0, None)))

    try:
        with SavedBytes(exclude=(*params, *inputs), tag=lambda: current[0]) as saved:
            out = forward()
    finally:
        for h in handles:
            h.remove()
    by_block = saved.by_tag()
    per_block = [by_block.get(i, 0) for i in range(len(blocks))]
    recomputed = [
        sum(s.nbytes for key, s in saved.storages.items() if s.tag == i and key != input_of.get(i))
        for i in range(len(blocks))
    ]
    return {
        "total": saved.total,
        "per_block": per_block,
        "recomputed": recomputed,
        "block_inputs": sum(block_inputs.values()),
        "outside": by_block.get(None, 0),
        "output": out,
    }


@dataclass
class CheckpointResult:
    """Per (depth, checkpointed?): predicted saved bytes, measured bytes held (CUDA), peak, FLOPs, step time."""

    device: str
    preset: str
    batch: int
    width: int
    rows: list[dict] = field(default_factory=list)
    measured_note: str = ""

    def table(self) -> str:
        return checkpoint_table(self)


def checkpoint_table(result) -> str:
    """Markdown table of a checkpoint result (live or loaded from JSON)."""
    rec = as_record(result)
    mib = lambda b: None if b is None else b / 2**20  # noqa: E731
    rows = [
        [
            r["depth"],
            "yes" if r["checkpoint"] else "no",
            mib(r["predicted_saved_bytes"]),
            mib(r["predicted_recompute_bytes"]),
            mib(r["measured_held_bytes"]),
            mib(r["measured_peak_bytes"]),
            r["flops"] / 1e6,
            r["step_ms"],
            r["step_iqr_ms"],
        ]
        for r in rec["rows"]
    ]
    head = [
        "depth",
        "checkpoint",
        "predicted saved MiB",
        "recomputed block MiB",
        "measured held MiB",
        "measured peak MiB",
        "MFLOP fwd+bwd",
        "fwd+bwd ms (median)",
        "IQR ms",
    ]
    return markdown_table(head, rows)


def _loss(model, x):
    return model(x).square().mean()


def run_checkpoint(
    device="auto", preset: str = "auto", *, depths=None, time_runs: bool = True, progress_bar: bool = False
) -> CheckpointResult:
    """For each depth: predict saved bytes from the graph (and measure them on CUDA), count and time forward+backward."""
    device = experiment_device(device)
    preset = resolve_preset(preset, device)
    cfg = SIZES[preset]
    depths = cfg.depths if depths is None else tuple(depths)
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(cfg.batch, cfg.width, device=device, generator=gen)
    note = (
        (
            "measured = torch.cuda.memory_allocated after forward minus before (held), and max_memory_allocated during "
            "forward+backward minus before (peak)"
        )
        if device.type == "cuda"
        else "no allocator statistics on the CPU: measured columns need CUDA"
    )
    result = CheckpointResult(device.type, preset, cfg.batch, cfg.width, measured_note=note)
    work = [(d, c) for d in depths for c in (False, True)]
    for depth, use_ckpt in progress(work, desc="checkpoint", enabled=progress_bar):
        torch.manual_seed(1)
        model = Stack(cfg.width, depth, use_checkpoint=False).to(device)
        params = list(model.parameters())
        graph = saved_activation_bytes(
            lambda m=model: _loss(m, x), params=params, blocks=list(model.blocks), inputs=(x,)
        )
        del graph["output"]
        # with every block checkpointed, the blocks' inputs stay and one block is recomputed at a time
        predicted = graph["block_inputs"] + graph["outside"] if use_ckpt else graph["total"]
        model.use_checkpoint = use_ckpt
        held = peak = None
        if device.type == "cuda":
            model.zero_grad(set_to_none=True)
            synchronize(device)
            before = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
            loss = _loss(model, x)
            synchronize(device)
            held = torch.cuda.memory_allocated(device) - before
            loss.backward()
            synchronize(device)
            peak = torch.cuda.max_memory_allocated(device) - before
            del loss
            model.zero_grad(set_to_none=True)

        def fwd_bwd(model=model):  # bound now: the loop deletes `model` at the end of each iteration
            model.zero_grad(set_to_none=True)
            _loss(model, x).backward()

        stats = time_stats(fwd_bwd, device, cfg.min_run_time) if time_runs else None
        result.rows.append(
            {
                "depth": depth,
                "checkpoint": use_ckpt,
                "predicted_saved_bytes": int(predicted),
                "predicted_recompute_bytes": int(max(graph["recomputed"], default=0)) if use_ckpt else 0,
                "measured_held_bytes": held,
                "measured_peak_bytes": peak,
                "flops": count_flops(fwd_bwd),
                "step_ms": None if stats is None else stats["median_s"] * 1e3,
                "step_iqr_ms": None if stats is None else stats["iqr_s"] * 1e3,
            }
        )
        del model, params
    return result
