"""The VJPExplorer view: controls redraw, invalid choices show a message, the repr is stable."""

import re

import pytest

from autogradlab.models.vjp import explore
from autogradlab.views import VJPExplorer


@pytest.fixture(scope="module")
def view():
    return VJPExplorer(op="softmax")


def test_first_draw_shows_jacobian_and_difference(view):
    assert view.picture.value.startswith("<svg")
    assert "Jacobian 6 × 6" in view.readout.value and "max |vᵀJ − autograd|" in view.readout.value
    assert view.message.value == ""


def test_changing_op_resets_shapes_and_shows_its_inputs():
    view = VJPExplorer(op="relu")
    assert view.shape_boxes[1].layout.display == "none" and view.wrt_picker.layout.display == "none"
    view.op_picker.value = "matmul"
    assert [b.value for b in view.shape_boxes] == ["2, 3", "3, 4"]
    assert view.shape_boxes[1].layout.display is None and list(view.wrt_picker.options) == ["X", "W"]
    assert view.dim_picker.layout.display == "none"
    view.wrt_picker.value = "W"
    assert "Jacobian 8 × 12" in view.readout.value
    view.op_picker.value = "sum over a dim"
    assert view.dim_picker.layout.display is None and view.wrt_picker.value == "x"


def test_controls_redraw_and_readout_matches_the_model():
    view = VJPExplorer(op="broadcasting add", wrt="b")
    before = view.picture.value
    view.shape_boxes[1].value = "3, 1"
    assert view.picture.value != before and "b (3, 1)" in view.readout.value
    difference = explore("broadcasting add", [(3, 4), (3, 1)], wrt="b").difference
    assert f"{difference:.1e}" in view.readout.value
    view.v_picker.value = "one-hot"
    assert view.index_box.layout.display is None
    view.index_box.value = 5
    assert "Jacobian 12 × 3" in view.readout.value


@pytest.mark.parametrize(
    "setup, fragment",
    [
        (lambda v: setattr(v.shape_boxes[0], "value", "2, 7"), "between 1 and 6"),
        (lambda v: setattr(v.shape_boxes[0], "value", "two"), "cannot read the shape"),
        (lambda v: setattr(v.dim_picker, "value", 2), "dim=2 does not exist"),
        (lambda v: (setattr(v.v_picker, "value", "one-hot"), setattr(v.index_box, "value", 20)), "one-hot index 20"),
    ],
)
def test_invalid_choices_show_a_message_not_a_traceback(setup, fragment):
    view = VJPExplorer(op="softmax")
    setup(view)
    assert fragment in view.message.value and "⚠" in view.message.value
    assert view.picture.layout.display == "none" and view.readout.value == "" and view.picture.value == ""
    view.v_picker.value = "random"
    view.op_picker.value = "relu"  # a valid choice brings the picture back
    assert view.message.value == "" and view.picture.layout.display is None


def test_mismatched_matmul_names_the_dims():
    view = VJPExplorer(op="matmul")
    view.shape_boxes[1].value = "4, 2"
    assert "X&#x27;s last dim (3)" in view.message.value or "X's last dim (3)" in view.message.value


def test_large_shapes_draw_without_annotations():
    view = VJPExplorer(op="layer norm", shapes=[(4, 6)])
    assert "Jacobian 24 × 24" in view.readout.value


def test_repr_is_short_and_stable(view):
    assert repr(view) == "VJPExplorer(op='softmax', wrt='x', v='random')"
    with pytest.raises(ValueError, match="unknown op"):
        VJPExplorer(op="conv")


def test_zero_vjp_is_drawn_as_zero_not_as_saturated_noise():
    """softmax with v = ones: vᵀJ is rounding noise around 0; it must look like 0 (white, printed ≈0)."""
    from autogradlab.models.vjp import rounding_level
    from autogradlab.render.chart import diverging
    from autogradlab.views.vjp_explorer import ZERO_UP_TO_ROUNDING, colour_scales

    r = explore("softmax", [(2, 3)], v="ones")
    noise = r.vjp_from_jacobian.abs().max().item()
    assert 0 < noise < 1e-15  # the VJP really is nonzero rounding noise here
    _, _, vec_scale = colour_scales(r)
    assert vec_scale >= ZERO_UP_TO_ROUNDING * rounding_level(r) > noise  # the noise is far below full colour
    view = VJPExplorer(op="softmax", v="ones")
    svg = view.picture.value
    assert "≈0" in svg and f"{ZERO_UP_TO_ROUNDING} × vᵀJ" in svg
    # the three VJP rows: 18 cells (2·3 inputs × 3 rows), every one exactly as white as an exact 0
    rows = svg.split(">vᵀJ<")[0].split("</svg>")[-4:-1]
    fills = [f for row in rows for f in re.findall(r'fill="(#[0-9a-f]{6})"/>', row)]
    assert len(fills) == 18 and set(fills) == {diverging(0.0, 1.0)}


def test_colour_scales_are_symmetric_and_keep_real_values_saturated():
    from autogradlab.views.vjp_explorer import colour_scales

    r = explore("matmul", wrt="W", v="ones")
    j_scale, v_scale, vec_scale = colour_scales(r)
    assert j_scale == r.jacobian.abs().max().item() and v_scale == 1.0
    assert vec_scale == r.vjp_from_jacobian.abs().max().item()  # far above rounding: the largest entry is full colour


def test_in_cell_numbers_are_readable():
    view = VJPExplorer(op="softmax")
    sizes = [int(s) for s in re.findall(r'font-size="(\d+)"', view.picture.value)]
    assert 'font-size="12"' in view.picture.value[:400] and min(sizes, default=12) >= 11


@pytest.mark.parametrize("op, shape", [("relu", ""), ("mean over a dim", "1"), ("sum over a dim", "6")])
def test_zero_dim_inputs_and_outputs_draw(op, shape):
    """Found by the corner sweep: a 0-dim input or output made randn(*()) raise inside an observer."""
    view = VJPExplorer(op=op)
    view.shape_boxes[0].value = shape
    assert view.message.value == "" and view.picture.value.startswith("<svg") and "Jacobian 1 ×" in view.readout.value
