"""Draw a captured :class:`~autogradlab.graph.Graph`: pure-Python layered layout to SVG, or graphviz.

>>> import torch
>>> from autogradlab.graph import capture
>>> w = torch.randn(3, requires_grad=True)
>>> svg = to_svg(capture((w * w).sum(), params={"w": w}))
>>> svg.startswith("<svg") and "MulBackward0" in svg
True
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping

from autogradlab.graph.model import Graph
from autogradlab.graph.nogc import paused_gc
from autogradlab.render.layout import Layout, layered_layout
from autogradlab.render.scene import MAX_NODES, Scene, build_scene
from autogradlab.render.svg import as_img, write_svg

DIRECTIONS = ("backward", "forward")


def to_svg(
    graph: Graph,
    *,
    saved: bool = True,
    shapes: bool = True,
    direction: str = "backward",
    collapse: bool | str = "auto",
    expand: Iterable[str] = (),
    max_nodes: int = MAX_NODES,
    highlight: int | None = None,
    visited: Iterable[int] = (),
    notes: Mapping[int, str] | None = None,
    legend: bool = True,
    engine: str = "python",
) -> str:
    """Draw ``graph`` as an SVG string. The same graph and options always give the same bytes.

    - ``saved`` / ``shapes``: show saved-tensor badges / tensor shapes on nodes and edges.
    - ``direction``: arrows follow the gradient (``'backward'``, as ``grad_fn`` links point)
      or the data (``'forward'``).
    - ``collapse``: ``'auto'`` draws graphs above ``max_nodes`` nodes as module groups;
      ``expand`` names the groups to draw node by node.
    - ``highlight``, ``visited``, ``notes``: mark the node being run, the nodes already
      run, and a short note beside nodes (GraphView uses these to step through backward).
    - ``engine='dot'`` uses graphviz when the ``dot`` binary exists (falls back to Python).
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be 'backward' or 'forward', got {direction!r}")
    if engine == "dot" and dot_available():
        from autogradlab.render.dot import to_digraph

        return to_digraph(graph, saved=saved, shapes=shapes, direction=direction).pipe(format="svg").decode()
    if engine not in ("python", "dot"):
        raise ValueError(f"engine must be 'python' or 'dot', got {engine!r}")
    with paused_gc():
        scene = build_scene(
            graph,
            saved=saved,
            shapes=shapes,
            collapse=collapse,
            expand=expand,
            max_nodes=max_nodes,
            highlight=highlight,
            visited=visited,
            notes=notes,
        )
        return write_svg(scene, layout_scene(scene), direction=direction, legend=legend)


def layout_scene(scene: Scene) -> Layout:
    """Positions for every box and a route for every arrow of ``scene``."""
    sizes = [(b.left, b.right, b.height, b.body_h) for b in scene.boxes]
    return layered_layout(sizes, [(a.src, a.dst) for a in scene.arrows])


def dot_available() -> bool:
    """True when graphviz's ``dot`` binary is on PATH (it is optional: the Python layout needs nothing)."""
    return shutil.which("dot") is not None


def to_digraph(graph: Graph, **options):
    """A ``graphviz.Digraph`` of ``graph`` (needs the graphviz package; rendering needs ``dot``)."""
    from autogradlab.render.dot import to_digraph as build

    return build(graph, **options)


def to_html(graph: Graph) -> str:
    """``graph`` as an HTML ``<img>`` of its SVG: what untrusted JupyterLab shows (it renders no SVG output)."""
    return as_img(to_svg(graph), alt=repr(graph))


def _register_svg_formatter() -> None:
    """Let IPython draw a :class:`Graph` as the last expression of a cell (as SVG, and as HTML for untrusted notebooks).

    Registered here, not in the graph layer: capture knows nothing of drawing. Any
    notebook that imports a view or this module gets the picture; without it a Graph
    shows its one-line text repr.
    """
    try:
        from IPython import get_ipython
    except ImportError:  # plain Python: nothing to register
        return
    shell = get_ipython()
    if shell is not None:
        shell.display_formatter.formatters["image/svg+xml"].for_type(Graph, to_svg)
        shell.display_formatter.formatters["text/html"].for_type(Graph, to_html)


_register_svg_formatter()

__all__ = [
    "to_svg",
    "to_html",
    "to_digraph",
    "dot_available",
    "build_scene",
    "layout_scene",
    "layered_layout",
    "MAX_NODES",
]
