"""LossScaleLab (view): controls re-run the simulation and redraw; repr is short; bad input is shown, not raised."""

import torch

from autogradlab.models.loss_scale import scale_trace
from autogradlab.views import LossScaleLab


def test_lab_draws_and_reads_out():
    lab = LossScaleLab(steps=400)
    assert lab.picture.value.startswith("<svg") and lab.message.value == ""
    # each readout item wraps as a whole (issue 17: "flush to 0" wrapped, leaving a lone "0")
    assert '<span style="white-space:nowrap">without scaling' in lab.readout.value
    assert "skipped" in lab.readout.value and "flush to 0" in lab.readout.value
    assert len(lab.trace.scales) == 400


def test_controls_rerun_the_simulation():
    lab = LossScaleLab(steps=400, growth_interval=50)
    first_png, first_trace = lab.picture.value, lab.trace
    assert first_trace.skipped_steps == [] and first_trace.final_scale == 2.0 ** (16 + 8)
    lab.overflow_rate.value = 0.03
    assert lab.trace.skipped_steps and lab.picture.value != first_png
    # the view's trace is the model's rule applied to the same overflow sequence
    expected = scale_trace(lab.trace.overflows, init_scale=2.0**16, growth_interval=50, backoff_factor=0.5)
    assert lab.trace.scales == expected.scales
    lab.init_scale.value = 4
    assert lab.trace.scales[0] == 16.0
    lab.backoff.value = 0.25
    skipped = lab.trace.skipped_steps[0]
    assert lab.trace.scales[skipped + 1] == lab.trace.scales[skipped] * 0.25
    lab.growth_interval.value = 1
    assert f"{lab.trace.final_scale:g}" != ""


def test_large_initial_scale_overflows_naturally():
    grads = torch.tensor([1e-3, 1e-6, 0.5])
    lab = LossScaleLab(grads=grads, steps=50, init_scale_log2=24)
    # 0.5 · 2**17 = 65536 is inf in fp16 (max 65504): the scaler halves from 2**24 until 0.5 · 2**16 = 32768 fits
    assert lab.trace.skipped_steps[:9] == list(range(8)) and lab.trace.scales[8] == 2.0**16


def test_repr_is_short_and_stable():
    assert (
        repr(LossScaleLab(steps=10))
        == "LossScaleLab(init_scale=2**16, growth_interval=100, backoff=0.5, overflow_rate=0)"
    )


def test_needs_nonzero_gradients():
    import pytest

    with pytest.raises(ValueError, match="nonzero"):
        LossScaleLab(grads=torch.zeros(4))


def test_a_scale_that_underflows_to_zero_is_explained_not_raised():
    """Backoff 0.1 with an overflow every 20 steps drives the float32 scale to 0 (issue 17: math.log2(0) raised)."""
    lab = LossScaleLab()
    lab.backoff.value = 0.1
    lab.overflow_rate.value = 0.05
    assert lab.trace.final_scale == 0.0
    zero_at = lab.trace.scales.index(0.0)
    assert f"The scale fell to 0 at step {zero_at}" in lab.message.value
    assert "final scale <b>0</b>" in lab.readout.value and "100.0%</b> of gradients flush to 0" in lab.readout.value
    assert f"scale = 0 from step {zero_at}" in lab.picture.value
    lab.backoff.value = 0.5  # a setting that recovers clears the message
    assert lab.message.value == "" and lab.trace.final_scale > 0


def test_legends_sit_above_the_plots():
    """Legends are drawn in the band above the plot areas, never over the data (issue 17)."""
    import re

    lab = LossScaleLab(steps=300, overflow_rate=0.02)
    svg = lab.picture.value
    plot_tops = [float(y) for y in re.findall(r'<g transform="translate\([\d.]+,([\d.]+)\)"><path', svg)]
    legend_text_y = [
        float(y)
        for y in re.findall(
            r'<text x="[\d.]+" y="([\d.]+)" fill="#212529">(?:scale used|skipped|flushed|subnormal|inf|\|g\|)', svg
        )
    ]
    assert plot_tops and legend_text_y and max(legend_text_y) < min(plot_tops) - 20  # titles sit between
