"""Capture the six pieces of state a training step moves, and tell which changed.

:func:`snapshot` records graph, grads, parameters, optimizer state, module mode and
RNG; :func:`changed_states` compares two snapshots. The graph part is
:func:`graph_stats`, built on :func:`autogradlab.graph.capture` (the package's one
graph walker and saved-tensor reader).

>>> import torch
>>> model = torch.nn.Linear(2, 1)
>>> before = snapshot(model)
>>> model(torch.ones(1, 2)).sum().backward()
>>> changed_states(before, snapshot(model))
['grad']
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import torch

from autogradlab.graph import capture
from autogradlab.graph.saved_bytes import distinct_bytes
from autogradlab.i18n import _
from autogradlab.units import format_bytes

STATES = ("graph", "grad", "param", "optimizer", "mode", "rng")


# --------------------------------------------------------------------------- graph


@dataclass(frozen=True)
class GraphStats:
    """What the autograd graphs behind some tensors hold on to.

    ``nodes``: backward nodes reachable from the tensors; ``saved_bytes``: bytes of
    saved tensors still held (each storage counted once, parameters excluded);
    ``freed``: nodes whose saved tensors were released by a backward pass;
    ``stale``: nodes holding a saved tensor that was modified in place after it was
    saved (an ``optimizer.step()`` after ``backward(retain_graph=True)``): backward
    through them raises.
    """

    nodes: int
    saved_bytes: int
    freed: int
    stale: int = 0

    def __str__(self) -> str:
        if self.nodes == 0:
            return _("none")
        freed = self.freed and not self.saved_bytes
        text = _("freed: {nodes} nodes, {size} saved") if freed else _("alive: {nodes} nodes, {size} saved")
        text = text.format(nodes=self.nodes, size=format_bytes(self.saved_bytes))
        return text + (_(", {count} stale").format(count=self.stale) if self.stale else "")


def graph_stats(tensors: Iterable, parameters: Iterable[torch.Tensor] = ()) -> GraphStats:
    """Count the backward nodes and saved-tensor bytes reachable from ``tensors``.

    Non-tensors and tensors without ``grad_fn`` are ignored, so a list of logged
    values can be passed as is. The walk is :func:`autogradlab.graph.capture`'s
    (iterative: deep graphs are fine). A stale saved tensor counts as stale, not as
    bytes, as it did when backward would still use it.

    >>> x = torch.ones(3, requires_grad=True)
    >>> str(graph_stats([(x * x).sum()]))
    'alive: 3 nodes, 12 B saved'
    """
    roots = [t for t in tensors if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    if not roots:
        return GraphStats(0, 0, 0)
    # Parameters are saved by most layers but are not memory that a graph adds: capture
    # names their storages, and a saved tensor on one carries that name.
    params = {f"parameter {i}": p for i, p in enumerate(parameters)}
    graph = capture(tuple(roots), params=params)
    nodes = [n for n in graph.nodes if n.kind != "output"]
    held = distinct_bytes(
        (saved.storage, saved.storage_nbytes)
        for node in nodes
        for saved in node.saved
        if saved.state == "ok" and saved.leaf_name not in params
    )
    return GraphStats(
        len(nodes),
        held,
        sum(any(s.state == "freed" for s in n.saved) for n in nodes),
        sum(any(s.state == "stale" for s in n.saved) for n in nodes),
    )


# --------------------------------------------------------------------------- snapshots


def rng_fingerprint() -> str:
    """Eight hex digits identifying the CPU generator's state (equal states, equal fingerprints).

    >>> _ = torch.manual_seed(0); a = rng_fingerprint()
    >>> _ = torch.manual_seed(0); a == rng_fingerprint()
    True
    """
    return hashlib.sha1(torch.get_rng_state().numpy().tobytes()).hexdigest()[:8]


def module_mode(model: torch.nn.Module) -> str:
    """``'train'``, ``'eval'``, or ``'mixed: k of n modules in train'``."""
    flags = [m.training for m in model.modules()]
    if all(flags):
        return "train"
    if not any(flags):
        return "eval"
    return f"mixed: {sum(flags)} of {len(flags)} modules in train"


@dataclass
class Snapshot:
    """Copies of the six pieces of state at one moment (small models only: parameters are cloned)."""

    graph: GraphStats
    grads: dict[str, torch.Tensor | None]
    params: dict[str, torch.Tensor]
    optimizer: dict[str, dict[str, torch.Tensor] | None]  # None: parameter not in the optimizer
    mode: str
    rng: str
    trainable: dict[str, bool] = field(default_factory=dict)


def _optimizer_state(optimizer, params: Mapping[str, torch.Tensor]) -> dict[str, dict | None]:
    covered = {id(p) for group in optimizer.param_groups for p in group["params"]} if optimizer else set()
    out = {}
    for name, p in params.items():
        if id(p) not in covered:
            out[name] = None
            continue
        state = optimizer.state.get(p, {})
        out[name] = {
            k: (v.detach().clone() if isinstance(v, torch.Tensor) else torch.tensor(v))
            for k, v in state.items()
            if isinstance(v, (torch.Tensor, int, float))  # e.g. SGD keeps momentum_buffer=None without momentum
        }
    return out


def snapshot(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None, graph_roots: Iterable = ()
) -> Snapshot:
    """Record graph, grads, parameters, optimizer state, mode and RNG of a (small) model.

    ``graph_roots``: tensors whose graphs count as "the forward graph" (e.g. ``[loss]``).

    >>> s = snapshot(torch.nn.Linear(2, 1))
    >>> (s.mode, s.grads["weight"], str(s.graph))
    ('train', None, 'none')
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"snapshot needs a torch.nn.Module, got {type(model).__name__}")
    named = dict(model.named_parameters())
    return Snapshot(
        graph=graph_stats(list(graph_roots), named.values()),
        grads={n: (None if p.grad is None else p.grad.detach().clone()) for n, p in named.items()},
        params={n: p.detach().clone() for n, p in named.items()},
        optimizer=_optimizer_state(optimizer, named),
        mode=module_mode(model),
        rng=rng_fingerprint(),
        trainable={n: p.requires_grad for n, p in named.items()},
    )


# --------------------------------------------------------------------------- comparing


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


def _same_state(a: dict | None, b: dict | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)


def _changed(state: str, item: str, before: Snapshot, after: Snapshot) -> bool:
    if state == "graph":
        return before.graph != after.graph
    if state == "mode":
        return before.mode != after.mode
    if state == "rng":
        return before.rng != after.rng
    if item not in getattr(before, _PER_PARAM[state]):
        return True
    if state == "grad":
        return not _same(before.grads[item], after.grads[item])
    if state == "param":
        return not _same(before.params[item], after.params[item])
    return not _same_state(before.optimizer[item], after.optimizer[item])


_PER_PARAM = {"grad": "grads", "param": "params", "optimizer": "optimizer"}


def changed_states(before: Snapshot, after: Snapshot) -> list[str]:
    """Which of the six states differ between two snapshots, in the order of :data:`STATES`."""
    return [state for state in STATES if any(_changed(state, item, before, after) for item in _items(state, after))]


def _items(state: str, after: Snapshot) -> list[str]:
    """What a state is kept per: one item ('') for the whole model, or each parameter's name."""
    return list(after.params) if state in _PER_PARAM else [""]
