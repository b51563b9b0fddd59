"""LossScaleLab: GradScaler's dynamic loss scale, live: the scale trace, skipped steps, and fp16's range (chapter 08)."""

from __future__ import annotations

import math

import ipywidgets as w
import torch

from autogradlab.models.loss_scale import (
    FP16_MAX,
    FP16_MIN_NORMAL,
    FP16_MIN_SUBNORMAL,
    example_gradients,
    fp16_fate,
    simulate,
)
from autogradlab.views.plots import figure_png, new_figure

_BINS = [float(b) for b in range(-50, 22)]


class LossScaleLab(w.VBox):
    """Set the scaler's knobs and an overflow rate; see the scale over the run and where the gradients land in fp16.

    A step overflows when an injected overflow hits it (a bad batch, a loss spike)
    or when the largest gradient times the scale is inf in fp16.

    >>> lab = LossScaleLab(steps=300)
    >>> lab.overflow_rate.value = 0.02   # observers re-run the simulation, also outside a browser
    >>> lab.trace.skipped_steps != []
    True
    """

    def __init__(self, grads: torch.Tensor | None = None, steps: int = 2000, init_scale_log2: int = 16,
                 growth_interval: int = 100, backoff_factor: float = 0.5, overflow_rate: float = 0.0, seed: int = 0):
        grads = example_gradients() if grads is None else grads.detach().abs().reshape(-1)
        self.grads = grads[grads > 0].double()
        if self.grads.numel() == 0:
            raise ValueError("LossScaleLab needs at least one nonzero gradient magnitude")
        self.log2_grads = torch.log2(self.grads)
        self.steps, self.seed = int(steps), seed
        style = {"description_width": "initial"}
        self.init_scale = w.IntSlider(value=init_scale_log2, min=0, max=32, description="initial scale 2^", style=style, continuous_update=False)
        self.growth_interval = w.IntSlider(value=growth_interval, min=1, max=2000, description="growth interval", style=style, continuous_update=False)
        self.backoff = w.FloatSlider(value=backoff_factor, min=0.1, max=0.9, step=0.05, description="backoff factor", style=style, continuous_update=False)
        self.overflow_rate = w.FloatSlider(value=overflow_rate, min=0.0, max=0.05, step=0.001, readout_format=".3f",
                                           description="injected overflow rate", style=style, continuous_update=False)
        self.readout = w.HTML()
        self.picture = w.Image(format="png")
        self.trace = None
        for control in (self.init_scale, self.growth_interval, self.backoff, self.overflow_rate):
            control.observe(self._redraw, names="value")
        super().__init__([
            w.HBox([self.init_scale, self.growth_interval]),
            w.HBox([self.backoff, self.overflow_rate]),
            self.readout,
            self.picture,
        ])
        self._redraw()

    def __repr__(self) -> str:  # short and stable: shown only where widgets cannot render
        return (f"LossScaleLab(init_scale=2**{self.init_scale.value}, growth_interval={self.growth_interval.value}, "
                f"backoff={self.backoff.value:g}, overflow_rate={self.overflow_rate.value:g})")

    def _redraw(self, _change=None) -> None:
        try:
            self.trace = simulate(
                self.steps, init_scale=2.0 ** self.init_scale.value, growth_interval=self.growth_interval.value,
                backoff_factor=self.backoff.value, overflow_rate=self.overflow_rate.value,
                grad_max=float(self.grads.max()), seed=self.seed,
            )
        except ValueError as exc:  # shown in the view, never as a traceback
            self.readout.value = f"<b>Cannot simulate:</b> {exc}"
            return
        trace = self.trace
        final = fp16_fate(self.grads, trace.final_scale)
        unscaled = fp16_fate(self.grads, 1.0)
        skipped = trace.skipped_steps
        self.readout.value = (
            f"skipped <b>{len(skipped)}</b> of {self.steps} steps &nbsp;·&nbsp; final scale "
            f"<b>2^{math.log2(trace.final_scale):.4g}</b> &nbsp;·&nbsp; at the final scale "
            f"<b>{100 * final['zero']:.1f}%</b> of gradients flush to 0, {100 * final['subnormal']:.1f}% are subnormal "
            f"&nbsp;·&nbsp; without scaling {100 * unscaled['zero']:.1f}% flush to 0"
        )
        self.picture.value = figure_png(self._figure())

    def _figure(self):
        trace = self.trace
        fig = new_figure(9.5, 3.3)
        left, right = fig.subplots(1, 2, width_ratios=[1.2, 1])
        steps = list(range(len(trace.scales)))
        left.step(steps, [math.log2(s) for s in trace.scales], where="post", label="scale used by the step")
        skipped = trace.skipped_steps
        if skipped:
            left.plot(skipped, [math.log2(trace.scales[i]) for i in skipped], "x", color="crimson", ms=5,
                      label=f"skipped step ({len(skipped)})")
        left.set_xlabel("step")
        left.set_ylabel("log₂ scale")
        left.legend(loc="lower right", fontsize=8)
        left.grid(alpha=0.3)

        shifted = (self.log2_grads + math.log2(trace.final_scale)).clamp(_BINS[0], _BINS[-1]).numpy()
        right.axvspan(_BINS[0], math.log2(FP16_MIN_SUBNORMAL) - 1, color="crimson", alpha=0.12, label="flushed to 0")
        right.axvspan(math.log2(FP16_MIN_SUBNORMAL) - 1, math.log2(FP16_MIN_NORMAL), color="orange", alpha=0.15, label="subnormal")
        right.axvspan(math.log2(FP16_MAX), _BINS[-1], color="purple", alpha=0.12, label="inf")
        right.hist(self.log2_grads.clamp(_BINS[0], _BINS[-1]).numpy(), bins=_BINS, color="gray", alpha=0.35, label="|g| (scale 1)")
        right.hist(shifted, bins=_BINS, color="tab:blue", alpha=0.8, label="|g| × final scale")
        right.set_xlabel("log₂ |gradient| in fp16")
        right.set_ylabel("count")
        right.legend(loc="upper left", fontsize=7)
        return fig
