"""Eager and compiled, side by side: what each saves for backward, what the compiled backward recomputes.

Eager's saved tensors come from the graph (:func:`autogradlab.graph.capture`) and its bytes from
the saved-tensor hooks (:class:`autogradlab.graph.saved_bytes.SavedBytes`); the compiled forward
saves through the same hooks (its ``CompiledFunction`` calls ``save_for_backward``), so both totals
are measured the same way, parameters and the input batch left out. Each result is computed once
per model and option and cached: a view that shows them only looks them up.

>>> c = compare("mlp", "min-cut")
>>> c.eager_bytes, c.compiled_bytes, c.compiled.new_bytes, c.compiled.recomputed_flops
(86016, 36864, 36864, 0)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode

from autogradlab.graph import capture
from autogradlab.graph.saved_bytes import SavedBytes
from autogradlab.i18n import N_
from autogradlab.models.compiled.course_models import MATMULS, build, save_only, with_policy
from autogradlab.models.compiled.partition import Partition, read_partition
from autogradlab.models.compiled.record import compile_recorded, quiet

#: option -> (partitioner, ops a selective-checkpoint policy saves; None: no checkpointing).
#: The names are CompileView's labels, through _() (the partitioners' names read the same in every language).
OPTIONS = {
    "default": ("default", None),
    "min-cut": ("min-cut", None),
    N_("min-cut + checkpoint (save matmuls)"): ("min-cut", MATMULS),
}


@dataclass(frozen=True)
class EagerSaved:
    """One tensor an eager backward node saved: ``source`` is 'parameter', 'input' or 'new'."""

    node: str
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype | None
    nbytes: int
    source: str


@dataclass(frozen=True)
class Comparison:
    """One model, eager vs compiled with one option: saved tensors, measured bytes, matmul FLOPs of forward+backward."""

    model: str
    option: str
    eager: tuple[EagerSaved, ...]
    eager_bytes: int
    eager_flops: int
    compiled: Partition
    compiled_bytes: int

    @property
    def compiled_flops(self) -> int:
        return self.compiled.forward_flops + self.compiled.backward_flops


def _loss(forward, x: torch.Tensor) -> torch.Tensor:
    return forward(x).square().mean()


@functools.cache
def eager_side(name: str) -> tuple[tuple[EagerSaved, ...], int, int]:
    """Eager's saved tensors, bytes (hooks, parameters and input left out) and FLOPs of one forward+backward."""
    model, x = build(name)
    with SavedBytes(exclude=[*model.parameters(), x]) as saved:
        loss = _loss(model, x)
    graph = capture(loss, params={**dict(model.named_parameters()), "batch": x})
    rows = tuple(
        EagerSaved(
            node.name,
            s.name,
            tuple(s.shape or ()),
            s.dtype,
            s.nbytes,
            "input" if s.leaf_name == "batch" else "parameter" if s.leaf_name else "new",
        )
        for node in graph.nodes
        for s in node.saved
    )
    with FlopCounterMode(display=False) as flops:
        _loss(model, x).backward()
    return rows, saved.total, int(flops.get_total_flops())


@functools.cache
def compare(name: str, option: str) -> Comparison:
    """Compile model ``name`` with ``option`` (one of :data:`OPTIONS`), once; eager beside it."""
    if option not in OPTIONS:
        raise ValueError(f"unknown option {option!r}: choose one of {', '.join(OPTIONS)}")
    partitioner, kept = OPTIONS[option]
    torch.compiler.reset()  # Dynamo stops compiling a function after 8 recompiles: start from an empty cache
    model, x = build(name)
    forward = model if kept is None else with_policy(model, save_only(kept))
    compiled, recording = compile_recorded(lambda batch: _loss(forward, batch), partition=partitioner)
    with quiet():
        compiled(x).backward()  # compiles forward and backward
        with SavedBytes(exclude=[*model.parameters(), x]) as saved:
            loss = compiled(x)
        loss.backward()
    eager, eager_bytes, eager_flops = eager_side(name)
    return Comparison(name, option, eager, eager_bytes, eager_flops, read_partition(recording), saved.total)
