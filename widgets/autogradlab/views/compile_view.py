"""CompileView: eager and compiled side by side, for chapter 11's models and partitioners."""

from __future__ import annotations

import html
from collections.abc import Mapping

import ipywidgets as w

from autogradlab.graph.model import dtype_name, format_shape
from autogradlab.i18n import _
from autogradlab.models.compiled import MODELS, OPTIONS, Comparison, compare
from autogradlab.units import format_bytes
from autogradlab.views.common import message_html, never_raises, picture, readout
from autogradlab.views.static import StaticFallback

_FREE = "color:#868e96"  # a saved tensor that exists anyway (a parameter, the batch, a view of one)
_CELL = "padding:1px 8px;text-align:left;white-space:nowrap"
_RECOMPUTED = (
    "background:#fff3bf;border:1px solid #f08c00;border-radius:3px;padding:0 4px;margin:1px;display:inline-block"
)


class CompileView(StaticFallback, w.VBox):
    """What eager autograd and the compiled forward save for backward, and what the compiled backward recomputes.

    Every model is compiled once per option when the view is built (:func:`autogradlab.models.compiled.compare`,
    cached); the controls only choose which result to draw.

    >>> view = CompileView()
    >>> view.option_picker.value = "default"   # observers redraw, also outside a browser
    >>> "84 KiB" in view.readout.value
    True
    """

    def __init__(
        self,
        comparisons: Mapping[tuple[str, str], Comparison] | None = None,
        model: str = "mlp",
        option: str = "min-cut",
    ):
        self.comparisons = dict(comparisons or {(m, o): compare(m, o) for m in MODELS for o in OPTIONS})
        models = list(dict.fromkeys(m for m, _ in self.comparisons))
        options = list(dict.fromkeys(o for _, o in self.comparisons))
        self.model_picker = w.ToggleButtons(options=[(_(m), m) for m in models], value=model, description=_("model"))
        self.option_picker = w.ToggleButtons(
            options=[(_(o), o) for o in options],
            value=option,
            description=_("compiled"),
            style={"button_width": "auto"},
        )
        self.message = w.HTML()
        self.readout = w.HTML()
        self.picture = picture()
        for control in (self.model_picker, self.option_picker):
            control.observe(self._redraw, names="value")
        super().__init__([self.model_picker, self.option_picker, self.message, self.readout, self.picture])
        self._redraw()

    def __repr__(self) -> str:  # short and stable: shown only where widgets cannot render
        return f"CompileView(model={self.model_picker.value!r}, option={self.option_picker.value!r})"

    @never_raises
    def _redraw(self, _change=None) -> None:
        key = (self.model_picker.value, self.option_picker.value)
        c = self.comparisons.get(key)
        if c is None:
            self.message.value = message_html(
                _("No comparison for {key} was computed.").format(key=html.escape(str(key)))
            )
            self.readout.value = self.picture.value = ""
            return
        self.message.value = ""
        eager_new = sum(1 for r in c.eager if r.source == "new")
        compiled_new = sum(1 for v in c.compiled.saved if v.source == "new")
        self.readout.value = readout(
            _("eager saves <b>{size}</b> ({count} new tensors)").format(
                size=format_bytes(c.eager_bytes), count=eager_new
            ),
            _("compiled saves <b>{size}</b> ({count} new values)").format(
                size=format_bytes(c.compiled_bytes), count=compiled_new
            ),
            _("backward recomputes <b>{count}</b> ops").format(count=len(c.compiled.recomputed)),
            _("matmul FLOPs forward+backward: eager {eager:,}, compiled {compiled:,}").format(
                eager=c.eager_flops, compiled=c.compiled_flops
            ),
        )
        self.picture.value = self._tables(c)

    @staticmethod
    def _tables(c: Comparison) -> str:
        def table(title: str, rows: list[tuple[str, tuple, object, int, str]]) -> str:
            head = "".join(f"<th style='{_CELL}'>{h}</th>" for h in (_("saved"), _("shape"), "dtype", _("bytes"), ""))
            body = "".join(
                f"<tr style='{'' if source == 'new' else _FREE}'>"
                + "".join(
                    f"<td style='{_CELL}'>{html.escape(str(v))}</td>"
                    for v in (name, format_shape(shape), dtype_name(dtype), format_bytes(nbytes), source)
                )
                + "</tr>"
                for name, shape, dtype, nbytes, source in rows
            )
            return f"<div style='margin-right:24px'><b>{title}</b><table>{head}{body}</table></div>"

        eager = [(f"{r.node}.{r.name}", r.shape, r.dtype, r.nbytes, r.source) for r in c.eager]
        compiled = [(v.name, v.shape, v.dtype, v.nbytes, v.source) for v in c.compiled.saved]
        chips = "".join(f"<span style='{_RECOMPUTED}'>{html.escape(op)}</span>" for op in c.compiled.recomputed)
        recomputed = (
            "<div style='margin-top:6px'>"
            + _("<b>recomputed in backward</b> ({count} ops, {flops:,} matmul FLOPs): {chips}").format(
                count=len(c.compiled.recomputed), flops=c.compiled.recomputed_flops, chips=chips or _("nothing")
            )
            + "</div>"
        )
        return (
            "<div style='display:flex;flex-wrap:wrap;align-items:flex-start;font-size:12px'>"
            + table(_("eager: saved by each backward node"), eager)
            + table(
                _("compiled ({option}): saved by the forward graph").format(option=html.escape(_(c.option))), compiled
            )
            + "</div>"
            + recomputed
            + f"<div style='{_FREE};font-size:11px'>"
            + _(
                "grey: a parameter, the input batch or a view of one: memory that exists anyway, not counted in the totals."
            )
            + "</div>"
        )
