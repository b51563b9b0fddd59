"""The static fallback of a view (autogradlab.views.static): what a notebook shows before it runs.

Untrusted JupyterLab (every fresh clone) sanitizes ``text/html`` and drops ``<svg>`` elements, leaving
their text as a run-on dump; it keeps ``<img>`` with a ``data:`` source. So the fallback must carry
its pictures as images, its controls as one short line, and nothing a sanitizer would strip.
tests/test_first_open.py checks the result in a real JupyterLab.
"""

from __future__ import annotations

import base64
import importlib
import pkgutil
import re

import ipywidgets as w
import nbformat
import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell
from nbconvert import HTMLExporter

import autogradlab.render as render
import autogradlab.views
from autogradlab.graph import capture
from autogradlab.render import to_svg
from autogradlab.views import AccumulationLab, GraphView, LossScaleLab, TrainStepInspector, VJPExplorer
from autogradlab.views.static import (
    NOTE_CLASS,
    STATIC_CLASS,
    WIDGET_VIEW,
    StaticFallback,
    static_html,
    svgs_as_images,
)
from autogradlab.views.tangent import TangentExplorer

VIEWS = [TangentExplorer, GraphView, VJPExplorer, TrainStepInspector, AccumulationLab, LossScaleLab]  # quick to build


def _every_view() -> list[type]:
    """Every widget class the views package defines (a new view is found without being listed here)."""
    found = []
    for info in pkgutil.iter_modules(autogradlab.views.__path__):
        module = importlib.import_module(f"autogradlab.views.{info.name}")
        found += [
            c
            for c in vars(module).values()
            if isinstance(c, type) and issubclass(c, w.Box) and c.__module__ == module.__name__
        ]
    return found


IMAGE = re.compile(r'<img\b[^>]*\bsrc="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)"')


def _view(cls):
    if cls is GraphView:
        w_ = torch.randn(3, requires_grad=True)
        return GraphView((w_ * w_).sum(), params={"w": w_})
    return cls()


def _text(page: str) -> str:
    """What a reader sees of the HTML: its text, tags removed."""
    return " ".join(re.sub(r"<[^>]+>", " ", page).split())


@pytest.mark.parametrize("view", _every_view(), ids=lambda c: c.__name__)
def test_every_view_carries_a_static_picture(view):
    assert issubclass(view, StaticFallback) and view.__mro__[1] is StaticFallback


@pytest.mark.parametrize("view", VIEWS)
def test_the_picture_survives_a_sanitizer(view):
    """No inline SVG (a sanitizer drops it and leaves its text), no script or style element; images instead."""
    page = _view(view)._repr_mimebundle_()["text/html"]
    assert STATIC_CLASS in page
    assert not re.search(r"<(svg|script|style)\b", page), "an element untrusted JupyterLab strips"
    pictures = IMAGE.findall(page)
    assert pictures or "<table" in page  # TrainStepInspector's picture is its HTML tables
    for data in pictures:
        assert base64.b64decode(data).decode().startswith("<svg")
    text = _text(page)
    assert len(text) < 1200, f"a text dump of {len(text)} characters"
    assert repr(_view(view)).split("(")[0] + "(" not in text  # a picture, not the bare repr


def test_bundle_keeps_the_widget_view_first_and_adds_html():
    view = TangentExplorer(x=0.5)
    bundle = view._repr_mimebundle_()
    assert list(bundle)[:1] == [WIDGET_VIEW] or WIDGET_VIEW in bundle
    assert bundle[WIDGET_VIEW]["model_id"] == view.model_id
    assert bundle["text/plain"] == repr(view)
    page = bundle["text/html"]
    assert NOTE_CLASS in page  # "run the cell to use its controls"
    assert "x: 0.5" in _text(page)  # the slider's state, on the controls line
    assert len(IMAGE.findall(page)) == 1  # the chart


