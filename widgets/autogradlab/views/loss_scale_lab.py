"""LossScaleLab: GradScaler's dynamic loss scale, live: the scale trace, skipped steps, and fp16's range (chapter 08)."""

from __future__ import annotations

import math

import ipywidgets as w
import torch

from autogradlab.i18n import _
from autogradlab.models.loss_scale import (
    FP16_MAX,
    FP16_MIN_NORMAL,
    FP16_MIN_SUBNORMAL,
    example_gradients,
    fp16_fate,
    simulate,
)
from autogradlab.render.chart import BLUE, CRIMSON, GRAY, ORANGE, PURPLE, Chart, bin_counts
from autogradlab.views.common import message_html, never_raises, one_thread, picture, readout
from autogradlab.views.static import StaticFallback

_EDGES = [float(b) for b in range(-50, 22)]  # log₂|g| bins: fp16's whole range and some room on both sides
WIDTH, HEIGHT = 880, 350
_CACHE_SIZE = 64


class LossScaleLab(StaticFallback, w.VBox):
    """Set the scaler's knobs and an overflow rate; see the scale over the run and where the gradients land in fp16.

    A step overflows when an injected overflow hits it (a bad batch, a loss spike)
    or when the largest gradient times the scale is inf in fp16.

    >>> lab = LossScaleLab(steps=300)
    >>> lab.overflow_rate.value = 0.02   # observers re-run the simulation, also outside a browser
    >>> lab.trace.skipped_steps != []
    True
    """

    def __init__(
        self,
        grads: torch.Tensor | None = None,
        steps: int = 2000,
        init_scale_log2: int = 16,
        growth_interval: int = 100,
        backoff_factor: float = 0.5,
        overflow_rate: float = 0.0,
        seed: int = 0,
    ):
        with one_thread():
            grads = example_gradients() if grads is None else grads.detach().abs().reshape(-1)
        self.grads = grads[grads > 0].double()
        if self.grads.numel() == 0:
            raise ValueError("LossScaleLab needs at least one nonzero gradient magnitude")
        self.log2_grads = torch.log2(self.grads)
        self.steps, self.seed = int(steps), seed
        # Results that no control changes, computed once: the unscaled fate and histogram, the largest gradient.
        with one_thread():
            self._unscaled = fp16_fate(self.grads, 1.0)
        self._log2_list = self.log2_grads.tolist()
        self._unscaled_counts = bin_counts(self._log2_list, _EDGES)
        self._grad_max = float(self.grads.max())
        self._traces: dict[tuple, object] = {}
        style = {"description_width": "initial"}
        self.init_scale = w.IntSlider(
            value=init_scale_log2, min=0, max=32, description=_("initial scale 2^"), style=style
        )
        self.growth_interval = w.IntSlider(
            value=growth_interval, min=1, max=2000, description=_("growth interval"), style=style
        )
        self.backoff = w.FloatSlider(
            value=backoff_factor, min=0.1, max=0.9, step=0.05, description=_("backoff factor"), style=style
        )
        self.overflow_rate = w.FloatSlider(
            value=overflow_rate,
            min=0.0,
            max=0.05,
            step=0.001,
            readout_format=".3f",
            description=_("injected overflow rate"),
            style=style,
        )
        self.message = w.HTML()
        self.readout = w.HTML()
        self.picture = picture()
        self.trace = None
        for control in (self.init_scale, self.growth_interval, self.backoff, self.overflow_rate):
            control.observe(self._redraw, names="value")
        super().__init__(
            [
                w.HBox([self.init_scale, self.growth_interval]),
                w.HBox([self.backoff, self.overflow_rate]),
                self.message,
                self.readout,
                self.picture,
            ]
        )
        self._redraw()

    def __repr__(self) -> str:  # short and stable: shown only where widgets cannot render
        return (
            f"LossScaleLab(init_scale=2**{self.init_scale.value}, growth_interval={self.growth_interval.value}, "
            f"backoff={self.backoff.value:g}, overflow_rate={self.overflow_rate.value:g})"
        )

    def _simulate(self):
        key = (self.init_scale.value, self.growth_interval.value, self.backoff.value, self.overflow_rate.value)
        if key not in self._traces:
            if len(self._traces) >= _CACHE_SIZE:
                self._traces.pop(next(iter(self._traces)))
            self._traces[key] = simulate(
                self.steps,
                init_scale=2.0**self.init_scale.value,
                growth_interval=self.growth_interval.value,
                backoff_factor=self.backoff.value,
                overflow_rate=self.overflow_rate.value,
                grad_max=self._grad_max,
                seed=self.seed,
            )
        return self._traces[key]

    @never_raises
    def _redraw(self, _change=None) -> None:
        try:
            with one_thread():
                self.trace = trace = self._simulate()
        except ValueError as exc:  # shown in the view, never as a traceback
            self.trace = None
            self.message.value = message_html(_("Cannot simulate: {error}").format(error=exc))
            self.picture.value = self.readout.value = ""
            return
        skipped = trace.skipped_steps
        zero_at = next((i for i, s in enumerate(trace.scales) if s == 0.0), None)
        if zero_at is None and trace.final_scale == 0.0:
            zero_at = len(trace.scales)
        if zero_at is not None:
            self.message.value = message_html(
                _(
                    "The scale fell to 0 at step {step}: float32 cannot hold a scale below about 2^−149, so repeated "
                    "backoffs by {backoff:g} rounded it to 0, and 0 × growth factor stays 0. From there on every "
                    "scaled gradient is 0: nothing left to show on the right. Raise the backoff factor or lower the "
                    "overflow rate."
                ).format(step=zero_at, backoff=self.backoff.value)
            )
            final = fp16_fate(self.grads, 0.0)
            scale_text = _("<b>0</b> (underflowed)")
        else:
            self.message.value = ""
            final = fp16_fate(self.grads, trace.final_scale)
            scale_text = f"<b>2^{math.log2(trace.final_scale):.4g}</b>"
        self.readout.value = readout(
            _("skipped <b>{skipped}</b> of {steps} steps").format(skipped=len(skipped), steps=self.steps),
            _("final scale {scale}").format(scale=scale_text),
            _("at the final scale <b>{zero:.1f}%</b> of gradients flush to 0, {subnormal:.1f}% are subnormal").format(
                zero=100 * final["zero"], subnormal=100 * final["subnormal"]
            ),
            _("without scaling {zero:.1f}% flush to 0").format(zero=100 * self._unscaled["zero"]),
        )
        self.picture.value = self._draw(trace, zero_at)

    def _draw(self, trace, zero_at: int | None) -> str:
        chart = Chart(WIDTH, HEIGHT)
        skipped = trace.skipped_steps
        scales = trace.scales[:zero_at] if zero_at is not None else trace.scales
        logs = [math.log2(s) for s in scales] or [0.0]  # scales[0] ≥ 2⁰: a zero comes only after a backoff
        lo, hi = min(logs), max(logs)
        pad = max(1.0, 0.08 * (hi - lo))
        n = len(trace.scales)
        left = chart.panel(66, 64, 360, 226, xlim=(0, max(n - 1, 1)), ylim=(lo - pad, hi + pad))
        chart.legend(
            66,
            4,
            [
                ("line", BLUE, _("scale used by the step")),
                ("marker", CRIMSON, _("skipped step ({count})").format(count=len(skipped)), "x"),
            ],
            width=360,
        )
        steps = list(range(len(scales)))
        left.line(steps, logs, color=BLUE, step=True)
        shown = [i for i in skipped if zero_at is None or i < zero_at]
        left.markers(shown, [logs[i] for i in shown], color=CRIMSON, shape="x", size=3.5)
        if zero_at is not None:
            x = min(zero_at, n - 1)
            left.line([x - 1, x, x], [logs[-1], logs[-1], lo - 2 * pad], color=CRIMSON, width=2)
            left.label(
                x,
                lo - pad / 2,
                _("scale = 0 from step {step}").format(step=zero_at),
                color=CRIMSON,
                anchor="end",
                dx=-6,
                weight="600",
            )
        left.axes(xlabel=_("step"), ylabel=_("log₂ scale"), title=_("the loss scale over the run"))

        right_items = [
            ("patch", CRIMSON, _("flushed to 0"), 0.15),
            ("patch", ORANGE, _("subnormal"), 0.2),
            ("patch", PURPLE, "inf", 0.15),
            ("patch", GRAY, _("|g| (scale 1)"), 0.4),
            ("patch", BLUE, _("|g| × final scale"), 0.8),
        ]
        shift = math.log2(trace.final_scale) if trace.final_scale > 0 else None
        counts = bin_counts([v + shift for v in self._log2_list], _EDGES) if shift is not None else []
        top = 1.1 * max(self._unscaled_counts + counts)
        right = chart.panel(504, 64, 360, 226, xlim=(_EDGES[0], _EDGES[-1]), ylim=(0, top))
        chart.legend(504, 4, right_items, width=360)
        zero_edge = math.log2(FP16_MIN_SUBNORMAL) - 1  # below half the smallest subnormal, a value rounds to 0
        right.vband(_EDGES[0], zero_edge, CRIMSON, 0.12)
        right.vband(zero_edge, math.log2(FP16_MIN_NORMAL), ORANGE, 0.15)
        right.vband(math.log2(FP16_MAX), _EDGES[-1], PURPLE, 0.12)
        right.stairs(self._unscaled_counts, _EDGES, GRAY, 0.4)
        if shift is not None:
            right.stairs(counts, _EDGES, BLUE, 0.75)
        else:
            right.note(_("final scale 0: every scaled gradient is 0"))
        x_ticks = [(float(v), str(v).replace("-", "−")) for v in range(-50, 21, 10)]
        right.axes(
            xlabel=_("log₂ |gradient| in fp16"),
            ylabel=_("count"),
            xticks=x_ticks,
            title=_("where |g| lands in fp16 at the final scale"),
        )
        return chart.svg()
