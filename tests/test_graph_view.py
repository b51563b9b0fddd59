"""GraphView in plain pytest: controls redraw, stepping follows the real backward, bad input is a message."""

import torch

from autogradlab.views import GraphView


def mlp_loss(seed=0):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    return net, net(torch.randn(5, 4)).pow(2).mean()


def test_draws_graph_memory_and_repr():
    net, loss = mlp_loss()
    view = GraphView(loss, params=net)
    assert repr(view) == "GraphView(12 nodes, 11 backward steps)"
    assert view.picture.value.startswith("<svg") and "AddmmBackward0" in view.picture.value
    assert "Saved for backward" in view.memory.value and "activations" in view.memory.value
    assert view.message.value == "" and view.rebuild_button.layout.display == "none"


def test_stepping_through_backward_with_buttons_and_slider():
    net, loss = mlp_loss()
    view = GraphView(loss, params=net)
    assert "Before backward" in view.info.value and 'class="node op cur"' not in view.picture.value
    view.next_button.click()
    assert view.step.value == 1 and "MeanBackward0" in view.info.value and "norm 1" in view.info.value
    assert 'class="node op cur"' in view.picture.value and "‖g‖=1" in view.picture.value
    view.step.value = view.step.max
    assert "Backward finished" in view.info.value and "0.weight.grad" in view.summary.value
    view.next_button.click()
    assert view.step.value == view.step.max
    view.prev_button.click()
    assert view.step.value == view.step.max - 1
    assert net[0].weight.grad is None  # recording did not touch the learner's .grad


def test_toggles_redraw():
    net, loss = mlp_loss()
    view = GraphView(loss, params=net)
    view.saved_box.value = False
    assert 'class="saved' not in view.picture.value
    view.direction.value = "forward"
    assert "data flow (forward)" in view.picture.value
    view.shapes_box.value = False
    assert ">(5, 3)<" not in view.picture.value


def test_function_source_rebuilds_live():
    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    use_exp = {"on": False}
    view = GraphView(lambda: (w.exp() if use_exp["on"] else w.sin()).sum(), params={"w": w})
    assert view.rebuild_button.layout.display is None and "SinBackward0" in view.picture.value
    use_exp["on"] = True
    view.rebuild_button.click()
    assert "ExpBackward0" in view.picture.value and "SinBackward0" not in view.picture.value


def test_bad_inputs_are_messages_not_tracebacks():
    w = torch.randn(3, requires_grad=True)
    cases = {
        "item": ((w * 2).sum().item(), ".item()"),
        "leaf": (w, "leaf"),
        "no grad": (w.detach() * 2, "no_grad"),
        "raising function": (lambda: 1 / 0, "ZeroDivisionError"),
        "bad params": ((w * 2).sum(), "should be a tensor"),
    }
    for name, (source, words) in cases.items():
        params = {"w": 3} if name == "bad params" else None
        view = GraphView(source, params=params)
        assert words in view.message.value, name
        assert view.picture.value == "" and view.step.disabled and repr(view) == "GraphView(no graph)"


def test_freed_graph_is_drawn_with_a_message():
    net, loss = mlp_loss()
    loss.backward()
    view = GraphView(loss, params=net)
    assert "already freed" in view.message.value and "freed" in view.picture.value
    assert view.step.disabled and repr(view) == "GraphView(12 nodes, 0 backward steps)"


def test_stale_saved_tensor_flagged_before_backward():
    w = torch.randn(3, requires_grad=True)
    u = w * 2
    v = u.pow(2)
    u.add_(1)
    view = GraphView(v.sum(), params={"w": w})
    assert "PowBackward0" in view.message.value and "add_" in view.message.value
    assert "version 0 → 1" in view.message.value and "Backward fails here" in view.message.value
    assert 'class="saved stale"' in view.picture.value


