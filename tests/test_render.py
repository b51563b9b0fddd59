"""autogradlab.render: deterministic, well-formed SVG; kinds distinct; big graphs collapse; layout sane."""

import re
import xml.etree.ElementTree as ET

import pytest
import torch

from autogradlab.graph import capture
from autogradlab.render import build_scene, dot_available, layered_layout, layout_scene, to_digraph, to_svg


def small_graph(stale=False, freed=False):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    x = torch.randn(5, 4)
    h = net(x)
    u = h * 2
    out = u.exp()
    if stale:
        out.add_(1)  # exp saved its result; changing it makes the saved tensor stale
    loss = out.sum()
    if freed:
        loss.backward()
    return capture(loss, params=net)


def deep_mlp(depth):
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(4, 4), torch.nn.ReLU()]
    net = torch.nn.Sequential(*layers)
    return capture(net(torch.randn(2, 4)).sum(), params=net)


def node_groups(svg):
    return re.findall(r'<g class="node ([a-z]+)', svg)


def test_svg_is_well_formed_and_deterministic():
    a, b = to_svg(small_graph()), to_svg(small_graph())
    assert a == b
    root = ET.fromstring(a)
    assert root.tag.endswith("svg") and float(root.get("width")) > 0
    assert "0x" not in a  # no addresses


def test_every_kind_is_drawn_distinctly_with_a_legend():
    svg = to_svg(small_graph())
    kinds = node_groups(svg)
    assert kinds.count("output") == 1 and kinds.count("param") == 4 and kinds.count("op") >= 6
    for text in (
        "output tensor",
        "backward op",
        "parameter (leaf)",
        "saved tensor",
        "stale (changed in place)",
        "freed by backward",
        "arrows: gradient flow (backward)",
    ):
        assert text in svg
    assert "0.weight" in svg and "2.bias" in svg
    assert 'class="saved ok"' in svg and "no grad needed" in svg


def test_unnamed_leaf_is_drawn_as_other_leaf():
    x = torch.randn(3, requires_grad=True)
    svg = to_svg(capture(x.sin().sum()))
    assert node_groups(svg).count("leaf") == 1


def test_saved_states_are_visible():
    stale = to_svg(small_graph(stale=True))
    assert 'class="saved stale"' in stale and "✗ v0→1" in stale and "STALE" in stale
    freed = to_svg(small_graph(freed=True))
    assert 'class="saved freed"' in freed and "result freed" in freed and 'class="saved ok"' not in freed


def test_toggles_saved_shapes_and_direction():
    g = small_graph()
    assert 'class="saved' not in to_svg(g, saved=False)
    assert ">(5, 3)<" in to_svg(g) and ">(5, 3)<" not in to_svg(g, shapes=False)
    back, fwd = to_svg(g), to_svg(g, direction="forward")
    assert "data flow (forward)" in fwd
    first = lambda svg: re.search(r'class="edge" d="M([\d.-]+),([\d.-]+)', svg.split("</g>", 1)[1]).groups()
    assert first(back) != first(fwd)  # the same curve, drawn from the other end
    with pytest.raises(ValueError, match="direction"):
        to_svg(g, direction="up")


def test_highlight_visited_and_notes():
    g = small_graph()
    op = g.find("ExpBackward0")[0]
    svg = to_svg(g, highlight=op.id, visited=[1, 2], notes={op.id: "‖g‖=1.23"})
    assert 'class="node op cur"' in svg and svg.count(" done") >= 1 and "‖g‖=1.23" in svg
    assert 'class="edge hl"' in svg


def test_big_graph_collapses_into_groups_that_expand():
    g = deep_mlp(60)  # 60 Linear+ReLU: 300+ nodes
    assert len(g.nodes) > 150
    collapsed = to_svg(g)
    assert "module group (collapsed)" in collapsed
    assert len(node_groups(collapsed)) < 40 and "group" in node_groups(collapsed)
    scene = build_scene(g)
    first = scene.groups[0]
    expanded = to_svg(g, expand=[first])
    assert len(node_groups(expanded)) > len(node_groups(collapsed))
    full = to_svg(g, collapse=False)
    assert len(node_groups(full)) == len(g.nodes)


def test_escapes_names():
    w = torch.randn(2, requires_grad=True)
    svg = to_svg(capture((w * 2).sum(), params={"<w & v>": w}))
    assert "&lt;w &amp; v&gt;" in svg
    ET.fromstring(svg)


def test_layout_separates_boxes_and_edges_go_down():
    g = small_graph()
    scene = build_scene(g)
    lay = layout_scene(scene)
    by_layer = {}
    for i, box in enumerate(scene.boxes):
        by_layer.setdefault(lay.layer[i], []).append((lay.x[i] - box.left, lay.x[i] + box.right))
    for spans in by_layer.values():
        spans.sort()
        assert all(a[1] <= b[0] + 1e-6 for a, b in zip(spans, spans[1:]))
    for route in lay.routes:
        assert route[0][1] < route[-1][1]  # gradient flows down the page


def test_layout_centres_parent_and_handles_cycles_and_long_edges():
    lay = layered_layout([(10, 10, 10)] * 4, [(0, 1), (1, 2), (0, 2), (2, 3), (3, 1)])
    assert lay.layer[:3] == [0, 1, 2] and len(lay.routes) == 5
    assert len(lay.routes[2]) == 3  # the 0 -> 2 edge bends through one dummy point


def test_ten_thousand_op_chain_and_five_thousand_node_layout_do_not_recurse():
    x = torch.randn(2, requires_grad=True)
    y = x
    for _ in range(10_000):
        y = y.sin()
    g = capture(y.sum())
    assert "<svg" in to_svg(g)  # collapsed automatically
    assert "<svg" in to_svg(deep_mlp(1000), collapse=False)


def test_ipython_draws_a_graph_once_render_is_imported():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        import autogradlab.render as render

        render._register_svg_formatter()
        g = small_graph()
        data, _ = shell.display_formatter.format(g)
        assert data["image/svg+xml"] == to_svg(g)
    finally:
        InteractiveShell.clear_instance()


def test_digraph_source_and_dot_engine():
    g = small_graph(stale=True)
    source = to_digraph(g).source
    assert "ExpBackward0" in source and "stale" in source and "0.weight" in source
    if dot_available():
        assert "<svg" in to_svg(g, engine="dot")
    with pytest.raises(ValueError, match="engine"):
        to_svg(g, engine="neato")


def test_badges_sharing_a_storage_are_marked():
    svg = to_svg(small_graph())
    assert "result (5, 3) ≡1" in svg and "mat1 (5, 3) ≡1" in svg and "one storage, held once" in svg
    x = torch.randn(3, requires_grad=True)
    assert "≡" not in to_svg(capture(x.exp().sum()))


def test_a_no_grad_input_is_a_visible_stub_attached_to_its_box():
    """Issue 17: the "no grad needed" text floated with a 9 px pale stub; now a dashed elbow ends in a circle at the text."""
    w = torch.randn(3, requires_grad=True)
    svg = to_svg(capture((w * 2).sum() + (w.detach() * 3).sum(), params={"w": w}))
    assert svg.count('<circle class="nograd"') >= 2  # one per stub, one in the legend
    assert "no grad needed" in svg and "input that needs no grad (None in next_functions)" in svg
    no_stub = to_svg(capture((w * w).sum(), params={"w": w}))
    assert "nograd" not in no_stub.split("</style>")[1]  # no legend entry when no box has one
