"""How fast does every view answer? Build each view, change each control N times, print a table.

    PYTHONPATH=widgets .venv/bin/python widgets/benchmarks/bench_views.py [--n 20] [--repeat 3] [--views VJPExplorer,...]

A change is delivered the way the browser delivers it: a comm ``update`` message
handled by the widget (``_handle_msg``, with ipywidgets' echo), or a button's click
message. The time runs from that message to the return of every observer, i.e. until
the new picture and readout are set. Every message the kernel would send meanwhile is
serialised as the kernel does (JSON plus binary buffers), which is counted in the time
and gives "bytes sent". "redraws" counts the picture updates sent per change (goal: 1,
never 2). Values sweep each control's range (a drag visits new values) or cycle
through its options.

Columns: build = median time to construct the view after a first, warm-up build (the
first build of a fresh process, with its one-time imports, is printed as a note);
first = the first change after the build (median over the passes); median = median of
all changes of all passes; max = the slowest single change of all passes; bytes =
median bytes sent per change; redraws = picture updates per change (min–max). Each of
the R passes (``--repeat``) starts from a fresh view with every result cache emptied,
so cold computations (a setting met for the first time) count as a learner meets them.

The last line holds the numbers against the goals of issue 14: every control median
≤ 100 ms and max ≤ 250 ms, every build ≤ 300 ms, at most one redraw per change.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ipywidgets as w

GOAL_MEDIAN_MS, GOAL_MAX_MS, GOAL_BUILD_MS = 100.0, 250.0, 300.0


# ---------------------------------------------------------------------------------------------- messages


class Wire:
    """Counts what the kernel sends: messages, bytes (JSON + buffers) and picture updates."""

    def __init__(self) -> None:
        self.bytes = 0
        self.ms = 0.0
        self.messages: list[tuple[str, dict]] = []
        self._orig = w.Widget._send

    def __enter__(self) -> Wire:
        wire = self

        def send(widget, msg, buffers=None):
            start = time.perf_counter()
            wire.bytes += len(json.dumps(msg, separators=(",", ":")).encode()) + sum(
                len(memoryview(b)) for b in buffers or ()
            )
            wire.messages.append((widget.model_id, msg))
            result = wire._orig(widget, msg, buffers)
            wire.ms += (time.perf_counter() - start) * 1000
            return result

        w.Widget._send = send
        return self

    def __exit__(self, *exc) -> None:
        w.Widget._send = self._orig

    def reset(self) -> None:
        self.bytes = 0
        self.messages.clear()

    def redraws(self, picture: w.Widget) -> int:
        return sum(
            1
            for mid, msg in self.messages
            if mid == picture.model_id
            and msg.get("method") == "update"
            and ("value" in msg.get("state", {}) or ["value"] in msg.get("buffer_paths", []))
        )


def from_browser(widget: w.Widget, value: Any) -> None:
    """Deliver a new value the way the front end does: an ``update`` comm message with the synced trait."""
    if isinstance(widget, w.Button):
        widget._handle_msg({"content": {"data": {"method": "custom", "content": {"event": "click"}}}, "buffers": []})
        return
    if hasattr(widget, "index") and hasattr(widget, "options"):  # selection widgets sync the index
        values = [o[1] for o in widget._options_full]
        state = {
            "index": [values.index(v) for v in value] if isinstance(widget, w.SelectMultiple) else values.index(value)
        }
    else:
        state = {"value": value}
    widget._handle_msg({"content": {"data": {"method": "update", "state": state, "buffer_paths": []}}, "buffers": []})


# ---------------------------------------------------------------------------------------------- the views


@dataclass
class Control:
    name: str
    widget: Callable[[Any], w.Widget]  # view -> widget
    values: Callable[[Any, int], list]  # (view, n) -> the n values to deliver
    prepare: Callable[[Any], None] = lambda view: None  # put the view where this control matters (not timed)
    before_each: Callable[[Any], None] = lambda view: None  # e.g. reset a finished step session (not timed)


@dataclass
class Spec:
    name: str
    build: Callable[[], Any]
    controls: list[Control] = field(default_factory=list)
    forget: Callable[[], None] = lambda: None  # empty result caches that outlive a view (a fresh kernel's state)


def sweep(lo: float, hi: float, step: float, n: int, integer: bool = False) -> list:
    """n values stepping through [lo, hi] and back (a drag), never the same value twice in a row."""
    count = int(round((hi - lo) / step)) + 1
    grid = [lo + i * step for i in range(count)]
    if count > n:  # spread n samples over the range
        grid = [grid[round(i * (count - 1) / (n - 1))] for i in range(n)] if n > 1 else grid[:1]
    path = grid + grid[-2:0:-1]
    out = [path[i % len(path)] for i in range(n)]
    return [int(v) if integer else round(v, 10) for v in out]


def cycle(options: list, n: int, start_after: Any = None) -> list:
    """Options in turn, starting after the current value, so every delivery is a change."""
    options = list(options)
    first = (options.index(start_after) + 1) if start_after in options else 0
    return [options[(first + i) % len(options)] for i in range(n)]


def slider(name, attr, integer=False):
    def values(view, n):
        s = getattr(view, attr)
        vals = sweep(s.min, s.max, s.step, n + 1, integer)
        if vals[0] == s.value:
            return vals[1 : n + 1]
        return vals[:n]

    return Control(name, lambda v: getattr(v, attr), values)


def picker(name, attr, prepare=lambda v: None):
    def values(view, n):
        s = getattr(view, attr)
        return cycle([o[1] if isinstance(o, tuple) else o for o in s._options_full], n, s.value)

    return Control(name, lambda v: getattr(v, attr), values, prepare)


def _tangent():
    from autogradlab.views import TangentExplorer

    return Spec(
        "TangentExplorer",
        lambda: TangentExplorer(x=1.0),
        [
            slider("x", "x_slider"),
            picker("f(x)", "fn_picker"),
        ],
    )


def _vjp():
    from autogradlab.views import VJPExplorer

    shapes = ["3, 4", "4, 6", "2, 3", "6", "2, 2, 3", "1, 5", "4, 4"]

    def to_op(op):
        def prepare(view):
            view.op_picker.value = op

        return prepare

    def one_hot(view):
        view.op_picker.value = "softmax"
        view.v_picker.value = "one-hot"

    return Spec(
        "VJPExplorer",
        lambda: VJPExplorer(op="softmax"),
        [
            picker("op", "op_picker"),
            Control(
                "x shape",
                lambda v: v.shape_boxes[0],
                lambda v, n: cycle(shapes, n, v.shape_boxes[0].value),
                to_op("softmax"),
            ),
            picker("dim", "dim_picker", to_op("softmax")),
            picker("∂ w.r.t.", "wrt_picker", to_op("matmul")),
            picker("v", "v_picker", to_op("softmax")),
            Control("index", lambda v: v.index_box, lambda v, n: cycle(list(range(6)), n, v.index_box.value), one_hot),
        ],
    )


def _graph():
    import torch

    from autogradlab.views import GraphView

    def build():
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
        batch = torch.randn(8, 3)
        return GraphView(lambda: net(batch).pow(2).mean(), params=net)

    return Spec(
        "GraphView",
        build,
        [
            slider("backward step", "step", integer=True),
            Control(
                "saved tensors",
                lambda v: v.saved_box,
                lambda v, n: [bool((i + 1 + v.saved_box.value) % 2) for i in range(n)],
            ),
            Control(
                "shapes",
                lambda v: v.shapes_box,
                lambda v, n: [bool((i + 1 + v.shapes_box.value) % 2) for i in range(n)],
            ),
            picker("arrows", "direction"),
        ],
    )


def _inspector():
    from autogradlab.views import TrainStepInspector

    def fresh_if_done(view):
        if view.session.done:
            view.reset_button.click()

    return Spec(
        "TrainStepInspector",
        TrainStepInspector,
        [
            Control("Next line ▶", lambda v: v.next_button, lambda v, n: [None] * n, before_each=fresh_if_done),
            Control(
                "Run to end",
                lambda v: v.run_button,
                lambda v, n: [None] * n,
                before_each=lambda v: v.reset_button.click(),
            ),
            Control(
                "Reset ↺",
                lambda v: v.reset_button,
                lambda v, n: [None] * n,
                before_each=lambda v: v.next_button.click(),
            ),
        ],
    )


def _accumulation():
    from autogradlab.views import AccumulationLab

    def forget():
        from autogradlab.models.token_accumulation import cached_sweep

        cached_sweep.cache_clear()

    return Spec(
        "AccumulationLab",
        AccumulationLab,
        [
            Control("K", lambda v: v.k, lambda v, n: cycle(list(v.k.options), n, v.k.value)),
            picker("reduction", "reduction"),
            slider("length spread", "spread"),
            picker("dtype", "dtype"),
        ],
        forget,
    )


def _loss_scale():
    from autogradlab.views import LossScaleLab

    def forget():
        import autogradlab.models.loss_scale as module

        if hasattr(module, "_overflows_fp16_cached"):
            module._overflows_fp16_cached.cache_clear()

    return Spec(
        "LossScaleLab",
        LossScaleLab,
        [
            slider("initial scale", "init_scale", integer=True),
            slider("growth interval", "growth_interval", integer=True),
            slider("backoff", "backoff"),
            slider("overflow rate", "overflow_rate"),
        ],
        forget,
    )


SPECS = {
    "TangentExplorer": _tangent,
    "GraphView": _graph,
    "VJPExplorer": _vjp,
    "TrainStepInspector": _inspector,
    "AccumulationLab": _accumulation,
    "LossScaleLab": _loss_scale,
}


def _picture(view) -> w.Widget:
    return view.picture if hasattr(view, "picture") else view.table  # TrainStepInspector draws a table


# ---------------------------------------------------------------------------------------------- running


@dataclass
class Row:
    view: str
    control: str
    build_ms: float | None
    first_ms: float
    median_ms: float
    max_ms: float
    bytes: int
    redraws: tuple[int, int]
    errors: list[str]


def run_control(
    spec: Spec, control: Control, n: int, wire: Wire
) -> tuple[list[float], list[int], list[int], list[str]]:
    spec.forget()
    view = spec.build()
    control.prepare(view)
    values = control.values(view, n)
    widget = control.widget(view)
    picture = _picture(view)
    times, sizes, redraws, errors = [], [], [], []
    for value in values:
        control.before_each(view)
        wire.reset()
        start = time.perf_counter()
        try:
            from_browser(widget, value)
        except Exception as exc:  # a view must never raise: count it, keep measuring
            errors.append(f"{value!r}: {type(exc).__name__}: {exc}")
        times.append((time.perf_counter() - start) * 1000)
        sizes.append(wire.bytes)
        redraws.append(wire.redraws(picture))
    return times, sizes, redraws, errors


def bench(names: list[str], n: int, repeat: int) -> tuple[list[Row], dict[str, float]]:
    rows, cold = [], {}
    with Wire() as wire:
        for name in names:
            spec = SPECS[name]()
            start = time.perf_counter()
            spec.build()  # warm-up: one-time imports and first calls
            cold[name] = (time.perf_counter() - start) * 1000
            builds = []
            for _ in range(max(3, repeat)):
                start = time.perf_counter()
                spec.build()
                builds.append((time.perf_counter() - start) * 1000)
            for i, control in enumerate(spec.controls):
                passes = [run_control(spec, control, n, wire) for _ in range(repeat)]
                times = [t for p in passes for t in p[0]]
                sizes, redraws, errors = (
                    passes[0][1],
                    [r for p in passes for r in p[2]],
                    [e for p in passes for e in p[3]],
                )
                rows.append(
                    Row(
                        name,
                        control.name,
                        statistics.median(builds) if i == 0 else None,
                        statistics.median(p[0][0] for p in passes),
                        statistics.median(times),
                        max(times),
                        int(statistics.median(sizes)),
                        (min(redraws), max(redraws)),
                        errors,
                    )
                )
    return rows, cold


def render(rows: list[Row], cold: dict[str, float], n: int, repeat: int) -> str:
    head = (
        f"{'view':<19} {'control':<16} {'build':>7} {'first':>7} {'median':>7} {'max':>7} {'bytes':>8} {'redraws':>8}"
    )
    lines = [
        f"{n} changes per control, {repeat} pass(es) from a fresh view and empty caches; times in ms",
        head,
        "-" * len(head),
    ]
    for r in rows:
        build = f"{r.build_ms:7.1f}" if r.build_ms is not None else " " * 7
        redraws = f"{r.redraws[0]}" if r.redraws[0] == r.redraws[1] else f"{r.redraws[0]}–{r.redraws[1]}"
        lines.append(
            f"{r.view:<19} {r.control:<16} {build} {r.first_ms:7.1f} {r.median_ms:7.1f} {r.max_ms:7.1f} "
            f"{r.bytes:8d} {redraws:>8}" + (f"  {len(r.errors)} ERRORS" if r.errors else "")
        )
    lines.append(
        "first build in this process (one-time imports and warm-up included): "
        + ", ".join(f"{k} {v:.0f} ms" for k, v in cold.items())
    )
    for r in rows:
        for e in r.errors[:3]:
            lines.append(f"ERROR {r.view}/{r.control}: {e}")
    worst_median = max(rows, key=lambda r: r.median_ms)
    worst_max = max(rows, key=lambda r: r.max_ms)
    builds = [r for r in rows if r.build_ms is not None]
    worst_build = max(builds, key=lambda r: r.build_ms)
    most_redraws = max(r.redraws[1] for r in rows)
    errors = sum(len(r.errors) for r in rows)
    ok = (
        worst_median.median_ms <= GOAL_MEDIAN_MS
        and worst_max.max_ms <= GOAL_MAX_MS
        and worst_build.build_ms <= GOAL_BUILD_MS
        and most_redraws <= 1
        and errors == 0
    )
    lines.append(
        f"GOALS {'MET' if ok else 'NOT MET'}: worst median {worst_median.median_ms:.1f} ms "
        f"({worst_median.view}/{worst_median.control}; goal ≤ {GOAL_MEDIAN_MS:.0f}), worst max {worst_max.max_ms:.1f} ms "
        f"({worst_max.view}/{worst_max.control}; goal ≤ {GOAL_MAX_MS:.0f}), slowest build {worst_build.build_ms:.1f} ms "
        f"({worst_build.view}; goal ≤ {GOAL_BUILD_MS:.0f}), most redraws per change {most_redraws} (goal ≤ 1), "
        f"{errors} errors"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- profile

CATEGORIES = ("model", "png", "svg", "send", "rest")


class Timers:
    """Wall-clock time spent inside wrapped functions, by category; only the outermost call of a category counts."""

    def __init__(self) -> None:
        self.ms = {c: 0.0 for c in CATEGORIES}
        self._depth = {c: 0 for c in CATEGORIES}
        self._undo: list[tuple[Any, str, Any]] = []

    def wrap(self, owner: Any, name: str, category: str) -> None:
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        function = original.__func__ if isinstance(original, (staticmethod, classmethod)) else original
        timers = self

        @functools.wraps(function)
        def timed(*args, **kwargs):
            if timers._depth[category]:
                return function(*args, **kwargs)
            timers._depth[category] += 1
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                timers.ms[category] += (time.perf_counter() - start) * 1000
                timers._depth[category] -= 1

        replacement = type(original)(timed) if isinstance(original, (staticmethod, classmethod)) else timed
        self._undo.append((owner, name, original))
        setattr(owner, name, replacement)

    def install(self, view_module) -> None:
        """Time the model functions a view module calls, its PNG encoding, and every SVG-drawing entry point."""
        try:
            import autogradlab.render.chart as chart
        except ImportError:  # a tree from before the views drew SVG charts
            chart = None
        for name, obj in list(vars(view_module).items()):
            where = getattr(obj, "__module__", "") or ""
            if inspect.isfunction(obj) and where.startswith("autogradlab.models"):
                self.wrap(view_module, name, "model")
            elif name == "figure_png":
                self.wrap(view_module, name, "png")
            elif inspect.isfunction(obj) and where.startswith("autogradlab.render"):
                self.wrap(view_module, name, "svg")
        for cls in (chart.Chart, chart.Panel) if chart else ():
            for name, obj in list(vars(cls).items()):
                if inspect.isfunction(obj):
                    self.wrap(cls, name, "svg")

    def undo(self) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)
        self._undo.clear()


def profile_change(spec: Spec, control: Control, wire: Wire) -> dict[str, float]:
    """Where one change's time goes, in ms: models, PNG (matplotlib draw + encode), SVG, sending, the rest."""
    import importlib

    spec.forget()
    view = spec.build()
    control.prepare(view)
    value = control.values(view, 2)[0]
    control.before_each(view)
    timers = Timers()
    timers.install(importlib.import_module(type(view).__module__))
    wire.ms = 0.0
    try:
        start = time.perf_counter()
        from_browser(control.widget(view), value)
        total = (time.perf_counter() - start) * 1000
    finally:
        timers.undo()
    out = dict(timers.ms, send=wire.ms)
    out["rest"] = total - sum(out[c] for c in CATEGORIES if c != "rest")
    out["total"] = total
    return out


