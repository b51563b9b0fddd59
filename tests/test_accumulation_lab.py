"""AccumulationLab: controls redraw through the model; repr stays short and stable."""

import pytest

from autogradlab.models.token_accumulation import sweep
from autogradlab.views import AccumulationLab


def test_initial_state_and_repr():
    lab = AccumulationLab()
    assert repr(lab) == "AccumulationLab(K=4, reduction='mean', spread=0.5, dtype='float32')"
    assert "relative error" in lab.readout.value and lab.picture.value.startswith("<svg")
    assert list(lab.k.options) == [1, 2, 3, 4, 6, 8, 12, 16]


def test_controls_change_the_readout():
    lab = AccumulationLab(reduction="token-mean", dtype="float64")
    assert "factor 1.00" in lab.readout.value
    exact = lab.readout.value
    lab.reduction.value = "mean (no ÷K)"
    assert "factor 4.00" in lab.readout.value
    lab.k.value = 8
    assert "factor 8.00" in lab.readout.value and "K = 8" in lab.readout.value
    lab.reduction.value = "token-mean"
    lab.k.value = 4
    assert lab.readout.value == exact


def test_spread_zero_makes_equal_micro_batches():
    lab = AccumulationLab(spread=0.0, dtype="float64")
    assert "Loss tokens per micro-batch: 192, 192, 192, 192 (window: 768)" in lab.readout.value


def test_results_are_cached_per_setting(monkeypatch):
    import autogradlab.models.token_accumulation as model

    calls = []
    model.cached_sweep.cache_clear()
    monkeypatch.setattr(model, "sweep", lambda *a, **k: calls.append(a) or sweep(*a, **k))
    lab = AccumulationLab()
    lab.k.value = 8
    lab.k.value = 2  # K picks a point of the same sweep
    assert len(calls) == 1
    lab.dtype.value = "bfloat16"
    lab.dtype.value = "float32"
    AccumulationLab()  # a second lab (a re-run cell) reuses the sweeps too
    assert calls == [("mean", 0.5, "float32"), ("mean", 0.5, "bfloat16")]


def test_an_exact_zero_error_sits_on_the_exact_0_line():
    lab = AccumulationLab(accum_steps=1, reduction="sum", dtype="float64")
    assert "relative error 0.00e+00" in lab.readout.value and "exact 0" in lab.picture.value


def test_bad_reduction_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown reduction"):
        AccumulationLab(reduction="median")