def test_html_follows_the_current_state():
    view = TangentExplorer(x=0.5)
    view.x_slider.value = -1.25
    assert "x: -1.25" in _text(view._repr_mimebundle_()["text/html"])


@pytest.mark.parametrize(
    ("child", "expected"),
    [
        (w.HTML("<b>bold</b>"), "<b>bold</b>"),
        (w.Label("1 < 2"), "1 &lt; 2"),
        (w.IntSlider(value=3, description="n"), "n: 3"),
        (w.IntSlider(value=16, description="scale 2^"), "scale 2^16"),
        (w.Dropdown(options=["relu", "tanh"], value="tanh", description="f(x) ="), "f(x) = tanh"),
        (w.Dropdown(options=[("ReLU", 0), ("tanh", 1)], value=1, description="f"), "f: tanh"),  # the label shown
        (w.Checkbox(value=False, description="shapes"), "shapes: ✗"),
        (w.HBox([w.Label("arrows:"), w.ToggleButtons(options=["forward", "backward"])]), "arrows: forward"),
        (w.HBox([w.HTML("<i>left</i>"), w.HTML("<i>right</i>")]), "flex-direction:row"),
    ],
)
def test_each_kind_of_child_is_drawn(child, expected):
    assert expected in static_html(w.VBox([child]))


def test_buttons_and_hidden_or_empty_controls_are_left_out():
    page = static_html(
        w.VBox(
            [
                w.Button(description="Step ▶"),
                w.IntSlider(value=7, description="hidden", layout=w.Layout(display="none")),
                w.SelectMultiple(options=["a"], description="expand"),
            ]
        )
    )
    assert "Step" not in page and "hidden" not in page and "expand" not in page


def test_svgs_become_images_and_the_rest_stays():
    page = svgs_as_images("<b>a</b><svg width='2'><text>x</text><svg/></svg><i>b</i><svg/>")
    assert page.startswith("<b>a</b><img") and "<i>b</i><img" in page and "<svg" not in page
    assert len(IMAGE.findall(page)) == 2


def test_output_widget_contents_are_drawn():
    out = w.Output()
    out.outputs = (
        {
            "output_type": "display_data",
            "data": {"image/svg+xml": "<svg id='o'></svg>", "text/plain": "x"},
            "metadata": {},
        },
    )
    assert base64.b64decode(IMAGE.findall(static_html(out))[0]).decode().startswith("<svg xmlns=")
    out.outputs = ({"output_type": "stream", "name": "stdout", "text": "a<b"},)
    assert "<pre>a&lt;b</pre>" in static_html(out)


def test_a_graph_shown_in_a_notebook_carries_its_picture_as_html():
    shell = InteractiveShell.instance()
    try:
        render._register_svg_formatter()  # what importing autogradlab.render does in a notebook
        w_ = torch.randn(3, requires_grad=True)
        graph = capture((w_ * w_).sum(), params={"w": w_})
        bundle, _ = shell.display_formatter.format(graph)
    finally:
        InteractiveShell.clear_instance()
    (data,) = IMAGE.findall(bundle["text/html"])
    assert base64.b64decode(data).decode() == to_svg(graph) == bundle["image/svg+xml"]
    assert f'alt="{repr(graph)}"' in bundle["text/html"]


def test_nbconvert_shows_the_picture_when_no_widget_state_is_saved():
    """Without saved widget state nbconvert skips the widget view and renders the next entry: ours."""
    bundle = TangentExplorer(x=0.5)._repr_mimebundle_()
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("TangentExplorer()")
    cell.outputs = [nbformat.v4.new_output("display_data", data=bundle)]
    nb.cells.append(cell)
    body, _ = HTMLExporter().from_notebook_node(nb)
    shown = body.split(STATIC_CLASS, 1)[1]
    assert IMAGE.search(shown)
    assert "TangentExplorer(" not in _text(shown)  # the html, not the plain repr
