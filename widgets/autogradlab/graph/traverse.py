"""``capture(output)``: walk ``grad_fn.next_functions`` into a plain :class:`Graph`.

The walk is iterative (a chain of 10,000 ops is fine) and visits each backward node
once. Ids follow the order backward would run the nodes (outputs first, then ops
by decreasing sequence number, as the autograd engine schedules them), so the same
program always gives the same ids, unlike ``id()``.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from autogradlab import torch_internals as internals
from autogradlab.graph.model import Edge, Graph, Node, Saved, format_shape
from autogradlab.graph.nogc import paused_gc
from autogradlab.graph.saved import saved_of
from autogradlab.i18n import _
from autogradlab.units import format_bytes

_CPP_PREFIX = "torch::autograd::"
_LEAF = "AccumulateGrad"


def node_name(fn: Any) -> str:
    """``'MmBackward0'``, ``'AccumulateGrad'``, ``'CopySlices'``: the name without C++ namespace."""
    return fn.name().removeprefix(_CPP_PREFIX)


def as_outputs(output: Any) -> list[torch.Tensor]:
    """The tensors to start from: one tensor, or each of a tuple/list; a clear error for anything else."""
    items = list(output) if isinstance(output, (tuple, list)) else [output]
    if not items:
        raise ValueError("capture() needs at least one tensor; got an empty tuple.")
    for i, item in enumerate(items):
        where = _("output {index}").format(index=i) if len(items) > 1 else _("this value")
        problem = describe_ungraphable(item)
        if problem:
            raise (TypeError if not isinstance(item, torch.Tensor) else ValueError)(f"{where}: {problem}")
    return items


def describe_ungraphable(value: Any) -> str | None:
    """Why ``value`` has no autograd graph to draw, in a learner's words, or None if it has one."""
    if isinstance(value, bool) or not isinstance(value, (torch.Tensor, int, float, complex)):
        if isinstance(value, (list, tuple)):
            return _("a list/tuple is not a tensor: `.tolist()` copies the values out of the graph.")
        return _("expected a tensor with a grad_fn, got a {type}.").format(type=type(value).__name__)
    if not isinstance(value, torch.Tensor):
        return _(
            "this is a plain Python {type} ({value}), not a tensor: `.item()`, `float()` or "
            "`.tolist()` copy the value out of the graph, and nothing before them can get a gradient."
        ).format(type=type(value).__name__, value=repr(value))
    if value.grad_fn is not None:
        return None
    if value.requires_grad:
        return _(
            "this tensor {shape} is a leaf: you created it (requires_grad=True), "
            "no operation did, so it has no grad_fn and there is no graph above it. Capture a result computed from it."
        ).format(shape=format_shape(tuple(value.shape)))
    return _(
        "this tensor {shape} has no grad_fn and does not require grad: it was computed "
        "under torch.no_grad(), from `.detach()`/`.data`, from tensors that do not require grad, or rebuilt with "
        "torch.tensor(...). No graph was recorded."
    ).format(shape=format_shape(tuple(value.shape)))


def _named_params(params: Any) -> list[tuple[str, torch.Tensor]]:
    if params is None:
        return []
    if isinstance(params, torch.nn.Module):
        pairs: Iterable = params.named_parameters()
    elif isinstance(params, Mapping):
        pairs = params.items()
    else:
        pairs = params
    named = []
    for name, tensor in pairs:
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"params[{name!r}] should be a tensor, got a {type(tensor).__name__}.")
        named.append((str(name), tensor))
    return named


def walk(outputs: list[torch.Tensor]) -> tuple[list[Any], list[list[tuple[int | None, int]]], list[int]]:
    """All backward nodes reachable from ``outputs`` in engine order, each node's children, the roots.

    ``children[i]`` lists ``(child_index or None, input_nr)`` per ``next_functions`` entry;
    ``roots[k]`` is the index of ``outputs[k].grad_fn``.
    """
    index: dict[Any, int] = {}
    found: list[Any] = []
    next_of: list[tuple] = []
    stack = [t.grad_fn for t in reversed(outputs)]
    while stack:
        fn = stack.pop()
        if fn in index:
            continue
        index[fn] = len(found)
        found.append(fn)
        nexts = fn.next_functions
        next_of.append(nexts)
        for child, _slot in reversed(nexts):
            if child is not None and child not in index:
                stack.append(child)
    # Engine order: a node runs once all its consumers ran; among ready nodes the one created
    # last in the forward pass first (AccumulateGrad has the largest sequence number).
    consumers = [0] * len(found)
    for nexts in next_of:
        for child, _slot in nexts:
            if child is not None:
                consumers[index[child]] += 1
    for t in outputs:
        consumers[index[t.grad_fn]] += 1
    seq = [internals.sequence_nr(fn) for fn in found]
    ready: list[tuple[int, int]] = []
    for t in outputs:
        root = index[t.grad_fn]
        consumers[root] -= 1
        if consumers[root] == 0:
            heapq.heappush(ready, (-seq[root], root))
    order: list[int] = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(i)
        for child, _slot in next_of[i]:
            if child is not None:
                c = index[child]
                consumers[c] -= 1
                if consumers[c] == 0:
                    heapq.heappush(ready, (-seq[c], c))
    position = {old: new for new, old in enumerate(order)}
    fns = [found[i] for i in order]
    children = [[(None if child is None else position[index[child]], nr) for child, nr in next_of[i]] for i in order]
    roots = [position[index[t.grad_fn]] for t in outputs]
    return fns, children, roots


