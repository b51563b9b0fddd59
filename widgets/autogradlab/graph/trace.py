"""Record a real backward pass node by node, without disturbing the learner's ``.grad``.

A pre-hook on every backward node logs when it runs and the norm of the gradient
arriving at it. Backward runs with ``retain_graph=True`` (the learner's graph stays
usable) and each leaf's ``.grad`` is put back as it was afterwards, so recording
changes nothing the learner can see (except ``.grad`` of tensors they called
``retain_grad()`` on, which backward fills as usual).

>>> import torch
>>> w = torch.tensor([1.0, 2.0], requires_grad=True)
>>> rec = record_backward((w * w).sum())
>>> [s.name for s in rec.steps]
['SumBackward0', 'MulBackward0', 'AccumulateGrad']
>>> rec.leaf_grads[3].tolist(), w.grad
([2.0, 4.0], None)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from autogradlab.graph.traverse import as_outputs, node_name, walk


@dataclass
class Step:
    """One node run by backward: which node, and the gradient that arrived at it."""

    node_id: int
    name: str
    grad_norm: float | None  # norm of all incoming gradients together; None if all were None
    grad_shapes: list[tuple | None]


@dataclass
class BackwardRecord:
    """What one backward pass did: the steps in the order they ran and each leaf's gradient."""

    steps: list[Step] = field(default_factory=list)
    leaf_grads: dict[int, torch.Tensor] = field(default_factory=dict)  # leaf node id -> gradient
    error: str | None = None  # backward raised (stale saved tensor, freed graph, ...)

    def order(self) -> list[int]:
        return [s.node_id for s in self.steps]


def _norm(grads: tuple) -> tuple[float | None, list[tuple | None]]:
    shapes = [tuple(g.shape) if isinstance(g, torch.Tensor) else None for g in grads]
    present = [g for g in grads if isinstance(g, torch.Tensor)]
    if not present or any(g.is_meta for g in present):  # a meta tensor has a shape but no values
        return None, shapes
    total = sum(float(g.detach().double().pow(2).sum()) for g in present)
    return math.sqrt(total), shapes


def record_backward(output: Any) -> BackwardRecord:
    """Run backward from ``output`` once, recording each node; ids match :func:`capture`'s.

    Non-scalar outputs get a gradient of ones (as for ``output.sum().backward()``).
    """
    outputs = as_outputs(output)
    fns, _, _ = walk(outputs)
    n_out = len(outputs)
    record = BackwardRecord()
    handles = []
    leaves: dict[int, torch.Tensor] = {}
    for i, fn in enumerate(fns):
        name = node_name(fn)
        if name == "AccumulateGrad":
            leaves[n_out + i] = fn.variable

        def hook(grads, node_id=n_out + i, name=name):
            norm, shapes = _norm(grads)
            record.steps.append(Step(node_id, name, norm, shapes))

        handles.append(fn.register_prehook(hook))
    saved_grads = {nid: leaf.grad for nid, leaf in leaves.items()}
    try:
        for leaf in leaves.values():
            leaf.grad = None
        seeds = [torch.ones_like(t) for t in outputs]
        torch.autograd.backward(outputs, seeds, retain_graph=True)
    except RuntimeError as exc:
        record.error = str(exc).split(" Hint:")[0]
    finally:
        for handle in handles:
            handle.remove()
        for nid, leaf in leaves.items():
            if leaf.grad is not None and record.error is None:
                record.leaf_grads[nid] = leaf.grad.detach().clone()
            leaf.grad = saved_grads[nid]
    return record
