"""GraphView: the autograd graph your code just built, and a real backward pass through it, step by step."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import ipywidgets as w

from autogradlab.graph import BackwardRecord, Graph, capture, describe_ungraphable, format_shape, record_backward
from autogradlab.i18n import _
from autogradlab.render import MAX_NODES, build_scene, to_svg
from autogradlab.units import format_bytes
from autogradlab.views.common import PICTURE_CLASS, never_raises
from autogradlab.views.static import StaticFallback


class GraphView(StaticFallback, w.VBox):
    """Show the graph behind a tensor (or a function returning one) and step through backward.

    ``GraphView(loss, params=model)`` draws the graph of ``loss``;
    ``GraphView(lambda: model(x).pow(2).mean(), params=model)`` also gets a rebuild
    button that runs the function again. Backward is recorded once, for real, with
    ``retain_graph=True``; your ``.grad`` values are left as they were.

    >>> import torch
    >>> w_ = torch.randn(3, requires_grad=True)
    >>> view = GraphView((w_ * w_).sum(), params={"w": w_})
    >>> view
    GraphView(4 nodes, 3 backward steps)
    >>> view.step.value = 3          # observers redraw, also outside a browser
    >>> "AccumulateGrad" in view.info.value
    True
    """

    def __init__(
        self,
        source: Any,
        params: Any = None,
        *,
        saved: bool = True,
        shapes: bool = True,
        direction: str = "backward",
        max_nodes: int = MAX_NODES,
    ):
        self.params = params
        self.max_nodes = max_nodes
        self.graph: Graph | None = None
        self.record: BackwardRecord | None = None
        self._builder: Callable | None = None

        self._quiet = False  # True while show() sets controls: one redraw at its end, not one per control
        # width auto: each control as wide as its content, so "arrows" stays on the line of its buttons
        self.saved_box = w.Checkbox(
            value=saved,
            description=_("saved tensors"),
            indent=False,
            layout=w.Layout(width="auto", margin="0 24px 0 0"),
        )
        self.shapes_box = w.Checkbox(
            value=shapes, description=_("shapes"), indent=False, layout=w.Layout(width="auto", margin="0 24px 0 0")
        )
        # The label is a widget of its own: a ToggleButtons description wraps above the buttons when space is short.
        self.direction = w.ToggleButtons(
            options=[(_("gradient flow"), "backward"), (_("data flow"), "forward")],
            value=direction,
            layout=w.Layout(width="auto"),
            style={"button_width": "110px"},
        )
        arrows = w.Label(_("arrows:"), layout=w.Layout(width="auto", margin="0 6px 0 0"))
        self.step = w.IntSlider(
            value=0,
            min=0,
            max=0,
            description=_("backward step"),
            continuous_update=True,
            style={"description_width": "initial"},
        )
        self.prev_button = w.Button(description="◀", tooltip=_("previous backward step"), layout=w.Layout(width="40px"))
        self.next_button = w.Button(description="▶", tooltip=_("next backward step"), layout=w.Layout(width="40px"))
        self.rebuild_button = w.Button(description=_("↻ rebuild graph"), tooltip=_("run the function again"))
        self.expand = w.SelectMultiple(options=[], description=_("expand"), rows=4)
        self.message = w.HTML()
        # At most about a screen high (it scrolls inside), so the step text above stays in view while stepping.
        self.picture = w.HTML(
            layout=w.Layout(overflow="auto", max_height="min(700px, 70vh)", border="1px solid #dee2e6")
        )
        self.picture.add_class(PICTURE_CLASS)
        self.info = w.HTML()  # "Step k of n": right under the ▶ button
        self.summary = w.HTML()  # the leaves' .grad after the last step, under the picture
        self.memory = w.HTML()

        for control in (self.saved_box, self.shapes_box, self.direction, self.step, self.expand):
            control.observe(self._redraw, names="value")
        self.prev_button.on_click(lambda _: self._move(-1))
        self.next_button.on_click(lambda _: self._move(+1))
        self.rebuild_button.on_click(lambda _: self.show(self._builder) if self._builder else None)
        self.toggles = w.HBox(
            [self.saved_box, self.shapes_box, w.HBox([arrows, self.direction])],
            layout=w.Layout(flex_flow="row wrap", align_items="center"),
        )
        self.stepper = w.HBox(
            [self.prev_button, self.step, self.next_button, self.rebuild_button], layout=w.Layout(flex_flow="row wrap")
        )
        super().__init__(
            [self.message, self.toggles, self.stepper, self.info, self.expand, self.picture, self.summary, self.memory]
        )
        self.show(source)

    def __repr__(self) -> str:  # short and stable: shown only where widgets cannot render
        if self.graph is None:
            return "GraphView(no graph)"
        steps = len(self.record.steps) if self.record and not self.record.error else 0
        return f"GraphView({len(self.graph.nodes)} nodes, {steps} backward steps)"

    # -- building --------------------------------------------------------------------------

    def show(self, source: Any) -> None:
        """Capture and draw a new graph: a tensor, a tuple of tensors, or a function returning one."""
        self._builder = source if callable(source) and not hasattr(source, "grad_fn") else None
        self.rebuild_button.layout.display = None if self._builder else "none"
        self.graph, self.record = None, None
        for part in (self.toggles, self.stepper, self.picture):
            part.layout.display = None
        output = source
        if self._builder is not None:
            try:
                output = self._builder()
            except Exception as exc:  # the learner's function failed: say so, in the view
                self._fail(
                    _("Building the graph raised {error}: {message}").format(error=type(exc).__name__, message=exc)
                )
                return
        problem = self._describe_problem(output)
        if problem:
            self._fail(_("Nothing to draw: {problem}").format(problem=problem))
            return
        try:
            self.graph = capture(output, params=self.params)
            self.record = record_backward(output) if not self.graph.freed else None
        except (TypeError, ValueError) as exc:  # e.g. params that are not tensors
            self._fail(str(exc))
            return
        del output  # the view keeps plain data only, never the tensors (or their activations)
        scene = build_scene(self.graph, max_nodes=self.max_nodes)
        steps = len(self.record.steps) if self.record and not self.record.error else 0
        self._quiet = True
        try:
            self.expand.options = scene.groups if scene.collapsed else []
            self.expand.layout.display = None if scene.collapsed else "none"
            self.step.value = 0
            self.step.max = steps
            for control in (self.step, self.prev_button, self.next_button):
                control.disabled = steps == 0
        finally:
            self._quiet = False
        self.message.value = self._status()
        self.memory.value = self._memory()
        self._redraw()

    @staticmethod
    def _describe_problem(output: Any) -> str | None:
        items = (
            output
            if isinstance(output, (tuple, list)) and output and all(hasattr(o, "grad_fn") for o in output)
            else [output]
        )
        for item in items:
            problem = describe_ungraphable(item)
            if problem:
                return problem
        return None

    def _fail(self, text: str) -> None:
        self.message.value = f'<div style="color:#c92a2a"><b>⚠ {html.escape(text)}</b></div>'
        self.picture.value = ""
        self.toggles.layout.display = self.picture.layout.display = "none"
        # A function can be fixed and rebuilt: keep its button visible.
        self.stepper.layout.display = None if self._builder else "none"
        self.info.value = self.summary.value = self.memory.value = ""
        self.step.max, self.step.value = 0, 0
        self.expand.options = []
        self.expand.layout.display = "none"
        for control in (self.step, self.prev_button, self.next_button):
            control.disabled = True

    def _status(self) -> str:
        assert self.graph is not None
        lines = []
        for node, saved in self.graph.stale:
            lines.append(
                _("⚠ <b>{node}</b> saved <code>{saved}</code>, which was {why}.").format(
                    node=html.escape(node.name),
                    saved=html.escape(saved.name),
                    why=html.escape(saved.note.removeprefix("STALE: ")),
                )
            )
        if self.graph.freed:
            lines.append(
                _(
                    "⚠ This graph was already freed by <code>backward()</code>: its saved tensors are gone, so "
                    "backward cannot run through it again. Re-run the cell that builds it (or call "
                    "<code>backward(retain_graph=True)</code> to keep it)."
                )
            )
        elif self.record and self.record.error:
            lines.append(_("Backward fails here: <code>{error}</code>").format(error=html.escape(self.record.error)))
        if not lines:
            return ""
        return '<div style="color:#c92a2a">' + "<br>".join(lines) + "</div>"

    def _memory(self) -> str:
        g = self.graph
        assert g is not None
        pairs = list(g.saved_tensors())
        live = [s for _, s in pairs if s.state != "freed"]
        storages = {s.storage for s in live if s.storage is not None}
        total, activations = g.saved_bytes(), g.activation_bytes()
        text = _(
            "<b>Saved for backward:</b> {tensors} tensors in {storages} storages, "
            "{total} (shared storage counted once); {activations} of it exists only "
            "for backward (activations), the rest is parameters or inputs you hold anyway."
        ).format(
            tensors=len(live), storages=len(storages), total=format_bytes(total), activations=format_bytes(activations)
        )
        # No single storage to count: packed by a saved_tensors_hooks hook (checkpointing, offloading),
        # or sparse, meta or nested tensors. Each Saved.note says which, so the view repeats the notes.
        uncounted = [s for s in live if s.storage is None]
        if uncounted:
            notes = sorted({s.note or _("no storage") for s in uncounted})
            text += _(" Not counted here, {count} saved tensor(s): ").format(count=len(uncounted)) + "; ".join(
                html.escape(n.removesuffix("; not in the memory totals")) for n in notes[:3]
            )
            text += " …" if len(notes) > 3 else "."
        return text

    # -- drawing ---------------------------------------------------------------------------

    def _move(self, delta: int) -> None:
        self.step.value = min(max(self.step.value + delta, 0), self.step.max)

    @never_raises
    def _redraw(self, _change: Any = None) -> None:
        if self.graph is None or self._quiet:
            return
        highlight, visited, notes = None, [], {}
        k = self.step.value
        steps = self.record.steps if self.record and not self.record.error else []
        for s in steps[:k]:
            visited.append(s.node_id)
            if s.grad_norm is not None:
                notes[s.node_id] = f"‖g‖={s.grad_norm:.3g}"
        if k:
            highlight = steps[k - 1].node_id
        self.picture.value = to_svg(
            self.graph,
            saved=self.saved_box.value,
            shapes=self.shapes_box.value,
            direction=self.direction.value,
            expand=self.expand.value,
            max_nodes=self.max_nodes,
            highlight=highlight,
            visited=visited,
            notes=notes,
        )
        self.info.value = self._step_text(k, steps)
        self.summary.value = self._grads_table() if steps and k == len(steps) else ""

    def _step_text(self, k: int, steps: list) -> str:
        if not steps:
            return ""
        if k == 0:
            text = _(
                "Before backward. Move the slider or press ▶: backward runs {count} nodes, starting from "
                "the output with gradient 1 (ones for a non-scalar output)."
            ).format(count=len(steps))
        else:
            s = steps[k - 1]
            shapes = ", ".join(format_shape(sh) for sh in s.grad_shapes)
            norm = _("no gradient (None)") if s.grad_norm is None else _("norm {norm:.4g}").format(norm=s.grad_norm)
            text = _(
                "<b>Step {k} of {n}</b>: <b>{node}</b> ran; the gradient arriving had {norm}, shape {shapes}."
            ).format(k=k, n=len(steps), node=html.escape(s.name), norm=norm, shapes=shapes)
            node = self.graph.node(s.node_id)
            if node.kind == "leaf":
                text += _(" It adds that gradient into <code>{name}.grad</code>.").format(
                    name=html.escape(node.param_name or "leaf")
                )
            if k == len(steps):
                text += _(" Backward finished: the leaves' <code>.grad</code> are in the table under the graph.")
        return f'<div style="line-height:1.5;margin:2px 0">{text}</div>'

    def _grads_table(self) -> str:
        rows = []
        for node in self.graph.leaves:
            grad = self.record.leaf_grads.get(node.id)
            if grad is None:
                continue
            name = html.escape(node.param_name or f"leaf {node.id}")
            rows.append(
                f"<tr><td><code>{name}.grad</code></td><td>{format_shape(tuple(grad.shape))}</td>"
                f"<td>{float(grad.double().norm()):.4g}</td></tr>"
            )
        return (
            _("<b>Backward finished.</b> The leaves' <code>.grad</code> after this pass:")
            + "<table><tr><th>{}</th><th>{}</th><th>{}</th></tr>".format(_("tensor"), _("shape"), _("norm"))
            + "".join(rows)
            + "</table>"
        )