def test_big_graph_is_collapsed_and_groups_expand():
    torch.manual_seed(0)
    layers = []
    for _ in range(40):
        layers += [torch.nn.Linear(3, 3), torch.nn.ReLU()]
    net = torch.nn.Sequential(*layers)
    view = GraphView(net(torch.randn(2, 3)).sum(), params=net)
    assert view.expand.layout.display is None and view.expand.options
    before = view.picture.value.count('<g class="node')
    view.expand.value = (view.expand.options[0],)
    assert view.picture.value.count('<g class="node') > before
    view.step.value = 5  # stepping highlights inside collapsed groups too
    assert " cur" in view.picture.value


def test_stepping_keeps_the_layout_still():
    import re

    net, loss = mlp_loss()
    view = GraphView(loss, params=net)
    where = lambda svg: re.findall(r'<g class="node [^"]*"><title>[^<]*</title><rect x="(-?\d+)" y="(-?\d+)"', svg)
    before = where(view.picture.value)
    view.step.value = 4
    assert where(view.picture.value) == before and len(before) == 12


def test_step_text_sits_under_the_stepper_and_the_grads_table_under_the_picture():
    """Issue 17: at 1280×720 "Step k of n" was below the picture, out of sight while pressing ▶."""
    net, loss = mlp_loss()
    view = GraphView(loss, params=net)
    order = list(view.children)
    assert (
        order.index(view.stepper) + 1 == order.index(view.info) < order.index(view.picture) < order.index(view.summary)
    )
    assert view.summary.value == ""
    view.step.value = view.step.max
    assert f"Step {view.step.max} of {view.step.max}" in view.info.value and "<table>" not in view.info.value
    assert "Backward finished" in view.summary.value and "<table>" in view.summary.value
    view.step.value = 3
    assert view.summary.value == ""


def test_arrows_label_is_a_widget_of_its_own():
    """A ToggleButtons description wrapped above its buttons in a narrow output (issue 17)."""
    net, loss = mlp_loss()
    view = GraphView(loss, params=net)
    labels = [c for row in view.toggles.children for c in getattr(row, "children", [row]) if hasattr(c, "value")]
    assert view.direction.description == "" and any(getattr(c, "value", None) == "arrows:" for c in labels)
    assert view.saved_box.layout.width == view.shapes_box.layout.width == "auto"


def test_one_drawing_per_change_and_per_rebuild(monkeypatch):
    import autogradlab.views.graph_view as module

    calls = []
    monkeypatch.setattr(module, "to_svg", lambda *a, **k: calls.append(1) or "<svg/>")
    net, _ = mlp_loss()
    x = torch.randn(5, 4)
    view = GraphView(lambda: net(x).pow(2).mean(), params=net)
    assert len(calls) == 1
    for change in (
        lambda: setattr(view.step, "value", view.step.max),
        lambda: setattr(view.saved_box, "value", False),
        view.prev_button.click,
        view.next_button.click,
        view.rebuild_button.click,
    ):
        calls.clear()
        change()
        assert len(calls) == 1


def test_memory_text_says_why_a_saved_tensor_is_not_counted():
    w = torch.randn(3, 2, requires_grad=True)
    sparse = GraphView(torch.sparse.mm(torch.eye(4, 3).to_sparse(), w).sum(), params={"w": w})
    assert "Not counted here, 1 saved tensor(s): sparse COO tensor" in sparse.memory.value
    assert "saved_tensors_hooks" not in sparse.memory.value  # it was not packed by a hook
    # a pack hook that keeps no tensor (as checkpointing does): nothing to count
    with torch.autograd.graph.saved_tensors_hooks(lambda t: ("offloaded", t.shape), lambda p: torch.zeros(p[1])):
        packed_loss = (w * w).sum()
    packed = GraphView(packed_loss, params={"w": w})
    assert "packed by a saved_tensors_hooks pack hook" in packed.memory.value
    plain = GraphView((w * w).sum(), params={"w": w})
    assert "Not counted" not in plain.memory.value
