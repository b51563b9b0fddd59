"""Module groups: which part of a model each node of a big graph belongs to.

A drawing of a 5,000-node graph is unreadable; drawn as one box per module
(``layers.0``, ``layers.1``, ...) it is a map that can be expanded where needed.
Parameters name their module directly (``layers.3.linear1.weight``). Ops carry
no module name, so an op joins the module whose parameters were used most recently
before it in the forward pass (the ReLU after ``layers.3``'s linear belongs to
``layers.3``); ops before the first parameter use form ``(input)``, ops after the
last one ``(loss)``.

>>> import torch
>>> from autogradlab.graph import capture
>>> net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU(), torch.nn.Linear(2, 1))
>>> g = capture(net(torch.randn(3, 2)).pow(2).mean(), params=net)
>>> sorted(set(module_groups(g).values()))
['(loss)', '0', '2']
"""

from __future__ import annotations

import bisect
import math

from autogradlab.graph.model import Graph

INPUT, LOSS = "(input)", "(loss)"


def _module_path(param_name: str) -> list[str]:
    parts = param_name.split(".")
    return parts[:-1] or parts  # a bare name like "w" is its own group


def _pick_level(paths: dict[int, list[str]]) -> int:
    """The shallowest prefix length that splits the parameters into more than one module."""
    depth = max(len(p) for p in paths.values())
    for level in range(1, depth + 1):
        if len({".".join(p[:level]) for p in paths.values()}) > 1:
            return level
    return depth


def module_groups(graph: Graph, max_groups: int = 24) -> dict[int, str]:
    """Map node id -> group name for every op and leaf (outputs stay ungrouped).

    Without parameter names the ops are cut into ``max_groups`` runs of forward order.
    """
    consumers: dict[int, list[int]] = {}
    for src, dst in graph.edges:
        consumers.setdefault(dst, []).append(src)
    ops = [n for n in graph.nodes if n.kind == "op" and n.forward_index is not None]
    paths = {n.id: _module_path(n.param_name) for n in graph.nodes if n.kind == "leaf" and n.param_name}
    groups: dict[int, str] = {}
    if not paths:
        size = max(1, math.ceil(len(ops) / max_groups))
        for n in ops:
            lo = n.forward_index // size * size
            groups[n.id] = f"ops {lo}–{min(lo + size, len(ops)) - 1}"
    else:
        level = _pick_level(paths)
        name_of = {nid: ".".join(p[:level]) for nid, p in paths.items()}
        # Where each module's parameters are used, in forward order.
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        for nid, name in name_of.items():
            for c in consumers.get(nid, []):
                f = graph.node(c).forward_index
                if f is None:
                    continue
                first[name] = min(first.get(name, f), f)
                last[name] = max(last.get(name, f), f)
        ordered = sorted(first, key=lambda g: (first[g], g))
        chunk = _chunk_names(ordered, max_groups)
        starts = [first[g] for g in ordered]
        end = max(last.values()) if last else -1
        for nid, name in name_of.items():
            groups[nid] = chunk.get(name, name)
        for n in ops:
            i = bisect.bisect_right(starts, n.forward_index) - 1
            if i < 0:
                groups[n.id] = INPUT
            elif n.forward_index > end:
                groups[n.id] = LOSS
            else:
                groups[n.id] = chunk[ordered[i]]
    for n in graph.nodes:  # leaves without a name (inputs that require grad) join their consumer
        if n.kind == "leaf" and n.id not in groups:
            users = [groups[c] for c in consumers.get(n.id, []) if c in groups]
            if users:
                groups[n.id] = users[0]
    return groups


def _chunk_names(ordered: list[str], max_groups: int) -> dict[str, str]:
    """Too many modules at the shallowest level (a 1,000-layer Sequential): merge runs of them."""
    if len(ordered) <= max_groups:
        return {g: g for g in ordered}
    size = math.ceil(len(ordered) / max_groups)
    names = {}
    for start in range(0, len(ordered), size):
        run = ordered[start : start + size]
        label = f"{run[0]} … {run[-1]}" if len(run) > 1 else run[0]
        names.update({g: label for g in run})
    return names
