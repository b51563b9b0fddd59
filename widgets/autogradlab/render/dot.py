"""The same drawing as a ``graphviz.Digraph``, for when the ``dot`` binary is installed.

Optional: the pure-Python layout needs nothing. ``dot`` can look tidier on small
graphs, but takes seconds past a few thousand nodes (see widgets/benchmarks/bench_graph.py).
"""

from __future__ import annotations

from autogradlab.graph.model import Graph, format_shape
from autogradlab.render import style


def to_digraph(graph: Graph, *, saved: bool = True, shapes: bool = True, direction: str = "backward"):
    """Build a ``graphviz.Digraph``; render it with ``.pipe(format='svg')`` (needs ``dot``).

    >>> import torch
    >>> from autogradlab.graph import capture
    >>> w = torch.randn(2, requires_grad=True)
    >>> dot = to_digraph(capture((w * 2).sum(), params={"w": w}))
    >>> "AccumulateGrad" in dot.source
    True
    """
    import graphviz

    dot = graphviz.Digraph(
        graph_attr={"rankdir": "TB", "fontname": "monospace"},
        node_attr={"fontname": "monospace", "fontsize": "11", "style": "filled", "shape": "box"},
        edge_attr={"fontname": "monospace", "fontsize": "9", "color": style.EDGE},
    )
    for node in graph.nodes:
        kind = node.kind if node.kind != "leaf" else ("param" if node.param_name else "leaf")
        fill, stroke = style.COLORS[kind]
        label = node.name if node.kind != "leaf" else f"{node.name}\n{node.param_name or 'leaf'}"
        if shapes and node.shape is not None:
            label += f"\n{format_shape(node.shape)}"
        shape = "box" if node.kind != "leaf" else "oval"
        dot.node(str(node.id), label, fillcolor=fill, color=stroke, shape=shape)
        if saved:
            for k, s in enumerate(node.saved):
                sfill, sstroke = style.COLORS[f"saved-{s.state}"]
                sid = f"{node.id}s{k}"
                dot.node(
                    sid,
                    f"{s.name} {format_shape(s.shape)}" + ("" if s.state == "ok" else f"\n{s.state}"),
                    fillcolor=sfill,
                    color=sstroke,
                    fontsize="9",
                )
                dot.edge(sid, str(node.id), style="dotted", arrowhead="none")
    # Ranks follow gradient flow either way; "forward" only turns the arrowheads round.
    turn = {"dir": "back"} if direction == "forward" else {}
    for e in graph.edges:
        dot.edge(str(e.src), str(e.dst), label=format_shape(e.shape) if shapes and e.shape is not None else "", **turn)
    return dot
