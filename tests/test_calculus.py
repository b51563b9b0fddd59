"""Chapter 00's model (autogradlab.models.calculus) and its view (TangentExplorer)."""

import math

import pytest
import torch

from autogradlab.models.calculus import FUNCTIONS, curve, tangent
from autogradlab.views import TangentExplorer


@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("x0", [-2.3, 0.4, 1.7])
def test_autograd_slope_matches_central_difference(name, x0):
    point = tangent(FUNCTIONS[name], x0)
    assert point.slope == pytest.approx(point.numerical_slope, rel=1e-6, abs=1e-6)


def test_tangent_of_known_function():
    point = tangent(lambda x: x**2 * torch.sin(x), 1.0)
    assert point.value == pytest.approx(math.sin(1.0))
    assert point.slope == pytest.approx(2 * math.sin(1.0) + math.cos(1.0))
    assert float(point.line(torch.tensor(1.0))) == pytest.approx(point.value)


def test_curve_builds_no_graph_and_rejects_bad_range():
    xs, ys = curve(torch.tanh, -1, 1, points=11)
    assert xs.shape == ys.shape == (11,) and not ys.requires_grad
    with pytest.raises(ValueError, match="hi > lo"):
        curve(torch.tanh, 1, 1)


def test_view_redraws_when_controls_change():
    view = TangentExplorer(x=0.5)
    first_picture, first_text = view.picture.value, view.readout.value
    assert first_picture.startswith("<svg")
    view.x_slider.value = -1.25
    assert view.picture.value != first_picture and "x = -1.25" in view.readout.value
    view.fn_picker.value = "tanh(x)"
    slope = tangent(torch.tanh, -1.25).slope
    assert f"{slope:.6f}" in view.readout.value and view.readout.value != first_text


def test_view_repr_is_short_and_stable():
    assert repr(TangentExplorer(x=1.0)) == "TangentExplorer(f='x² · sin(x)', x=1)"
