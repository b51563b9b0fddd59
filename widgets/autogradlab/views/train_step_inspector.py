"""TrainStepInspector: run a train_step line by line and see which of the six states each line changes (chapter 06)."""

from __future__ import annotations

import html

import ipywidgets as w

from autogradlab.i18n import _
from autogradlab.models.train_state import STATE_TITLES, StepSession
from autogradlab.views.common import PICTURE_CLASS
from autogradlab.views.static import StaticFallback

_CHANGED = "background:#ffe58a;font-weight:600"
_CELL = "padding:2px 8px;line-height:1.4;white-space:nowrap;border-bottom:1px solid #ddd;text-align:left;font-family:monospace;font-size:12px"


class TrainStepInspector(StaticFallback, w.VBox):
    """Step through a ``train_step`` on a small model; changed state cells are highlighted.

    ``step``: your own function (arguments named from ``model, batch, optimizer,
    loss_fn``); ``setup``: a function returning those objects (default: a small MLP
    with Dropout and Adam, fresh on every reset).

    >>> view = TrainStepInspector()
    >>> view.next_button.click()
    >>> view.session.changed
    ['mode']
    """

    def __init__(self, step=None, setup=None):
        self.next_button = w.Button(description=_("Next line ▶"), button_style="primary")
        self.run_button = w.Button(description=_("Run to end"))
        self.reset_button = w.Button(description=_("Reset ↺"))
        self.listing = w.HTML()
        self.status = w.HTML()
        self.table = w.HTML()
        self.table.add_class(PICTURE_CLASS)
        self.next_button.on_click(self._next)
        self.run_button.on_click(self._run)
        self.reset_button.on_click(self._reset)
        self.session: StepSession | None = None
        self._name = getattr(step, "__name__", "train_step")
        try:
            self.session = StepSession(step, setup)
        except (TypeError, ValueError) as exc:  # a bad learner function: say so in the view
            self.status.value = _message(
                _("Cannot step through {name}: {error}").format(
                    name=html.escape(self._name), error=html.escape(str(exc))
                ),
                error=True,
            )
        controls = w.HBox([self.next_button, self.run_button, self.reset_button])
        self.table.layout.margin = "0 0 0 16px"
        body = w.HBox([self.listing, self.table], layout=w.Layout(align_items="flex-start", flex_flow="row wrap"))
        super().__init__([controls, self.status, body])
        self._redraw()

    def __repr__(self) -> str:  # short and stable: shown only where widgets cannot render
        total = len(self.session.lines) if self.session else 0
        position = self.session.stepper.position if self.session else 0
        return f"TrainStepInspector(step={self._name!r}, line={position}/{total})"

    def _next(self, _button=None) -> None:
        if self.session and not self.session.done:
            self.session.next()
        self._redraw()

    def _run(self, _button=None) -> None:
        if self.session:
            self.session.run()
        self._redraw()

    def _reset(self, _button=None) -> None:
        if self.session:
            self.session.reset()
        self._redraw()

    def _redraw(self) -> None:
        session = self.session
        finished = session is None or session.done
        self.next_button.disabled = self.run_button.disabled = finished
        if session is None:
            self.listing.value = self.table.value = ""
            return
        self.listing.value = _listing(session)
        self.table.value = _tables(session)
        if session.error:
            self.status.value = _message(html.escape(session.error), error=True)
        elif not session.history:
            self.status.value = _message(_("Before the first line. Press <b>Next line</b>."))
        else:
            changed = ", ".join(_(STATE_TITLES[s]) for s in session.changed) or _("nothing")
            last = html.escape(session.history[-1].source.splitlines()[0])
            done = _(" &nbsp; (step finished)") if session.done else ""
            self.status.value = _message(
                _("<code>{line}</code> changed: <b>{states}</b>").format(line=last, states=changed) + done
            )


def _message(text: str, error: bool = False) -> str:
    color = "#b00020" if error else "#333"
    return f"<div style='color:{color};font-size:13px;margin:4px 0'>{text}</div>"


def _listing(session: StepSession) -> str:
    rows = []
    ran = len(session.history)
    for i, line in enumerate(session.lines):
        style = "padding:1px 6px;line-height:1.5;white-space:pre;font-family:monospace;font-size:12px"
        if i == ran - 1:
            style += ";background:#ffcdd2" if session.error else ";background:#ffe58a"
        elif i >= ran:
            style += ";color:#888"
        marker = "▶" if i == ran - 1 else " "
        rows.append(f"<div style='{style}'>{marker} {html.escape(line.source)}</div>")
    return f"<div style='border:1px solid #ccc;padding:4px;min-width:330px'>{''.join(rows)}</div>"


def _td(text: str, changed: bool, wrap: bool = False) -> str:
    style = _CELL + (";" + _CHANGED if changed else "") + (";white-space:normal;min-width:200px" if wrap else "")
    return f"<td style='{style}'>{html.escape(text)}</td>"


def _tables(session: StepSession) -> str:
    cells = session.cells()
    whole = [c for c in cells if not c.item]
    head = "".join(f"<th style='{_CELL}'>{t}</th>" for t in (_("state"), _("value")))
    rows = "".join(
        f"<tr><td style='{_CELL}'>{_(STATE_TITLES[c.state])}</td>{_td(c.text, c.changed)}</tr>" for c in whole
    )
    first = f"<table style='border-collapse:collapse;margin-bottom:8px'><tr>{head}</tr>{rows}</table>"
    per = {}
    for c in cells:
        if c.item:
            per.setdefault(c.item, {})[c.state] = c
    states = ("grad", "param", "optimizer")
    head = (
        f"<th style='{_CELL}'>"
        + _("parameter")
        + "</th>"
        + "".join(f"<th style='{_CELL}'>{_(STATE_TITLES[s])}</th>" for s in states)
    )
    rows = "".join(
        f"<tr><td style='{_CELL}'>{html.escape(name)}</td>"
        + "".join(_td(row[s].text, row[s].changed, wrap=s == "optimizer") for s in states)
        + "</tr>"
        for name, row in per.items()
    )
    second = f"<table style='border-collapse:collapse'><tr>{head}</tr>{rows}</table>"
    return first + second
