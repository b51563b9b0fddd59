"""A static picture next to every live view, for renderers that cannot run widgets.

A live view shows in JupyterLab, Colab and VS Code through its widget model. Where no kernel or
widget manager runs (a static website, GitHub's preview, nbviewer, a frontend whose widget
version does not match), the notebook shows the next entry of the output's bundle instead.
:class:`StaticFallback` adds that entry: ``text/html`` with the view's current state drawn
from its own children (the HTML and SVG it already shows, each control as ``name: value``).
Frontends that render widgets pick the widget view first and never show it.

A view opts in with one line, the mixin first among its bases::

    class TangentExplorer(StaticFallback, w.VBox): ...

>>> import ipywidgets as w
>>> class Demo(StaticFallback, w.VBox):
...     pass
>>> demo = Demo([w.FloatSlider(value=0.5, description="x"), w.HTML("<svg><circle r='3'/></svg>")])
>>> bundle = demo._repr_mimebundle_()
>>> sorted(bundle)
['application/vnd.jupyter.widget-view+json', 'text/html', 'text/plain']
>>> "<svg>" in bundle["text/html"] and "x: 0.5" in bundle["text/html"]
True
"""

from __future__ import annotations

import base64
import html

import ipywidgets as w

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
STATIC_CLASS = "autogradlab-static"  # the wrapper's class: tests and site styles find it by this


def static_html(widget) -> str:
    """The widget's current state as plain HTML (no script, no widget manager needed).

    >>> page = static_html(w.VBox([w.Label("a < b"), w.Checkbox(value=True, description="on")]))
    >>> "a &lt; b" in page and "on: True" in page and "<script" not in page
    True
    """
    style = "display:flex;flex-direction:column;gap:4px;font-family:sans-serif"
    return f'<div class="{STATIC_CLASS}" style="{style}">{_part(widget)}</div>'


def _part(widget) -> str:
    if isinstance(widget, w.Box):
        direction = "row" if isinstance(widget, w.HBox) else "column"
        inner = "".join(_part(child) for child in widget.children)
        return f'<div style="display:flex;flex-direction:{direction};gap:4px">{inner}</div>'
    if isinstance(widget, (w.HTML, w.HTMLMath)):
        return f"<div>{widget.value}</div>"
    if isinstance(widget, w.Label):
        return f"<span>{html.escape(str(widget.value))}</span>"
    if isinstance(widget, w.Output):
        return "".join(_output(o) for o in widget.outputs)
    if isinstance(widget, w.Image):
        data = base64.b64encode(bytes(widget.value)).decode("ascii")
        return f'<img src="data:image/{widget.format};base64,{data}" alt="">'
    if isinstance(widget, w.Button):
        return f'<span class="autogradlab-static-control">[{html.escape(widget.description)}]</span>'
    if hasattr(widget, "value"):  # sliders, dropdowns, checkboxes, text boxes: their current value
        label = getattr(widget, "description", "") or type(widget).__name__
        value = widget.value
        if isinstance(value, float):
            value = f"{value:g}"
        return f'<span class="autogradlab-static-control">{html.escape(label)}: {html.escape(str(value))}</span>'
    return ""


def _output(output: dict) -> str:
    data = output.get("data", {})
    if "image/svg+xml" in data:
        return data["image/svg+xml"]
    if "image/png" in data:
        return f'<img src="data:image/png;base64,{data["image/png"]}" alt="">'
    if "text/html" in data:
        return data["text/html"]
    text = data.get("text/plain") or output.get("text", "")
    return f"<pre>{html.escape(text)}</pre>" if text else ""


class StaticFallback:
    """Mixin for a view (an ipywidgets Box): its output bundle also carries a static ``text/html``."""

    def _repr_mimebundle_(self, **kwargs):
        base = getattr(super(), "_repr_mimebundle_", None)
        bundle = dict(base(**kwargs) or {}) if base is not None else {}
        if WIDGET_VIEW not in bundle:  # ipywidgets 7 builds its bundle in _ipython_display_
            bundle["text/plain"] = repr(self)
            bundle[WIDGET_VIEW] = {"version_major": 2, "version_minor": 0, "model_id": self._model_id}
        bundle["text/html"] = static_html(self)
        return bundle

    if hasattr(w.DOMWidget, "_ipython_display_"):  # ipywidgets 7: IPython calls this before any repr

        def _ipython_display_(self, **kwargs):
            from IPython.display import display

            display(self._repr_mimebundle_(), raw=True)
            self._handle_displayed(**kwargs)