_SPARSE_PARTS = {  # the tensors a sparse layout is made of (it has no single storage)
    torch.sparse_coo: ("_indices", "_values"),
    torch.sparse_csr: ("crow_indices", "col_indices", "values"),
    torch.sparse_csc: ("ccol_indices", "row_indices", "values"),
    torch.sparse_bsr: ("crow_indices", "col_indices", "values"),
    torch.sparse_bsc: ("ccol_indices", "row_indices", "values"),
}


def storage_of(tensor: torch.Tensor) -> tuple[int | None, int, str]:
    """``(pointer, bytes, note)`` of the one storage behind ``tensor``, or ``(None, bytes, why)``.

    Sparse (COO, CSR, ...) tensors have no single storage, meta tensors have no memory,
    and nested or other subclass tensors may not expose theirs: such a tensor gets no
    storage identity (it stays out of the memory totals), its own size where it can be
    computed, and a note that says why.

    >>> import torch
    >>> storage_of(torch.zeros(3, device="meta"))
    (None, 0, 'meta tensor: shape and dtype only, no memory (12 B on a real device); not in the memory totals')
    >>> storage_of(torch.eye(3).to_sparse())[1:]
    (60, 'sparse COO tensor: no single storage (its indices and values take 60 B); not in the memory totals')
    """
    layout = tensor.layout
    if layout in _SPARSE_PARTS:
        nbytes = 0
        for part in _SPARSE_PARTS[layout]:
            t = getattr(tensor, part)()
            nbytes += t.numel() * t.element_size()
        kind = str(layout).removeprefix("torch.sparse_").upper()
        return (
            None,
            nbytes,
            (
                f"sparse {kind} tensor: no single storage (its indices and values take "
                f"{format_bytes(nbytes)}); not in the memory totals"
            ),
        )
    if tensor.is_meta:
        would = format_bytes(tensor.numel() * tensor.element_size())
        return (
            None,
            0,
            f"meta tensor: shape and dtype only, no memory ({would} on a real device); not in the memory totals",
        )
    try:
        storage = tensor.untyped_storage()
        return storage.data_ptr(), storage.nbytes(), ""
    except (RuntimeError, NotImplementedError, TypeError):  # nested (jagged) tensors, other subclasses
        kind = (
            "nested tensor" if tensor.is_nested else f"{type(tensor).__name__} ({str(layout).removeprefix('torch.')})"
        )
        return None, 0, f"{kind}: its storage cannot be read, so its memory is not in the memory totals"


class _Storages:
    """Numbers distinct storages in order of first appearance (stable across runs, unlike pointers)."""

    def __init__(self, leaf_storage_names: dict[int, str]):
        self.numbers: dict[int, int] = {}
        self.leaf_names = leaf_storage_names

    def describe(self, tensor: torch.Tensor) -> tuple[int | None, int, str | None, int, str]:
        """(storage number, storage bytes, leaf name, the tensor's own bytes, note)."""
        ptr, nbytes, note = storage_of(tensor)
        if ptr is None:
            return None, 0, None, nbytes, note
        number = self.numbers.setdefault(ptr, len(self.numbers))
        return number, nbytes, self.leaf_names.get(ptr), tensor.numel() * tensor.element_size(), ""


