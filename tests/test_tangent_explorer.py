"""TangentExplorer: the slider and the function picker redraw; the picture is an SVG drawn at its own size."""

import pytest

from autogradlab.models.calculus import FUNCTIONS, tangent
from autogradlab.views import TangentExplorer
from autogradlab.views.tangent import HEIGHT, WIDTH


def test_first_draw_and_repr():
    view = TangentExplorer(x=1.0)
    assert view.picture.value.startswith("<svg") and f'width="{WIDTH:.1f}" height="{HEIGHT:.1f}"' in view.picture.value
    assert repr(view) == "TangentExplorer(f='x² · sin(x)', x=1)"
    assert f"{tangent(FUNCTIONS['x² · sin(x)'], 1.0).slope:.6f}" in view.readout.value


def test_slider_and_picker_redraw_and_match_a_fresh_view():
    view = TangentExplorer()
    first = view.picture.value
    view.x_slider.value = -2.0
    assert view.picture.value != first and "x = -2.00" in view.readout.value
    view.fn_picker.value = "relu(x)"
    assert view.picture.value == TangentExplorer(fn="relu(x)", x=-2.0).picture.value


def test_the_relu_kink_shows_autograd_and_the_central_difference_disagree():
    view = TangentExplorer(fn="relu(x)", x=0.0)
    assert (
        "f'(x) from autograd = 0.000000" in view.readout.value and "central difference = 0.500000" in view.readout.value
    )


def test_curve_is_computed_once_per_function():
    view = TangentExplorer()
    for x in (-1.0, 0.5, 2.0):
        view.x_slider.value = x
    assert list(view._curves) == ["x² · sin(x)"]


def test_unknown_function_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown function 'exp.x.': choose one of .*relu"):
        TangentExplorer(fn="exp(x)")
