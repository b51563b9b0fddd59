"""VJPExplorer: pick an op and shapes, see its Jacobian, an upstream v, vᵀJ and autograd's VJP (chapter 03)."""

from __future__ import annotations

import html

import ipywidgets as w
import numpy as np

from autogradlab.models.vjp import MAX_NUMEL, OPS, UPSTREAM_KINDS, Exploration, ShapeError, explore, parse_shape
from autogradlab.views.plots import figure_png, new_figure

_CMAP = "RdBu_r"  # diverging: zero is white, so the Jacobian's sparsity pattern stands out


def _shape_text(shape: tuple[int, ...]) -> str:
    return ", ".join(str(s) for s in shape)


class VJPExplorer(w.VBox):
    """Choose an op, its input shapes, a dim and an upstream vector; the Jacobian and both VJPs redraw.

    Invalid choices (shapes that do not fit, a dim that does not exist) show a message instead of a plot.

    >>> view = VJPExplorer(op="softmax")
    >>> view.v_picker.value = "ones"        # observers redraw, also outside a browser
    >>> "max |vᵀJ − autograd|" in view.readout.value
    True
    """

    def __init__(self, op: str = "softmax", shapes=None, dim: int = -1, wrt: str | None = None, v: str = "random"):
        if op not in OPS:
            raise ValueError(f"unknown op {op!r}: choose one of {', '.join(OPS)}")
        self._quiet = True  # no redraws while the controls are being set up
        self.op_picker = w.Dropdown(options=list(OPS), value=op, description="op")
        self.shape_boxes = [w.Text(continuous_update=False, layout=w.Layout(width="170px")) for _ in range(2)]
        self.dim_picker = w.Dropdown(options=[-1, 0, 1, 2], value=dim, description="dim", layout=w.Layout(width="130px"))
        self.wrt_picker = w.Dropdown(description="∂ w.r.t.", layout=w.Layout(width="160px"))
        self.v_picker = w.Dropdown(options=list(UPSTREAM_KINDS), value=v, description="v", layout=w.Layout(width="170px"))
        self.index_box = w.BoundedIntText(value=0, min=0, max=MAX_NUMEL - 1, description="index",
                                          layout=w.Layout(width="140px"))
        self.message = w.HTML()
        self.readout = w.HTML()
        # flex-start: drawn at its own pixel size instead of stretched (blurred) to the output's width
        self.picture = w.Image(format="png", layout=w.Layout(align_self="flex-start"))
        self._set_op_controls(shapes, wrt)
        self.op_picker.observe(self._op_changed, names="value")
        for control in (*self.shape_boxes, self.dim_picker, self.wrt_picker, self.v_picker, self.index_box):
            control.observe(self._redraw, names="value")
        controls = w.VBox([
            w.HBox([self.op_picker, *self.shape_boxes]),
            w.HBox([self.dim_picker, self.wrt_picker, self.v_picker, self.index_box]),
        ])
        super().__init__([controls, self.message, self.readout, self.picture])
        self._quiet = False
        self._redraw()

    def __repr__(self) -> str:  # short and stable: shown only where widgets cannot render
        return f"VJPExplorer(op={self.op_picker.value!r}, wrt={self.wrt_picker.value!r}, v={self.v_picker.value!r})"

    # ------------------------------------------------------------------ controls

    def _set_op_controls(self, shapes=None, wrt: str | None = None) -> None:
        op = OPS[self.op_picker.value]
        shapes = shapes or op.default_shapes
        for i, box in enumerate(self.shape_boxes):
            used = i < len(op.inputs)
            box.description = f"{op.inputs[i]} shape" if used else ""
            box.value = _shape_text(tuple(shapes[i])) if used else ""
            box.layout.display = None if used else "none"
        self.wrt_picker.options = list(op.inputs)
        self.wrt_picker.value = wrt if wrt in op.inputs else op.inputs[0]
        self.wrt_picker.layout.display = None if len(op.inputs) > 1 else "none"
        self.dim_picker.layout.display = None if op.uses_dim else "none"

    def _op_changed(self, _change=None) -> None:
        self._quiet = True
        try:
            self._set_op_controls()
        finally:
            self._quiet = False
        self._redraw()

    # ------------------------------------------------------------------ drawing

    def _redraw(self, _change=None) -> None:
        if self._quiet:
            return
        self.index_box.layout.display = None if self.v_picker.value == "one-hot" else "none"
        op = OPS[self.op_picker.value]
        try:
            shapes = [parse_shape(box.value) for box in self.shape_boxes[: len(op.inputs)]]
            result = explore(op.name, shapes, dim=self.dim_picker.value, wrt=self.wrt_picker.value,
                             v=self.v_picker.value, index=self.index_box.value)
        except ShapeError as error:
            self.message.value = f"<span style='color:#b00020'>⚠ {html.escape(str(error))}</span>"
            self.readout.value = ""
            self.picture.layout.display = "none"
            return
        self.message.value = ""
        self.picture.layout.display = None
        self.readout.value = self._readout(result)
        self.picture.value = figure_png(self._figure(result))

    @staticmethod
    def _readout(r: Exploration) -> str:
        wrt_shape = r.shapes[r.op.inputs.index(r.wrt)]
        m, n = r.jacobian.shape
        return (
            f"<b>{html.escape(r.op.formula)}</b> &nbsp;·&nbsp; {r.wrt} {wrt_shape} → y {tuple(r.output.shape)} "
            f"&nbsp;·&nbsp; Jacobian {m} × {n} &nbsp;·&nbsp; "
            f"<b>max |vᵀJ − autograd| = {r.difference:.1e}</b><br>"
            f"<i>{html.escape(r.op.note(r.wrt))}</i>"
        )

    @staticmethod
    def _figure(r: Exploration):
        J = r.jacobian.numpy()
        m, n = J.shape
        cell = 0.34 if max(m, n) <= 12 else 0.24
        fig = new_figure(width=max(5.5, cell * (n + 1) + 2.6), height=cell * (m + 3) + 2.0)
        axes = fig.subplot_mosaic(
            [["J", "v"], ["vJ", "."], ["autograd", "."], ["diff", "."]],
            width_ratios=[n, 1.0], height_ratios=[m, 1, 1, 1],
        )
        j_scale = float(np.abs(J).max()) or 1.0
        rows = {
            "vJ": ("vᵀJ", r.vjp_from_jacobian),
            "autograd": ("autograd", r.vjp_from_autograd),
            "diff": ("difference", r.vjp_from_jacobian - r.vjp_from_autograd),
        }
        vec_scale = float(max(r.vjp_from_jacobian.abs().max(), r.vjp_from_autograd.abs().max())) or 1.0
        annotate = n <= 12 and m <= 16
        _heatmap(axes["J"], J, j_scale, annotate)
        axes["J"].set_title(f"Jacobian ∂y/∂{r.wrt}: y {tuple(r.output.shape)} × {r.wrt} {tuple(r.vjp_from_autograd.shape)}",
                            fontsize=9)
        axes["J"].set_ylabel("output element", fontsize=8)
        v = r.v.reshape(-1, 1).numpy()
        _heatmap(axes["v"], v, float(np.abs(v).max()) or 1.0, m <= 16)
        axes["v"].set_title("v", fontsize=9)
        axes["v"].set_xticks([])
        for key, (label, values) in rows.items():
            ax = axes[key]
            _heatmap(ax, values.reshape(1, -1).numpy(), vec_scale, annotate, fmt="{:.0e}" if key == "diff" else "{:.2f}")
            ax.set_ylabel(label, rotation=0, ha="right", va="center", fontsize=8)
            ax.set_yticks([])
        axes["diff"].set_xlabel(f"input element of {r.wrt} (flattened)", fontsize=8)
        for key in ("J", "vJ", "autograd"):
            axes[key].set_xticklabels([])
        return fig


def _heatmap(ax, values: np.ndarray, scale: float, annotate: bool, fmt: str = "{:.2f}") -> None:
    rows, cols = values.shape
    ax.imshow(values, cmap=_CMAP, vmin=-scale, vmax=scale, aspect="auto", interpolation="nearest")
    step = 1 if max(rows, cols) <= 12 else 2
    ax.set_xticks(range(0, cols, step))
    ax.set_yticks(range(0, rows, step))
    ax.tick_params(labelsize=7, length=0)
    if annotate:
        for (i, j), value in np.ndenumerate(values):
            text = "0" if value == 0 else fmt.format(value)
            color = "white" if abs(value) > 0.6 * scale else "black"
            ax.text(j, i, text, ha="center", va="center", fontsize=6, color=color)
