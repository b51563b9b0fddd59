"""Capture a live autograd graph into plain data: ``capture(loss, params=...)`` -> :class:`Graph`.

>>> import torch
>>> from autogradlab.graph import capture
>>> x = torch.randn(3, requires_grad=True)
>>> g = capture(x.exp().sum(), params={"x": x})
>>> [(n.name, n.kind) for n in g.nodes]
[('output', 'output'), ('SumBackward0', 'op'), ('ExpBackward0', 'op'), ('AccumulateGrad', 'leaf')]
>>> [(s.name, s.shape, s.state) for s in g.nodes[2].saved]
[('result', (3,), 'ok')]
"""

from autogradlab.graph.groups import module_groups
from autogradlab.graph.model import Edge, Graph, Node, Saved, format_shape
from autogradlab.graph.trace import BackwardRecord, Step, record_backward
from autogradlab.graph.traverse import capture, describe_ungraphable, node_name

__all__ = [
    "capture",
    "record_backward",
    "module_groups",
    "describe_ungraphable",
    "node_name",
    "Graph",
    "Node",
    "Edge",
    "Saved",
    "BackwardRecord",
    "Step",
    "format_shape",
]
