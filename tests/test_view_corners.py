"""Corner sweep (issue 17): no setting of a view's controls raises or leaves the view stale.

For every view, each pair of controls is driven to the four corners of their ranges
(lowest/highest value, first/last option), one view instance carried through the whole
sweep, and then through a few seeded random settings of all controls. After every
change the view must not have raised (an observer's exception propagates to the
setter here), must not show the "bug" message of ``never_raises``, must show a
picture or a message, and must show exactly what a view freshly built at the same
settings shows: so nothing stale survives from an earlier setting.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from autogradlab.views import AccumulationLab, GraphView, LossScaleLab, TangentExplorer, TrainStepInspector, VJPExplorer
from autogradlab.views.common import BUG

RANDOM_SETTINGS = 6


@dataclass
class Control:
    name: str
    widget: Callable[[Any], Any]  # view -> the control widget
    corners: Callable[[Any], list]  # view -> [low, high] (may depend on the view's other settings)
    choices: Callable[[Any], list]  # view -> values a random setting picks from


def slider(name: str, attr: str) -> Control:
    def values(view):
        s = getattr(view, attr)
        count = round((s.max - s.min) / s.step)
        return (
            [s.min + i * s.step for i in range(count + 1)]
            if isinstance(s.step, int)
            else [round(s.min + i * s.step, 10) for i in range(count + 1)]
        )

    def corners(view):
        s = getattr(view, attr)
        return [s.min, s.max]

    return Control(name, lambda v: getattr(v, attr), corners, values)


def options(name: str, attr: str) -> Control:
    def values(view):
        return [o[1] for o in getattr(view, attr)._options_full]

    return Control(name, lambda v: getattr(v, attr), lambda v: [values(v)[0], values(v)[-1]], values)


def shape_box(name: str, index: int, low: str, high: str, extra: list[str]) -> Control:
    return Control(name, lambda v: v.shape_boxes[index], lambda v: [low, high], lambda v: [low, high, *extra])


def picture_of(view) -> tuple:
    """Everything a learner sees of a view's result (not its controls)."""
    if isinstance(view, TrainStepInspector):
        return view.status.value, view.listing.value, view.table.value
    shown = view.picture.value if view.picture.layout.display != "none" else ""
    texts = tuple(getattr(view, part).value for part in ("readout", "info", "summary", "memory") if hasattr(view, part))
    return view.message.value, texts, shown


def net_and_batch():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    return net, torch.randn(8, 3)


NET, BATCH = net_and_batch()


def graph_source():
    return NET(BATCH).pow(2).mean()


def fresh_tangent(v):
    return TangentExplorer(fn=v.fn_picker.value, x=v.x_slider.value)


def fresh_vjp(v):
    fresh = VJPExplorer(
        op=v.op_picker.value,
        dim=v.dim_picker.value,
        wrt=v.wrt_picker.value,
        v=v.v_picker.value,
        index=v.index_box.value,
    )
    for mine, theirs in zip(v.shape_boxes, fresh.shape_boxes):
        theirs.value = mine.value  # typed by a learner: may be invalid, so not a constructor argument
    return fresh


def fresh_accumulation(v):
    return AccumulationLab(
        accum_steps=v.k.value, reduction=v.reduction.value, spread=v.spread.value, dtype=v.dtype.value
    )


def fresh_loss_scale(v):
    return LossScaleLab(
        steps=v.steps,
        init_scale_log2=v.init_scale.value,
        growth_interval=v.growth_interval.value,
        backoff_factor=v.backoff.value,
        overflow_rate=v.overflow_rate.value,
    )


def fresh_graph(v, **kwargs):
    fresh = GraphView(
        graph_source,
        params=NET,
        saved=v.saved_box.value,
        shapes=v.shapes_box.value,
        direction=v.direction.value,
        **kwargs,
    )
    fresh.expand.value = v.expand.value
    fresh.step.value = v.step.value
    return fresh


VJP_SHAPES = ["", "1", "6", "2, 3, 4", "6, 4", "7", "2, 2, 2, 2", "two"]
VIEWS = {
    "TangentExplorer": (
        lambda: TangentExplorer(),
        fresh_tangent,
        [slider("x", "x_slider"), options("f(x)", "fn_picker")],
    ),
    "VJPExplorer": (
        lambda: VJPExplorer(),
        fresh_vjp,
        [
            options("op", "op_picker"),
            shape_box("first shape", 0, "1", "2, 3, 4", VJP_SHAPES),
            shape_box("second shape", 1, "1", "4, 6", ["4", "3, 1", "2, 4", "9"]),
            options("dim", "dim_picker"),
            options("wrt", "wrt_picker"),
            options("v", "v_picker"),
            Control(
                "index",
                lambda v: v.index_box,
                lambda v: [v.index_box.min, v.index_box.max],
                lambda v: list(range(v.index_box.min, v.index_box.max + 1)),
            ),
        ],
    ),
    "AccumulationLab": (
        lambda: AccumulationLab(),
        fresh_accumulation,
        [options("K", "k"), options("reduction", "reduction"), slider("spread", "spread"), options("dtype", "dtype")],
    ),
    "LossScaleLab": (
        lambda: LossScaleLab(steps=2000),
        fresh_loss_scale,
        [
            slider("initial scale", "init_scale"),
            slider("growth interval", "growth_interval"),
            slider("backoff", "backoff"),
            slider("overflow rate", "overflow_rate"),
        ],
    ),
    "GraphView": (
        lambda: GraphView(graph_source, params=NET),
        fresh_graph,
        [
            Control("saved tensors", lambda v: v.saved_box, lambda v: [False, True], lambda v: [False, True]),
            Control("shapes", lambda v: v.shapes_box, lambda v: [False, True], lambda v: [False, True]),
            options("arrows", "direction"),
            slider("backward step", "step"),
        ],
    ),
    "GraphView collapsed": (
        lambda: GraphView(graph_source, params=NET, max_nodes=4),
        lambda v: fresh_graph(v, max_nodes=4),
        [
            Control(
                "expand",
                lambda v: v.expand,
                lambda v: [(), tuple(v.expand.options)],
                lambda v: [(), *[(o,) for o in v.expand.options], tuple(v.expand.options)],
            ),
            slider("backward step", "step"),
            options("arrows", "direction"),
        ],
    ),
}


