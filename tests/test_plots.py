"""Experiment plots draw from live results and from the same results after a JSON round trip."""

import json

import pytest

from autogradlab.models.experiments import as_record, run_amp, run_checkpoint, run_scaler, run_underflow
from autogradlab.models.experiments.common import json_safe
from autogradlab.views.plots import (
    figure_png,
    new_figure,
    plot_checkpoint,
    plot_fraction_of_peak,
    plot_loss_curves,
    plot_lr_drift,
    plot_scale_trace,
    plot_underflow,
)


@pytest.fixture(scope="module")
def results():
    return {
        "amp": run_amp("cpu", "cpu-small", modes=("fp32", "bf16"), curve_steps=3),
        "underflow": run_underflow("cpu", "cpu-small"),
        "scaler": run_scaler("cpu", "cpu-small", steps=15),
        "checkpoint": run_checkpoint("cpu", "cpu-small", depths=(1, 2), time_runs=False),
    }


PLOTS = [
    (plot_underflow, "underflow"),
    (plot_scale_trace, "scaler"),
    (plot_lr_drift, "scaler"),
    (plot_loss_curves, "amp"),
    (plot_fraction_of_peak, "amp"),
    (plot_checkpoint, "checkpoint"),
]


@pytest.mark.parametrize("plot,name", PLOTS, ids=[p.__name__ for p, _ in PLOTS])
@pytest.mark.parametrize("from_json", [False, True])
def test_plot_draws(results, plot, name, from_json):
    result = results[name]
    if from_json:
        result = json.loads(json.dumps(json_safe(as_record(result))))
    fig = new_figure()
    ax = fig.add_subplot()
    plot(ax, result)
    assert ax.has_data() and figure_png(fig).startswith(b"\x89PNG")


def test_checkpoint_plot_shows_measured_points_when_present(results):
    rec = as_record(results["checkpoint"])
    for row in rec["rows"]:
        row["measured_held_bytes"] = row["predicted_saved_bytes"]
    ax = new_figure().add_subplot()
    plot_checkpoint(ax, rec)
    assert any("measured" in t.get_text() for t in ax.get_legend().get_texts())
