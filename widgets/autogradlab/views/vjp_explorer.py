"""VJPExplorer: pick an op and shapes, see its Jacobian, an upstream v, vᵀJ and autograd's VJP (chapter 03)."""

from __future__ import annotations

import html

import ipywidgets as w

from autogradlab.i18n import _
from autogradlab.models.vjp import (
    MAX_NUMEL,
    OPS,
    UPSTREAM_KINDS,
    Exploration,
    ShapeError,
    explore,
    parse_shape,
    rounding_level,
)
from autogradlab.render.chart import INK, MUTED, Chart, number, text_width
from autogradlab.views.common import message_html, never_raises, one_thread, picture
from autogradlab.views.static import StaticFallback

ZERO_UP_TO_ROUNDING = 100  # an entry of vᵀJ within this many rounding levels of 0 is zero up to rounding:
# it is printed ≈0 and drawn white, and the colour scale of the VJP rows never gets finer than that


def _shape_text(shape: tuple[int, ...]) -> str:
    return ", ".join(str(s) for s in shape)


class VJPExplorer(StaticFallback, w.VBox):
    """Choose an op, its input shapes, a dim and an upstream vector; the Jacobian and both VJPs redraw.

    Invalid choices (shapes that do not fit, a dim that does not exist) show a message instead of a plot.

    >>> view = VJPExplorer(op="softmax")
    >>> view.v_picker.value = "ones"        # observers redraw, also outside a browser
    >>> "max |vᵀJ − autograd|" in view.readout.value
    True
    """

    def __init__(
        self, op: str = "softmax", shapes=None, dim: int = -1, wrt: str | None = None, v: str = "random", index: int = 0
    ):
        if op not in OPS:
            raise ValueError(f"unknown op {op!r}: choose one of {', '.join(OPS)}")
        self._quiet = True  # no redraws while the controls are being set up
        self.op_picker = w.Dropdown(options=list(OPS), value=op, description="op")
        self.shape_boxes = [w.Text(continuous_update=False, layout=w.Layout(width="170px")) for _ in range(2)]
        self.dim_picker = w.Dropdown(
            options=[-1, 0, 1, 2], value=dim, description="dim", layout=w.Layout(width="130px")
        )
        self.wrt_picker = w.Dropdown(description="∂ w.r.t.", layout=w.Layout(width="160px"))
        self.v_picker = w.Dropdown(
            options=list(UPSTREAM_KINDS), value=v, description="v", layout=w.Layout(width="170px")
        )
        self.index_box = w.BoundedIntText(
            value=index, min=0, max=MAX_NUMEL - 1, description="index", layout=w.Layout(width="140px")
        )
        self.message = w.HTML()
        self.readout = w.HTML()
        self.picture = picture()
        self._set_op_controls(shapes, wrt)
        self.op_picker.observe(self._op_changed, names="value")
        for control in (*self.shape_boxes, self.dim_picker, self.wrt_picker, self.v_picker, self.index_box):
            control.observe(self._redraw, names="value")
        controls = w.VBox(
            [
                w.HBox([self.op_picker, *self.shape_boxes]),
                w.HBox([self.dim_picker, self.wrt_picker, self.v_picker, self.index_box]),
            ]
        )
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
            box.description = _("{name} shape").format(name=op.inputs[i]) if used else ""
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

    @never_raises
    def _redraw(self, _change=None) -> None:
        if self._quiet:
            return
        self.index_box.layout.display = None if self.v_picker.value == "one-hot" else "none"
        op = OPS[self.op_picker.value]
        try:
            shapes = [parse_shape(box.value) for box in self.shape_boxes[: len(op.inputs)]]
            with one_thread():
                result = explore(
                    op.name,
                    shapes,
                    dim=self.dim_picker.value,
                    wrt=self.wrt_picker.value,
                    v=self.v_picker.value,
                    index=self.index_box.value,
                )
        except ShapeError as error:
            self.message.value = message_html(html.escape(str(error)))
            self.readout.value = ""
            self.picture.value = ""
            self.picture.layout.display = "none"
            return
        self.message.value = ""
        self.picture.layout.display = None
        self.readout.value = self._readout(result)
        self.picture.value = draw_exploration(result)

    @staticmethod
    def _readout(r: Exploration) -> str:
        wrt_shape = r.shapes[r.op.inputs.index(r.wrt)]
        m, n = r.jacobian.shape
        return (
            f"<b>{html.escape(_(r.op.formula))}</b> &nbsp;·&nbsp; {r.wrt} {wrt_shape} → y {tuple(r.output.shape)} "
            f"&nbsp;·&nbsp; Jacobian {m} × {n} &nbsp;·&nbsp; "
            f"<b>max |vᵀJ − autograd| = {r.difference:.1e}</b><br>"
            f"<i>{html.escape(_(r.op.note(r.wrt)))}</i>"
        )