def check(view, fresh_of, where: str) -> None:
    seen = picture_of(view)
    assert BUG not in seen[0], f"{where}: {seen[0]}"
    assert seen[2] or seen[0], f"{where}: neither a picture nor a message"
    fresh = picture_of(fresh_of(view))
    assert seen == fresh, f"{where}: the view differs from a freshly built one at the same settings (stale)"


def set_value(view, control: Control, value) -> None:
    widget = control.widget(view)
    if control.name == "wrt" and value not in widget.options:
        value = widget.options[-1]  # the options follow the op: pick the corner among those there now
    widget.value = value


@pytest.mark.parametrize("name", list(VIEWS))
def test_every_pair_of_controls_at_its_corners(name):
    build, fresh_of, controls = VIEWS[name]
    view = build()
    check(view, fresh_of, f"{name} as built")
    for a, b in itertools.combinations(controls, 2):
        for i, j in itertools.product(range(2), range(2)):
            set_value(view, a, a.corners(view)[i])
            set_value(view, b, b.corners(view)[j])
            check(view, fresh_of, f"{name}: {a.name}={a.widget(view).value!r}, {b.name}={b.widget(view).value!r}")


@pytest.mark.parametrize("name", list(VIEWS))
def test_random_settings_of_all_controls(name):
    build, fresh_of, controls = VIEWS[name]
    view = build()
    rng = random.Random(f"corners-{name}")
    for k in range(RANDOM_SETTINGS):
        order = controls[:]
        rng.shuffle(order)
        for control in order:
            set_value(view, control, rng.choice(control.choices(view)))
        settings = ", ".join(f"{c.name}={c.widget(view).value!r}" for c in controls)
        check(view, fresh_of, f"{name} random setting {k}: {settings}")


def replay(clicks: list[str], step=None) -> TrainStepInspector:
    view = TrainStepInspector(step)
    for name in clicks:
        getattr(view, f"{name}_button").click()
    return view


def bad_step(model, batch, optimizer, loss_fn):
    loss = loss_fn(model(batch[0]), batch[1])
    loss.backward()
    loss.backward()  # the graph was freed by the first backward: an error in the middle of the step


@pytest.mark.parametrize("step", [None, bad_step], ids=["train_step", "failing step"])
def test_train_step_inspector_buttons_in_every_order(step):
    """Its controls are buttons: every ordered pair (and triple) of presses, compared with a fresh replay."""
    buttons = ["next", "run", "reset"]
    for clicks in [*itertools.product(buttons, repeat=2), *itertools.product(buttons, repeat=3)]:
        view = replay(list(clicks), step)
        seen = picture_of(view)
        assert seen[0] and seen[1] and BUG not in seen[0], clicks
        session = view.session
        position = session.stepper.position
        fresh = replay(["run"] if session.done and not session.error else ["next"] * position, step)
        assert picture_of(fresh) == seen, f"{clicks}: differs from a fresh inspector at line {position}"


DRAWS = {  # the function that builds each view's picture
    "TangentExplorer": ("autogradlab.views.tangent", "TangentExplorer._draw"),
    "VJPExplorer": ("autogradlab.views.vjp_explorer", "draw_exploration"),
    "AccumulationLab": ("autogradlab.views.accumulation_lab", "AccumulationLab._draw"),
    "LossScaleLab": ("autogradlab.views.loss_scale_lab", "LossScaleLab._draw"),
    "GraphView": ("autogradlab.views.graph_view", "to_svg"),
}


@pytest.mark.parametrize("name", list(DRAWS))
def test_one_drawing_per_change(name, monkeypatch):
    """Nothing is drawn twice for one change (issue 14), whichever control changes, to whichever value."""
    import importlib

    module_name, attr = DRAWS[name]
    module = importlib.import_module(module_name)
    owner, _, function = attr.rpartition(".")
    target = getattr(module, owner) if owner else module
    original = target.__dict__[function]
    calls = []

    def counting(*args, **kwargs):
        calls.append(1)
        inner = original.__func__ if isinstance(original, staticmethod) else original
        return inner(*args, **kwargs)

    monkeypatch.setattr(target, function, staticmethod(counting) if isinstance(original, staticmethod) else counting)
    build, _, controls = VIEWS[name]
    view = build()
    rng = random.Random(f"once-{name}")
    for control in controls:
        for _ in range(3):
            widget = control.widget(view)
            candidates = [v for v in control.choices(view) if v != widget.value]
            if control.name == "wrt":
                candidates = [v for v in candidates if v in widget.options]
            if not candidates:
                continue
            calls.clear()
            widget.value = rng.choice(candidates)
            drawn = view.picture.layout.display != "none" and view.picture.value != ""
            assert len(calls) == (1 if drawn else 0), f"{name}: {control.name}={widget.value!r} drew {len(calls)} times"
