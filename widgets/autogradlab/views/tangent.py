"""TangentExplorer: move x, see f, its tangent line and f'(x) from autograd (chapter 00)."""

from __future__ import annotations

import ipywidgets as w

from autogradlab.i18n import _
from autogradlab.models.calculus import FUNCTIONS, curve, tangent
from autogradlab.render.chart import BLUE, INK, ORANGE, Chart
from autogradlab.views.common import message_html, never_raises, one_thread, picture, readout
from autogradlab.views.static import StaticFallback

WIDTH, HEIGHT = 560, 330


class TangentExplorer(StaticFallback, w.VBox):
    """Pick a function and a point; the plot and autograd's derivative update live.

    >>> view = TangentExplorer()
    >>> view.x_slider.value = 1.5   # observers redraw, also outside a browser
    >>> "f'(x)" in view.readout.value
    True
    """

    def __init__(self, functions=None, x: float = 1.0, lo: float = -3.0, hi: float = 3.0, fn: str | None = None):
        self.functions = dict(functions or FUNCTIONS)
        if fn is not None and fn not in self.functions:
            raise ValueError(f"unknown function {fn!r}: choose one of {', '.join(self.functions)}")
        self.lo, self.hi = lo, hi
        self.fn_picker = w.Dropdown(options=list(self.functions), description="f(x) =")
        if fn is not None:
            self.fn_picker.value = fn
        self.x_slider = w.FloatSlider(value=x, min=lo, max=hi, step=0.05, description="x", continuous_update=True)
        self.message = w.HTML()
        self.readout = w.HTML()
        self.picture = picture()
        self._curves: dict[str, tuple] = {}
        for control in (self.fn_picker, self.x_slider):
            control.observe(self._redraw, names="value")
        super().__init__([w.HBox([self.fn_picker, self.x_slider]), self.message, self.readout, self.picture])
        self._redraw()

    def __repr__(self) -> str:  # short and stable: shown only where widgets cannot render
        return f"TangentExplorer(f={self.fn_picker.value!r}, x={self.x_slider.value:g})"

    def _curve(self, name: str):
        if name not in self._curves:  # the curve depends on f only: a slider move reuses it
            xs, ys = curve(self.functions[name], self.lo, self.hi)
            self._curves[name] = (xs.tolist(), ys.tolist())
        return self._curves[name]

    @never_raises
    def _redraw(self, _change=None) -> None:
        fn = self.functions[self.fn_picker.value]
        with one_thread():
            point = tangent(fn, self.x_slider.value)
            xs, ys = self._curve(self.fn_picker.value)
        finite = [y for y in ys if y == y and abs(y) != float("inf")]
        if not finite:
            self.message.value = message_html(
                _("f(x) = {fn} has no finite value on [{lo:g}, {hi:g}].").format(
                    fn=self.fn_picker.value, lo=self.lo, hi=self.hi
                )
            )
            self.picture.value = self.readout.value = ""
            return
        low, high = min(finite), max(finite)
        span = (high - low) or 1.0
        self.picture.value = self._draw(xs, ys, point, (low - 0.3 * span, high + 0.3 * span))
        self.message.value = ""
        self.readout.value = readout(
            f"x = {point.x:.2f}",
            f"f(x) = {point.value:.4f}",
            _("<b>f'(x) from autograd = {slope:.6f}</b>").format(slope=point.slope),
            _("central difference = {slope:.6f}").format(slope=point.numerical_slope),
        )

    def _draw(self, xs, ys, point, ylim) -> str:
        chart = Chart(WIDTH, HEIGHT)
        chart.legend(
            60, 6, [("line", BLUE, "f(x)"), ("line", ORANGE, _("tangent at x"), "6 4"), ("marker", INK, "(x, f(x))")]
        )
        panel = chart.panel(60, 34, WIDTH - 80, HEIGHT - 34 - 48, xlim=(self.lo, self.hi), ylim=ylim)
        panel.line(xs, ys, color=BLUE, width=2)
        ends = [self.lo, self.hi]
        panel.line(ends, [point.line(e) for e in ends], color=ORANGE, width=2, dash="6 4")
        panel.markers([point.x], [point.value], color=INK, size=4.5)
        panel.axes(xlabel="x", ylabel="f(x)")
        return chart.svg()