def colour_scales(r: Exploration) -> tuple[float, float, float]:
    """The ± ranges of the colours: J's largest |entry|, v's, and one for vᵀJ, autograd's VJP and their
    difference, never below ``ZERO_UP_TO_ROUNDING`` rounding levels of vᵀJ (so rounding noise is drawn white).

    >>> r = explore("relu", v="ones")
    >>> colour_scales(r)[1:]
    (1.0, 1.0)
    """
    j_scale = float(r.jacobian.abs().max()) if r.jacobian.numel() else 0.0
    v_scale = float(r.v.abs().max()) if r.v.numel() else 0.0
    peak = max(float(t.abs().max()) if t.numel() else 0.0 for t in (r.vjp_from_jacobian, r.vjp_from_autograd))
    return j_scale or 1.0, v_scale or 1.0, max(peak, ZERO_UP_TO_ROUNDING * rounding_level(r)) or 1.0


def draw_exploration(r: Exploration) -> str:
    """The Jacobian with v beside it and vᵀJ, autograd's VJP and their difference below, as one SVG.

    Every colour scale is symmetric around 0 (white), so a zero is drawn as zero: J on ±max|J|,
    v on ±max|v|, and the three VJP rows on one scale that is never finer than
    ``ZERO_UP_TO_ROUNDING`` rounding levels, so rounding noise stays white.
    """
    J = r.jacobian.tolist()
    m, n = len(J), len(J[0]) if J else 0
    v = r.v.reshape(-1).tolist()
    rows = [
        ("vᵀJ", r.vjp_from_jacobian.reshape(-1).tolist()),
        ("autograd", r.vjp_from_autograd.reshape(-1).tolist()),
        (_("difference"), (r.vjp_from_jacobian - r.vjp_from_autograd).reshape(-1).tolist()),
    ]
    zero = ZERO_UP_TO_ROUNDING * rounding_level(r)
    j_scale, v_scale, vec_scale = colour_scales(r)

    annotate = n <= 12 and m <= 16
    cw, ch = (56, 24) if annotate else (18, 16)
    left, top, gap = 96, 34, 30
    j_w, j_h = n * cw, m * ch
    rows_top = top + j_h + 22
    rows_bottom = rows_top + 3 * ch + 2 * 8
    bars_top = rows_bottom + 52
    legend = [
        (j_scale, _("J: white is 0, full colour its largest |entry|"), ""),
        (v_scale, _("v: white is 0, full colour its largest |entry|"), ""),
        (
            vec_scale,
            _("vᵀJ, autograd, difference: one scale, full colour the largest |entry|,"),
            _("at least {times} × vᵀJ's float64 rounding level {level}: rounding noise stays white (≈0)").format(
                times=ZERO_UP_TO_ROUNDING, level=number(rounding_level(r), 2)
            ),
        ),
    ]
    width = max(
        left + j_w + gap + cw + 40, 40 + 150 + 12 + max(text_width(t) for _, a, b in legend for t in (a, b)) + 10
    )
    chart = Chart(width, bars_top + 3 * 36 + 12)

    def fmt(x: float) -> str:
        return "0" if x == 0 else f"{x:.2f}".replace("-", "−")

    def fmt_vec(x: float) -> str:
        return "≈0" if abs(x) <= zero and x != 0 else fmt(x)

    def fmt_diff(x: float) -> str:
        return "0" if x == 0 else f"{x:.0e}".replace("-", "−")

    jp = chart.panel(left, top, j_w, j_h, xlim=(0, n), ylim=(0, m))
    jp.heatmap(J, j_scale, fmt if annotate else None)
    jp.axes(
        grid=False,
        xticks=[],
        yticks=[],
        title=_("Jacobian ∂y/∂{wrt}: y {out} × {wrt} {shape}").format(
            wrt=r.wrt, out=tuple(r.output.shape), shape=tuple(r.vjp_from_autograd.shape)
        ),
    )
    step = 1 if max(m, n) <= 12 else 2
    for i in range(0, m, step):
        chart.text(left - 6, top + i * ch + ch / 2 + 4, str(i), anchor="end", color=MUTED)
    chart.text(left - 30, top + j_h / 2 + 4, _("output i"), anchor="end", color=INK)

    vp = chart.panel(left + j_w + gap, top, cw, j_h, xlim=(0, 1), ylim=(0, m))
    vp.heatmap([[x] for x in v], v_scale, fmt if m <= 16 else None)
    vp.axes(grid=False, xticks=[], yticks=[], title="v")

    for k, (label, values) in enumerate(rows):
        y = rows_top + k * (ch + 8)
        rp = chart.panel(left, y, j_w, ch, xlim=(0, n), ylim=(0, 1))
        rp.heatmap([values], vec_scale, (fmt_diff if k == 2 else fmt_vec) if annotate else None, dead_zone=zero)
        rp.axes(grid=False, xticks=[], yticks=[])
        chart.text(left - 8, y + ch / 2 + 4, label, anchor="end")
    for j in range(0, n, step):
        chart.text(left + j * cw + cw / 2, rows_bottom + 15, str(j), anchor="middle", color=MUTED)
    chart.text(
        left + j_w / 2, rows_bottom + 33, _("input element j of {wrt} (flattened)").format(wrt=r.wrt), anchor="middle"
    )

    for k, (scale, text, note) in enumerate(legend):
        chart.colorbar(40, bars_top + k * 36, 150, scale, text, note)
    return chart.svg()