def capture(output: Any, params: Any = None) -> Graph:
    """Capture the autograd graph behind ``output`` (a tensor, or a tuple of tensors).

    ``params`` names the leaves: a dict ``{name: tensor}``, pairs, or an ``nn.Module``.

    >>> import torch
    >>> w = torch.randn(3, 2, requires_grad=True)
    >>> x = torch.randn(4, 3)
    >>> g = capture((x @ w).relu().sum(), params={"w": w})
    >>> [n.name for n in g.nodes]
    ['output', 'SumBackward0', 'ReluBackward0', 'MmBackward0', 'AccumulateGrad']
    >>> g.params_with_grad()
    ['w']
    """
    outputs = as_outputs(output)
    named = _named_params(params)
    with paused_gc():
        return _capture(outputs, named)


def _capture(outputs: list[torch.Tensor], named: list[tuple[str, torch.Tensor]]) -> Graph:
    names: dict[int, str] = {}
    for pname, tensor in named:
        names.setdefault(id(tensor), pname)
    fns, children, roots = walk(outputs)
    n_out = len(outputs)

    leaf_vars: dict[int, torch.Tensor] = {}
    for i, fn in enumerate(fns):
        variable = getattr(fn, "variable", None)
        if isinstance(variable, torch.Tensor) and node_name(fn) == _LEAF:
            leaf_vars[i] = variable
    leaf_storage_names: dict[int, str] = {}
    # A named parameter's memory exists anyway, even when the graph only saw it through .detach().
    leaf_notes: dict[int, str] = {}
    for pname, tensor in named:
        ptr, _nbytes, _note = storage_of(tensor)
        if ptr is not None:
            leaf_storage_names.setdefault(ptr, pname)
    for i, variable in leaf_vars.items():
        label = names.get(id(variable)) or f"leaf {format_shape(tuple(variable.shape))}"
        ptr, _, note = storage_of(variable)
        if ptr is None:
            leaf_notes[i] = note
        else:
            leaf_storage_names.setdefault(ptr, label)
    storages = _Storages(leaf_storage_names)

    nodes: list[Node] = []
    edges: list[Edge] = []
    for k, t in enumerate(outputs):
        label = "output" if n_out == 1 else f"output {k}"
        nodes.append(Node(k, label, "output", tuple(t.shape), t.dtype, output_shapes=[tuple(t.shape)]))
    output_shapes: list[list[tuple]] = []
    for i, fn in enumerate(fns):
        meta = internals.input_metadata(fn)
        shapes = [tuple(m.shape) for m in meta]
        output_shapes.append(shapes)
        name = node_name(fn)
        node = Node(n_out + i, name, "leaf" if i in leaf_vars else "op", output_shapes=shapes)
        if i in leaf_vars:
            variable = leaf_vars[i]
            node.shape, node.dtype = tuple(variable.shape), variable.dtype
            node.param_name = names.get(id(variable))
            node.note = leaf_notes.get(i, "")
        elif meta:
            node.shape, node.dtype = shapes[0], meta[0].dtype
        node.inputs_without_grad = sum(1 for child, _slot in children[i] if child is None)
        node.saved = [_to_saved(raw, storages) for raw in saved_of(fn)] if i not in leaf_vars else []
        nodes.append(node)

    for k, t in enumerate(outputs):
        edges.append(Edge(k, n_out + roots[k], tuple(t.shape)))
    for i, kids in enumerate(children):
        for child, nr in kids:
            if child is not None:
                shapes = output_shapes[child]
                edges.append(Edge(n_out + i, n_out + child, shapes[nr] if nr < len(shapes) else None))

    # Forward order: rank of the sequence number among ops (leaves have none).
    ops = [i for i in range(len(fns)) if i not in leaf_vars]
    for rank, i in enumerate(sorted(ops, key=lambda i: internals.sequence_nr(fns[i]))):
        nodes[n_out + i].forward_index = rank
    return Graph(nodes, edges)


def _to_saved(raw, storages: _Storages) -> Saved:
    tensor = raw.tensor
    if tensor is None:
        return Saved(
            raw.name,
            None,
            None,
            0,
            raw.state,
            note=raw.note,
            version_saved=raw.version_saved,
            version_now=raw.version_now,
            modified_by=raw.modified_by,
        )
    number, storage_nbytes, leaf_name, nbytes, storage_note = storages.describe(tensor)
    note = "; ".join(n for n in (raw.note, storage_note) if n)
    return Saved(
        raw.name,
        tuple(tensor.shape),
        tensor.dtype,
        nbytes,
        raw.state,
        storage=number,
        storage_nbytes=storage_nbytes,
        leaf_name=leaf_name,
        version_saved=raw.version_saved if raw.version_saved is not None else internals.version(tensor),
        version_now=internals.version(tensor),
        modified_by=raw.modified_by,
        note=note,
    )
