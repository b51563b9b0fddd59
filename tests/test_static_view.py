"""The static fallback of a view (autogradlab.views.static): what static renderers show."""

from __future__ import annotations

import ipywidgets as w
import nbformat
import pytest
from nbconvert import HTMLExporter

from autogradlab.views import AccumulationLab, GraphView, LossScaleLab, TrainStepInspector, VJPExplorer
from autogradlab.views.static import STATIC_CLASS, WIDGET_VIEW, StaticFallback, static_html
from autogradlab.views.tangent import TangentExplorer

StaticTangent = TangentExplorer  # every view takes the hook (the mixin first among its bases)


@pytest.mark.parametrize(
    "view", [TangentExplorer, GraphView, VJPExplorer, TrainStepInspector, AccumulationLab, LossScaleLab]
)
def test_every_view_carries_a_static_picture(view):
    assert issubclass(view, StaticFallback) and view.__mro__[1] is StaticFallback


def test_bundle_keeps_the_widget_view_first_and_adds_html():
    view = StaticTangent(x=0.5)
    bundle = view._repr_mimebundle_()
    assert bundle[WIDGET_VIEW]["model_id"] == view.model_id
    assert bundle["text/plain"] == repr(view)
    page = bundle["text/html"]
    assert STATIC_CLASS in page
    assert "<svg" in page or "<img" in page  # the chart the view shows (SVG, or a PNG before the views' SVG charts)
    assert "x: 0.5" in page  # the slider's state
    assert "<script" not in page


def test_html_follows_the_current_state():
    view = StaticTangent(x=0.5)
    view.x_slider.value = -1.25
    assert "x: -1.25" in view._repr_mimebundle_()["text/html"]


@pytest.mark.parametrize(
    ("child", "expected"),
    [
        (w.HTML("<b>bold</b>"), "<b>bold</b>"),
        (w.Label("1 < 2"), "1 &lt; 2"),
        (w.IntSlider(value=3, description="n"), "n: 3"),
        (w.Dropdown(options=["relu", "tanh"], value="tanh", description="f"), "f: tanh"),
        (w.Button(description="Step"), "[Step]"),
        (w.HBox([w.Label("left"), w.Label("right")]), "flex-direction:row"),
    ],
)
def test_each_kind_of_child_is_drawn(child, expected):
    assert expected in static_html(w.VBox([child]))


def test_output_widget_contents_are_drawn():
    out = w.Output()
    out.outputs = (
        {
            "output_type": "display_data",
            "data": {"image/svg+xml": "<svg id='o'></svg>", "text/plain": "x"},
            "metadata": {},
        },
    )
    assert "<svg id='o'></svg>" in static_html(out)
    out.outputs = ({"output_type": "stream", "name": "stdout", "text": "a<b"},)
    assert "<pre>a&lt;b</pre>" in static_html(out)


def test_nbconvert_shows_the_picture_when_no_widget_state_is_saved():
    """Without saved widget state nbconvert skips the widget view and renders the next entry: ours."""
    bundle = StaticTangent(x=0.5)._repr_mimebundle_()
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("TangentExplorer()")
    cell.outputs = [nbformat.v4.new_output("display_data", data=bundle)]
    nb.cells.append(cell)
    body, _ = HTMLExporter().from_notebook_node(nb)
    assert STATIC_CLASS in body and ("<svg" in body or "data:image/png" in body)
    assert "TangentExplorer(" not in body.split(STATIC_CLASS, 1)[1]  # the html, not the plain repr
