"""Record what ``torch.compile`` builds: Dynamo's graphs, then AOTAutograd's forward and backward graphs.

A Dynamo backend is any function ``backend(graph_module, example_inputs) -> callable``. The
recording backends here keep every graph they are handed and run it eagerly, so compiling costs
tracing only (no kernels are generated): fast on a CPU, and the same graphs inductor receives.

* ``partition=None``: Dynamo's graph only (torch-level ops, run as captured, no AOTAutograd);
* ``partition="default"`` or ``"min-cut"``: AOTAutograd traces the joint forward+backward graph
  and splits it with that partitioner; ``decompose=True`` first applies inductor's decompositions
  (GELU becomes erf and multiplications), as ``torch.compile`` with inductor does.

>>> import torch
>>> compiled, rec = compile_recorded(lambda x: x.sin().cos().sum(), partition="min-cut")
>>> compiled(torch.ones(3, requires_grad=True)).backward()
>>> rec.compiles, [op_names(g) for g in rec.forward], op_names(rec.backward[0])
(1, [['sin', 'cos', 'sum']], ['expand', 'sin', 'sin', 'neg', 'mul', 'cos', 'mul'])
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from functorch.compile import (
    aot_module_simplified,
    default_partition,
    make_boxed_func,
    min_cut_rematerialization_partition,
)

from autogradlab.torch_internals import inductor_decompositions

PARTITIONERS = {"default": default_partition, "min-cut": min_cut_rematerialization_partition}


@dataclass
class Recording:
    """The graphs one compiled function produced, in the order they were built (one per compile)."""

    dynamo: list[torch.fx.GraphModule] = field(default_factory=list)
    forward: list[torch.fx.GraphModule] = field(default_factory=list)
    backward: list[torch.fx.GraphModule] = field(default_factory=list)

    @property
    def compiles(self) -> int:
        """How many graphs Dynamo captured: one per graph piece and per recompile."""
        return len(self.dynamo)


def recording_backend(partition: str | None = "min-cut", decompose: bool = True) -> tuple[Callable, Recording]:
    """A Dynamo backend that records the graphs it is given, and the :class:`Recording` it fills."""
    if partition is not None and partition not in PARTITIONERS:
        raise ValueError(f"unknown partitioner {partition!r}: choose one of {', '.join(PARTITIONERS)} or None")
    recording = Recording()

    def keep(into: list) -> Callable:
        def compiler(graph: torch.fx.GraphModule, example_inputs: Any) -> Callable:
            into.append(graph)
            return make_boxed_func(graph.forward)

        return compiler

    def recorder(graph: torch.fx.GraphModule, example_inputs: list) -> Callable:
        recording.dynamo.append(graph)
        if partition is None:
            return graph.forward
        return aot_module_simplified(
            graph,
            example_inputs,
            fw_compiler=keep(recording.forward),
            bw_compiler=keep(recording.backward),
            partition_fn=PARTITIONERS[partition],
            decompositions=inductor_decompositions() if decompose else None,
        )

    return recorder, recording


def compile_recorded(
    fn: Callable, partition: str | None = "min-cut", decompose: bool = True, dynamic: bool | None = False
) -> tuple[Callable, Recording]:
    """``torch.compile(fn)`` with a recording backend: the compiled function and its :class:`Recording`.

    ``dynamic=False`` (the default here) compiles for the exact shapes seen, so a graph never depends
    on what was compiled before; ``dynamic=None`` is ``torch.compile``'s own default, which makes a
    shape symbolic once it has changed.
    """
    backend, recording = recording_backend(partition, decompose)
    return torch.compile(fn, backend=backend, dynamic=dynamic), recording


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Hold back the compiler's log warnings (graph breaks, recompiles) and Python warnings while the block runs.

    The log lines carry a time stamp and a process id, the warnings file paths, so a notebook's output
    would change from run to run; the chapter reads the same information as data instead
    (:func:`autogradlab.models.compiled.breaks.graph_breaks`).
    """
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(logging.NOTSET)


def op_names(graph: torch.fx.GraphModule) -> list[str]:
    """The ops a graph calls, in order, by short name (``aten.mm.default`` -> ``mm``, ``torch.sin`` -> ``sin``).

    >>> op_names(torch.fx.symbolic_trace(lambda x: (x @ x).relu()))
    ['matmul', 'relu']
    """
    names = []
    for node in graph.graph.nodes:
        if node.op == "call_function":
            target = node.target
            packet = getattr(target, "overloadpacket", None)
            names.append(getattr(packet or target, "__name__", str(target)))
        elif node.op in ("call_method", "call_module"):
            names.append(str(node.target))
    return names
