"""Read a partition: what the compiled forward saves for backward, and what backward recomputes.

AOTAutograd splits the joint graph in two. The forward graph returns the function's outputs and
then the **saved values**; the backward graph takes exactly those saved values, then one tangent
(incoming gradient) per output. So the saved set is the backward graph's inputs minus the tangents,
and an op of the backward graph is forward work done again, a **recomputation**, when it repeats an op of the forward graph on the same inputs.

A saved value costs memory of its own unless it is an input of the function (a parameter, the
batch) or a view of one (``t``, ``permute``, ``view``, ``detach``, ...: ``OpOverload.is_view``).

>>> import torch
>>> from autogradlab.models.compiled.record import compile_recorded
>>> f, rec = compile_recorded(lambda x, w: (x @ w).cos().cos().sum(), partition="min-cut")
>>> f(torch.ones(4, 3), torch.ones(3, 5, requires_grad=True)).backward()
>>> part = read_partition(rec)
>>> [(v.name, v.shape, v.source) for v in part.saved], part.new_bytes, part.recomputed
([('mm', (4, 5), 'new'), ('permute', (3, 4), 'view of an input')], 80, ('cos',))
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
from torch.fx import Graph, GraphModule, Node
from torch.fx.node import map_arg
from torch.utils.flop_counter import FlopCounterMode

from autogradlab.models.compiled.record import Recording

TANGENT_PREFIX = "tangents"  # AOTAutograd names the backward's gradient inputs tangents_1, tangents_2, ...


@dataclass(frozen=True)
class SavedValue:
    """One value the compiled forward hands to backward: ``source`` is 'new', 'input' or 'view of an input'."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype | None
    nbytes: int
    source: str
    base: str = ""  # the forward node whose memory it is (itself, unless it is a view)
    base_nbytes: int = 0


@dataclass(frozen=True)
class Partition:
    """What one compiled forward saves, what its backward recomputes, and the matmul FLOPs of each graph."""

    saved: tuple[SavedValue, ...]
    recomputed: tuple[str, ...]
    forward_flops: int
    backward_flops: int
    recomputed_flops: int

    @property
    def new_bytes(self) -> int:
        """Bytes of the saved values that are not inputs or views of inputs, each memory once: what the graph adds."""
        return sum({v.base: v.base_nbytes for v in self.saved if v.source == "new"}.values())


def _value(node: Node):
    return node.meta.get("val")


def _nbytes(value) -> int:
    return value.numel() * value.element_size() if isinstance(value, torch.Tensor) else 0


def base_of(node: Node) -> Node:
    """The node whose memory ``node`` lives in: follow view ops (``t``, ``view``, ``permute``, ...) back.

    A view op with several outputs (``split``, ``chunk``) hands out its pieces through ``getitem`` nodes.
    """
    while node.op == "call_function" and node.args:
        source = node.args[0]
        piece = node.target is operator.getitem and isinstance(source, Node)
        if not (getattr(node.target, "is_view", False) or (piece and getattr(source.target, "is_view", False))):
            break
        node = source
    return node


def saved_values(forward: GraphModule, backward: GraphModule) -> list[SavedValue]:
    """The values ``forward`` saves for ``backward``, in order, with their bytes and where their memory comes from."""
    by_name = {node.name: node for node in forward.graph.nodes}
    out = []
    for placeholder in backward.graph.find_nodes(op="placeholder"):
        if placeholder.name.startswith(TANGENT_PREFIX):
            continue
        node = by_name.get(placeholder.name, placeholder)
        value = _value(node)
        base = base_of(node)
        source = "input" if node.op == "placeholder" else "view of an input" if base.op == "placeholder" else "new"
        shape = tuple(value.shape) if isinstance(value, torch.Tensor) else ()
        dtype = value.dtype if isinstance(value, torch.Tensor) else None
        out.append(SavedValue(node.name, shape, dtype, _nbytes(value), source, base.name, _nbytes(_value(base))))
    return out


def _computations(graph: Graph, ids: dict[tuple, int], named: dict[str, int] | None = None) -> dict[Node, int]:
    """A number per node, equal for two nodes that compute the same thing (same op on the same inputs).

    ``ids`` is shared by the graphs compared. The backward's saved-value inputs take the numbers
    of the forward nodes of the same name (``named``), so a backward op numbered like a forward op
    repeats that forward op; its tangents are new inputs.
    """
    out: dict[Node, int] = {}
    for node in graph.nodes:
        if node.op == "placeholder" and named is not None and node.name in named:
            out[node] = named[node.name]
            continue
        args = map_arg((node.args, node.kwargs), lambda n: ("node", out[n]))
        source = ("backward" if named is not None else "forward", node.name) if node.op == "placeholder" else None
        key = (node.op, source or str(node.target), repr(args))
        out[node] = ids.setdefault(key, len(ids))
    return out


def recomputed_nodes(forward: GraphModule, backward: GraphModule) -> list[Node]:
    """The ops of ``backward`` that repeat an op of ``forward`` on the same inputs (views, which copy nothing, left out)."""
    ids: dict[tuple, int] = {}
    numbers = _computations(forward.graph, ids)
    by_name = {node.name: numbers[node] for node in forward.graph.nodes}
    in_forward = {numbers[node] for node in forward.graph.nodes if node.op == "call_function"}
    again = _computations(backward.graph, ids, by_name)
    return [
        node
        for node in backward.graph.nodes
        if node.op == "call_function" and again[node] in in_forward and not getattr(node.target, "is_view", False)
    ]


def graph_flops(nodes) -> int:
    """Matmul FLOPs of graph nodes by ``FlopCounterMode``'s own formulas, from the shapes the graph recorded.

    Static, so it needs no run (and counts exactly what ``FlopCounterMode`` counts: matmuls,
    convolutions and attention; pointwise ops count 0).
    """
    registry = FlopCounterMode(display=False).flop_registry
    total = 0
    for node in nodes:
        packet = getattr(node.target, "overloadpacket", None)
        if node.op == "call_function" and packet in registry:
            args, kwargs = map_arg((node.args, node.kwargs), _value)
            total += int(registry[packet](*args, **kwargs, out_val=_value(node)))
    return total


def _short(node: Node) -> str:
    packet = getattr(node.target, "overloadpacket", None)
    return getattr(packet or node.target, "__name__", str(node.target))


def read_partition(recording: Recording, index: int = -1) -> Partition:
    """The :class:`Partition` of one compile (the last by default) of a recording with AOTAutograd graphs."""
    if not recording.backward:
        raise ValueError("no backward graph recorded yet: run backward once through the compiled function")
    forward, backward = recording.forward[index], recording.backward[index]
    again = recomputed_nodes(forward, backward)
    return Partition(
        saved=tuple(saved_values(forward, backward)),
        recomputed=tuple(_short(n) for n in again),
        forward_flops=graph_flops(forward.graph.nodes),
        backward_flops=graph_flops(backward.graph.nodes),
        recomputed_flops=graph_flops(again),
    )
