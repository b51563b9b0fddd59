"""AccumulationLab: how far the accumulated gradient is from the full-batch gradient, per reduction (chapter 07)."""

from __future__ import annotations

import ipywidgets as w

from autogradlab.models.token_accumulation import DTYPES, REDUCTIONS, micro_batch_tokens, sweep, token_batch, valid_accum_steps
from autogradlab.views.plots import figure_png, new_figure

FLOOR = 1e-17  # an exact zero error is drawn here on the log axis


class AccumulationLab(w.VBox):
    """Pick K, the reduction, the length spread and the dtype; the plots show every K, the marker your K.

    >>> lab = AccumulationLab()
    >>> lab.reduction.value = "mean (no ÷K)"   # observers redraw, also outside a browser
    >>> "factor 4.00" in lab.readout.value
    True
    """

    def __init__(self, accum_steps: int = 4, reduction: str = "mean", spread: float = 0.5, dtype: str = "float32",
                 n_seqs: int = 48):
        if reduction not in REDUCTIONS:
            raise ValueError(f"unknown reduction {reduction!r}: choose one of {', '.join(REDUCTIONS)}")
        self.n_seqs = n_seqs
        self._cache: dict[tuple, list] = {}
        options = valid_accum_steps(n_seqs)
        self.k = w.SelectionSlider(options=options, value=accum_steps if accum_steps in options else options[0],
                                   description="K (micro-batches)", continuous_update=False,
                                   style={"description_width": "initial"})
        self.reduction = w.Dropdown(options=list(REDUCTIONS), value=reduction, description="reduction")
        self.spread = w.FloatSlider(value=spread, min=0.0, max=1.0, step=0.25, description="length spread",
                                    continuous_update=False, style={"description_width": "initial"})
        self.dtype = w.Dropdown(options=list(DTYPES), value=dtype, description="dtype")
        self.readout = w.HTML()
        self.picture = w.Image(format="png")
        for control in (self.k, self.reduction, self.spread, self.dtype):
            control.observe(self._redraw, names="value")
        rows = [w.HBox([self.k, self.spread]), w.HBox([self.reduction, self.dtype])]
        super().__init__([*rows, self.readout, self.picture])
        self._redraw()

    def __repr__(self) -> str:  # short and stable: shown only where widgets cannot render
        return (f"AccumulationLab(K={self.k.value}, reduction={self.reduction.value!r}, "
                f"spread={self.spread.value:g}, dtype={self.dtype.value!r})")

    def _results(self):
        key = (self.reduction.value, self.spread.value, self.dtype.value)
        if key not in self._cache:
            self._cache[key] = sweep(*key, n_seqs=self.n_seqs)
        return self._cache[key]

    def _redraw(self, _change=None) -> None:
        results = self._results()
        current = next(r for r in results if r.accum_steps == self.k.value)
        ks = [r.accum_steps for r in results]
        fig = new_figure(8.5, 3.0)
        left, right = fig.subplots(1, 2)
        left.semilogy(ks, [max(r.relative_error, FLOOR) for r in results], "o-")
        left.semilogy([current.accum_steps], [max(current.relative_error, FLOOR)], "o", color="crimson", markersize=10)
        left.set_xlabel("K (micro-batches per step)")
        left.set_ylabel("‖g_acc − g_full‖ / ‖g_full‖")
        left.set_title("relative error of the accumulated gradient", fontsize=10)
        left.set_ylim(FLOOR / 10, 100)
        right.plot(ks, [r.lr_factor for r in results], "o-")
        right.plot([current.accum_steps], [current.lr_factor], "o", color="crimson", markersize=10)
        right.axhline(1.0, color="gray", linestyle="--", linewidth=1, label="1 (right)")
        right.plot(ks, ks, color="gray", linestyle=":", linewidth=1, label="K (not divided by K)")
        right.set_ylim(0, max(2.0, 1.15 * max(r.lr_factor for r in results)))
        right.legend(loc="upper left", fontsize=8)
        right.set_xlabel("K (micro-batches per step)")
        right.set_ylabel("c in g_acc ≈ c · g_full")
        right.set_title("effective learning-rate factor", fontsize=10)
        for ax in (left, right):
            ax.set_xscale("log", base=2)
            ax.set_xticks(ks, [str(k) for k in ks])
            ax.minorticks_off()
            ax.grid(alpha=0.3)
        self.picture.value = figure_png(fig)
        batch = token_batch(n_seqs=self.n_seqs, spread=self.spread.value)
        tokens = micro_batch_tokens(batch, self.k.value)
        shown = ", ".join(map(str, tokens[:8])) + (", …" if len(tokens) > 8 else "")
        self.readout.value = (
            f"K = {current.accum_steps}, {current.reduction}, {current.dtype}: "
            f"<b>relative error {current.relative_error:.2e}</b>, "
            f"<b>effective learning-rate factor {current.lr_factor:.2f}</b>. "
            f"Loss tokens per micro-batch: {shown} (window: {batch.tokens})."
        )
