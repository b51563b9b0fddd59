"""TangentExplorer: move x, see f, its tangent line and f'(x) from autograd (chapter 00)."""

from __future__ import annotations

import ipywidgets as w

from autogradlab.models.calculus import FUNCTIONS, curve, tangent
from autogradlab.views.plots import figure_png, new_figure


class TangentExplorer(w.VBox):
    """Pick a function and a point; the plot and autograd's derivative update live.

    >>> view = TangentExplorer()
    >>> view.x_slider.value = 1.5   # observers redraw, also outside a browser
    >>> "f'(x)" in view.readout.value
    True
    """

    def __init__(self, functions=None, x: float = 1.0, lo: float = -3.0, hi: float = 3.0):
        self.functions = dict(functions or FUNCTIONS)
        self.lo, self.hi = lo, hi
        self.fn_picker = w.Dropdown(options=list(self.functions), description="f(x) =")
        self.x_slider = w.FloatSlider(value=x, min=lo, max=hi, step=0.05, description="x", continuous_update=False)
        self.readout = w.HTML()
        self.picture = w.Image(format="png")
        for control in (self.fn_picker, self.x_slider):
            control.observe(self._redraw, names="value")
        super().__init__([w.HBox([self.fn_picker, self.x_slider]), self.readout, self.picture])
        self._redraw()

    def __repr__(self) -> str:  # short and stable: shown only where widgets cannot render
        return f"TangentExplorer(f={self.fn_picker.value!r}, x={self.x_slider.value:g})"

    def _redraw(self, _change=None) -> None:
        fn = self.functions[self.fn_picker.value]
        point = tangent(fn, self.x_slider.value)
        xs, ys = curve(fn, self.lo, self.hi)
        fig = new_figure()
        ax = fig.add_subplot()
        ax.plot(xs, ys, label="f(x)")
        ax.plot(xs, point.line(xs), "--", label="tangent at x")
        ax.plot([point.x], [point.value], "o", color="black")
        span = float(ys.max() - ys.min()) or 1.0
        ax.set_ylim(float(ys.min()) - 0.3 * span, float(ys.max()) + 0.3 * span)
        ax.set_xlabel("x")
        ax.legend(loc="upper left")
        ax.grid(alpha=0.3)
        self.picture.value = figure_png(fig)
        self.readout.value = (
            f"x = {point.x:.2f} &nbsp; f(x) = {point.value:.4f} &nbsp; "
            f"<b>f'(x) from autograd = {point.slope:.6f}</b> &nbsp; "
            f"central difference = {point.numerical_slope:.6f}"
        )
