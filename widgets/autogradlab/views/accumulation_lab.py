"""AccumulationLab: how far the accumulated gradient is from the full-batch gradient, per reduction (chapter 07)."""

from __future__ import annotations

import ipywidgets as w

from autogradlab.i18n import _
from autogradlab.models.token_accumulation import (
    DTYPES,
    REDUCTIONS,
    cached_sweep,
    micro_batch_tokens,
    token_batch,
    valid_accum_steps,
)
from autogradlab.render.chart import BLUE, CRIMSON, GRAY, Chart, power
from autogradlab.views.common import message_html, never_raises, one_thread, picture, readout
from autogradlab.views.static import StaticFallback

FLOOR = 1e-18  # an exact zero error is drawn on the log axis here, on the line labelled "exact 0"
WIDTH, HEIGHT = 860, 330


class AccumulationLab(StaticFallback, w.VBox):
    """Pick K, the reduction, the length spread and the dtype; the plots show every K, the marker your K.

    >>> lab = AccumulationLab()
    >>> lab.reduction.value = "mean (no ÷K)"   # observers redraw, also outside a browser
    >>> "factor 4.00" in lab.readout.value
    True
    """

    def __init__(
        self,
        accum_steps: int = 4,
        reduction: str = "mean",
        spread: float = 0.5,
        dtype: str = "float32",
        n_seqs: int = 48,
    ):
        if reduction not in REDUCTIONS:
            raise ValueError(f"unknown reduction {reduction!r}: choose one of {', '.join(REDUCTIONS)}")
        self.n_seqs = n_seqs
        self._tokens: dict[tuple, tuple] = {}  # (spread, K) -> (tokens per micro-batch, window tokens)
        options = valid_accum_steps(n_seqs)
        self.k = w.SelectionSlider(
            options=options,
            value=accum_steps if accum_steps in options else options[0],
            description=_("K (micro-batches)"),
            continuous_update=True,
            style={"description_width": "initial"},
        )
        self.reduction = w.Dropdown(
            options=[(_(r), r) for r in REDUCTIONS], value=reduction, description=_("reduction")
        )
        self.spread = w.FloatSlider(
            value=spread,
            min=0.0,
            max=1.0,
            step=0.25,
            description=_("length spread"),
            continuous_update=True,
            style={"description_width": "initial"},
        )
        self.dtype = w.Dropdown(options=list(DTYPES), value=dtype, description="dtype")
        self.message = w.HTML()
        self.readout = w.HTML()
        self.picture = picture()
        for control in (self.k, self.reduction, self.spread, self.dtype):
            control.observe(self._redraw, names="value")
        rows = [w.HBox([self.k, self.spread]), w.HBox([self.reduction, self.dtype])]
        super().__init__([*rows, self.message, self.readout, self.picture])
        self._redraw()

    def __repr__(self) -> str:  # short and stable: shown only where widgets cannot render
        return (
            f"AccumulationLab(K={self.k.value}, reduction={self.reduction.value!r}, "
            f"spread={self.spread.value:g}, dtype={self.dtype.value!r})"
        )

    def _results(self):
        # the model remembers each sweep: a K move, or a second lab (a re-run cell), reuses it
        return cached_sweep(self.reduction.value, self.spread.value, self.dtype.value, self.n_seqs)

    def _micro_tokens(self) -> tuple[list[int], int]:
        key = (self.spread.value, self.k.value)
        if key not in self._tokens:
            batch = token_batch(n_seqs=self.n_seqs, spread=self.spread.value)
            self._tokens[key] = (micro_batch_tokens(batch, self.k.value), batch.tokens)
        return self._tokens[key]

    @never_raises
    def _redraw(self, _change=None) -> None:
        try:
            with one_thread():
                results = self._results()
                tokens, window = self._micro_tokens()
        except ValueError as exc:  # a setting the model cannot run: say so
            self.message.value = message_html(_("Cannot compute this setting: {error}").format(error=exc))
            self.picture.value = self.readout.value = ""
            return
        current = next(r for r in results if r.accum_steps == self.k.value)
        self.picture.value = self._draw(results, current)
        self.message.value = ""
        shown = ", ".join(map(str, tokens[:8])) + (", …" if len(tokens) > 8 else "")
        self.readout.value = readout(
            f"K = {current.accum_steps}, {_(current.reduction)}, {current.dtype}",
            _("<b>relative error {error:.2e}</b>").format(error=current.relative_error),
            _("<b>effective learning-rate factor {factor:.2f}</b>").format(factor=current.lr_factor),
            _("Loss tokens per micro-batch: {tokens} (window: {window}).").format(tokens=shown, window=window),
        )

    @staticmethod
    def _draw(results, current) -> str:
        ks = [r.accum_steps for r in results]
        chart = Chart(WIDTH, HEIGHT)
        chart.legend(
            80,
            4,
            [
                ("line", BLUE, _("every K")),
                ("marker", CRIMSON, _("your K")),
                ("line", GRAY, _("1 (right)"), "5 4"),
                ("line", GRAY, _("K (not divided by K)"), "2 3"),
            ],
        )
        x_ticks = [(k, str(k)) for k in ks]
        xlim = (ks[0] / 1.25, ks[-1] * 1.25)

        left = chart.panel(80, 56, 310, 214, xlim=xlim, ylim=(FLOOR / 10**1.5, 100.0), xlog=True, ylog=True)
        errors = [max(r.relative_error, FLOOR) for r in results]
        left.line(ks, errors, color=BLUE)
        left.markers(ks, errors, color=BLUE, size=3.5)
        left.markers([current.accum_steps], [max(current.relative_error, FLOOR)], color=CRIMSON, size=6)
        y_ticks = [(FLOOR, _("exact 0"))] + [(10.0**e, power(10, e)) for e in (-15, -10, -5, 0)]
        left.axes(
            xlabel=_("K (micro-batches per step)"),
            ylabel="‖g_acc − g_full‖ / ‖g_full‖",
            title=_("relative error of the accumulated gradient"),
            xticks=x_ticks,
            yticks=y_ticks,
        )

        factors = [r.lr_factor for r in results]
        top = max(2.0, 1.15 * max(factors))
        right = chart.panel(530, 56, 310, 214, xlim=xlim, ylim=(0.0, top), xlog=True)
        right.line(ks, factors, color=BLUE)
        right.markers(ks, factors, color=BLUE, size=3.5)
        right.hline(1.0, color=GRAY, dash="5 4")  # the references on top: the factor may run along either
        right.line(ks, ks, color=GRAY, dash="2 3", width=1.4)
        right.markers([current.accum_steps], [current.lr_factor], color=CRIMSON, size=6)
        right.axes(
            xlabel=_("K (micro-batches per step)"),
            ylabel=_("c in g_acc ≈ c · g_full"),
            title=_("effective learning-rate factor"),
            xticks=x_ticks,
        )
        return chart.svg()
