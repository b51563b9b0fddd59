"""The captured graph as plain data: nodes, edges and saved tensors, with no reference to torch objects.

A :class:`Graph` holds no tensors and no ``grad_fn`` objects, so keeping one around
never keeps the activations of the forward pass alive.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache

import torch

from autogradlab.graph.saved_bytes import distinct_bytes
from autogradlab.units import format_bytes

KINDS = ("output", "op", "leaf")


@lru_cache(maxsize=4096)  # a big graph repeats the same few shapes thousands of times
def format_shape(shape: tuple | None) -> str:
    """``(5, 3)`` for a shape, ``()`` for a scalar, ``?`` when unknown (a freed saved tensor)."""
    if shape is None:
        return "?"
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


@lru_cache(maxsize=64)
def dtype_name(dtype: torch.dtype | None) -> str:
    return "?" if dtype is None else str(dtype).removeprefix("torch.")


@dataclass
class Saved:
    """One tensor that a backward node keeps for its backward formula.

    ``state`` is ``'ok'``, ``'stale'`` (modified in place after it was saved: backward
    will raise) or ``'freed'`` (released by an earlier backward). ``storage`` numbers
    the distinct storages of the graph in order of appearance: two saved tensors
    with the same ``storage`` share memory and are counted once in totals.
    """

    name: str
    shape: tuple | None
    dtype: torch.dtype | None
    nbytes: int
    state: str
    storage: int | None = None
    storage_nbytes: int = 0
    version_saved: int | None = None
    version_now: int | None = None
    modified_by: str | None = None
    leaf_name: str | None = None  # the parameter (or named leaf) whose memory this is
    note: str = ""

    def __repr__(self) -> str:
        return (
            f"Saved({self.name!r}, {format_shape(self.shape)}, {dtype_name(self.dtype)}, {self.nbytes} B, {self.state})"
        )

    @property
    def label(self) -> str:
        return f"{self.name} {format_shape(self.shape)}"

    def describe(self) -> str:
        """One line for a learner, e.g. ``self (5, 4) float32, 80 B — stale: ...``."""
        head = f"{self.name} {format_shape(self.shape)} {dtype_name(self.dtype)}, {format_bytes(self.nbytes)}"
        if self.leaf_name:
            head += f" (the memory of {self.leaf_name})"
        return f"{head} — {self.note}" if self.note else head


@dataclass
class Node:
    """One node of the backward graph.

    ``kind`` is ``'output'`` (a tensor you passed to ``capture``), ``'op'`` (a
    backward function such as ``MmBackward0``) or ``'leaf'`` (``AccumulateGrad``:
    where a gradient lands in a leaf's ``.grad``). ``shape``/``dtype`` describe the
    forward tensor the node produced (for a leaf: the leaf itself).
    """

    id: int
    name: str
    kind: str
    shape: tuple | None = None
    dtype: torch.dtype | None = None
    param_name: str | None = None
    saved: list[Saved] = field(default_factory=list)
    output_shapes: list[tuple] = field(default_factory=list)
    inputs_without_grad: int = 0  # None entries of next_functions: inputs that need no gradient
    forward_index: int | None = None  # order in which the forward pass created this op (0 = first)
    note: str = ""  # e.g. a sparse or meta leaf whose memory cannot be accounted for

    def __repr__(self) -> str:
        extra = f", param={self.param_name!r}" if self.param_name else ""
        saved = f", saved=[{', '.join(s.name for s in self.saved)}]" if self.saved else ""
        return f"Node({self.id}, {self.name!r}, {self.kind}, {format_shape(self.shape)}{extra}{saved})"

    @property
    def label(self) -> str:
        if self.kind == "leaf":
            return self.param_name or "leaf"
        return self.name

    @property
    def saved_nbytes(self) -> int:
        return sum(s.nbytes for s in self.saved)


class Edge(tuple):
    """``(src_id, dst_id)`` in gradient-flow order, with the tensor ``shape`` carried on it.

    It is a plain 2-tuple for comparisons and unpacking (``for src, dst in g.edges``);
    ``edge.shape`` is the shape of the tensor (and of its gradient) along the edge.
    """

    def __new__(cls, src: int, dst: int, shape: tuple | None = None):
        self = super().__new__(cls, (src, dst))
        self.shape = shape
        return self

    @property
    def src(self) -> int:
        return self[0]

    @property
    def dst(self) -> int:
        return self[1]

    def __reduce__(self):
        return (Edge, (self[0], self[1], self.shape))


@dataclass
class Graph:
    """A captured autograd graph. Display it in a notebook, or call :meth:`to_svg`.

    >>> import torch
    >>> from autogradlab.graph import capture
    >>> w = torch.ones(2, requires_grad=True)
    >>> capture((w * w).sum(), params={"w": w})
    Graph(4 nodes: 1 output, 2 ops, 1 leaf; 2 saved tensors, 8 B)
    """

    nodes: list[Node]
    edges: list[Edge]

    def __post_init__(self) -> None:
        self._by_id = {n.id: n for n in self.nodes}

    def __repr__(self) -> str:
        counts = {k: sum(n.kind == k for n in self.nodes) for k in KINDS}
        parts = [
            f"{counts['output']} output{'s' * (counts['output'] != 1)}",
            f"{counts['op']} op{'s' * (counts['op'] != 1)}",
            f"{counts['leaf']} lea{'ves' if counts['leaf'] != 1 else 'f'}",
        ]
        saved = list(self.saved_tensors())
        text = f"Graph({len(self.nodes)} nodes: {', '.join(parts)}; {len(saved)} saved tensor{'s' * (len(saved) != 1)}"
        if saved:
            text += f", {format_bytes(self.saved_bytes())}"
        stale, freed = self.count_state("stale"), self.count_state("freed")
        uncounted = len(self.uncounted())
        if uncounted:
            text += f"; {uncounted} not counted"
        if stale:
            text += f"; {stale} STALE"
        if freed:
            text += f"; {freed} freed"
        return text + ")"

    def node(self, node_id: int) -> Node:
        """The node with this id."""
        return self._by_id[node_id]

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def find(self, name: str) -> list[Node]:
        """Nodes whose name (or parameter name) is ``name``: ``g.find('MmBackward0')``."""
        return [n for n in self.nodes if n.name == name or n.param_name == name]

    @property
    def leaves(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == "leaf"]

    @property
    def outputs(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == "output"]

    def params_with_grad(self) -> list[str]:
        """Names of the parameters this graph reaches: exactly those that backward gives a gradient."""
        return [n.param_name for n in self.nodes if n.kind == "leaf" and n.param_name]

    def saved_tensors(self, state: str | None = None) -> Iterator[tuple[Node, Saved]]:
        """``(node, saved)`` pairs, optionally only those in ``state``."""
        for node in self.nodes:
            for saved in node.saved:
                if state is None or saved.state == state:
                    yield node, saved

    def count_state(self, state: str) -> int:
        return sum(1 for _ in self.saved_tensors(state))

    @property
    def freed(self) -> bool:
        """True when backward already released this graph's saved tensors."""
        return any(s.state == "freed" for _, s in self.saved_tensors())

    @property
    def stale(self) -> list[tuple[Node, Saved]]:
        """Saved tensors modified in place since they were saved: backward will raise on them."""
        return list(self.saved_tensors("stale"))

    def uncounted(self) -> list[tuple[Node, Saved]]:
        """Live saved tensors whose memory is not in the totals (sparse, meta, nested): each ``note`` says why.

        >>> import torch
        >>> from autogradlab.graph import capture
        >>> w = torch.randn(3, 2, requires_grad=True)
        >>> a = torch.eye(4, 3).to_sparse()
        >>> g = capture(torch.sparse.mm(a, w).sum(), params={"w": w})
        >>> g
        Graph(4 nodes: 1 output, 2 ops, 1 leaf; 1 saved tensor, 0 B; 1 not counted)
        >>> [(s.name, s.note) for _, s in g.uncounted()]
        [('mat1', 'sparse COO tensor: no single storage (its indices and values take 60 B); not in the memory totals')]
        """
        return [
            (n, s) for n, s in self.saved_tensors() if s.state != "freed" and s.storage is None and s.shape is not None
        ]

    def saved_bytes(self, include_leaves: bool = True) -> int:
        """Memory held by saved tensors, each storage counted once.

        A storage counts with its full size (a saved slice keeps its whole base
        alive). ``include_leaves=False`` leaves out storages that belong to a leaf
        (a parameter or an input you created): those exist whether or not a graph
        is built, so what remains is the activation memory the graph adds.
        """
        return distinct_bytes(
            (saved.storage, saved.storage_nbytes)
            for _, saved in self.saved_tensors()
            if saved.state != "freed" and (include_leaves or saved.leaf_name is None)
        )

    def activation_bytes(self) -> int:
        """Saved memory that exists only because of this graph (not parameters or inputs you hold)."""
        return self.saved_bytes(include_leaves=False)