def render_profile(names: list[str], repeat: int) -> str:
    head = f"{'view':<19} {'control':<16} {'total':>7} " + " ".join(f"{c:>7}" for c in CATEGORIES)
    lines = [
        f"where one change goes, ms (of {repeat} changes from fresh views, the one with the median total): model = the "
        "autogradlab.models calls; png = matplotlib draw + PNG encoding; svg = building the SVG; send = "
        "serialising the comm messages; rest = everything else (building a matplotlib figure, the view's glue)",
        head,
        "-" * len(head),
    ]
    with Wire() as wire:
        for name in names:
            spec = SPECS[name]()
            spec.build()  # one-time imports out of the way
            for control in spec.controls:
                runs = sorted((profile_change(spec, control, wire) for _ in range(repeat)), key=lambda r: r["total"])
                p = runs[len(runs) // 2]  # the run with the median total, so its parts add up
                lines.append(
                    f"{name:<19} {control.name:<16} {p['total']:7.1f} " + " ".join(f"{p[c]:7.1f}" for c in CATEGORIES)
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20, help="changes per control")
    parser.add_argument("--repeat", type=int, default=3, help="passes per control, each from a fresh view")
    parser.add_argument("--views", default=",".join(SPECS), help="comma-separated view names")
    parser.add_argument("--profile", action="store_true", help="instead: where one change's time goes")
    args = parser.parse_args(argv)
    names = [v for v in args.views.split(",") if v]
    if args.profile:
        print(render_profile(names, args.repeat))
        return 0
    rows, cold = bench(names, args.n, args.repeat)
    print(render(rows, cold, args.n, args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
