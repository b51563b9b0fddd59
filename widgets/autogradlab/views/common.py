"""What the drawn views share: the picture widget, the message line, readouts, and redraws that never raise.

A view's picture is an SVG chart (:mod:`autogradlab.render.chart`) in an ``ipywidgets.HTML``:
drawn at its own pixel size (never stretched), sharp at any zoom, and quick to build
and send. Sliders use ``continuous_update=True``: the front end sends at most one
change at a time and merges the ones that arrive meanwhile (ipywidgets' message
throttle), so a drag shows the last value without a backlog of redraws.

>>> box = picture()
>>> box.value = "<svg></svg>"
>>> readout("a = <b>1</b>", "b = 2")
'<div style="line-height:1.6"><span style="white-space:nowrap">a = <b>1</b></span> &nbsp;·&nbsp; <span style="white-space:nowrap">b = 2</span></div>'
"""

from __future__ import annotations

import contextlib
import functools
import html

import ipywidgets as w
import torch

from autogradlab.i18n import N_, _

ERROR_COLOR = "#b00020"
BUG = N_("This view hit a bug")  # the corner-sweep test looks for it: it must never appear
PICTURE_CLASS = "agl-picture"  # the browser test finds each view's picture by it


def picture() -> w.HTML:
    """The widget a view draws its SVG into: natural size, scrolls sideways if the output is narrower."""
    box = w.HTML(layout=w.Layout(overflow="auto hidden", align_self="flex-start", max_width="100%"))
    box.add_class(PICTURE_CLASS)
    return box


def message_html(text: str, error: bool = True) -> str:
    """A message line (``text`` is HTML)."""
    color = ERROR_COLOR if error else "#333"
    mark = "⚠ " if error else ""
    return f"<div style='color:{color};margin:2px 0'>{mark}{text}</div>"


def readout(*items: str) -> str:
    """Readout items (HTML) separated by dots; each item wraps as a whole, never leaving a lone number behind."""
    spans = " &nbsp;·&nbsp; ".join(f'<span style="white-space:nowrap">{item}</span>' for item in items)
    return f'<div style="line-height:1.6">{spans}</div>'


@contextlib.contextmanager
def one_thread():
    """Run a view's model call on one torch thread, then restore the count.

    The models behind the labs work on tensors of a few thousand elements. With two
    or more threads, each op hands work to an OpenMP team; on a CPU that other
    processes share (a busy laptop, Binder, a classroom server) waiting for that team
    made a 15 ms AccumulationLab sweep take 0.5 s at the median and up to 10 s; on one
    thread it took 30 ms. Results can differ in the last float32 bits from a
    multi-threaded run, as they do between machines.
    """
    threads = torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def never_raises(redraw):
    """Wrap a view's redraw: an unexpected error is shown in the view's message line and the picture is cleared.

    Observers run in the kernel, where a traceback would go to a log the learner never
    sees and leave a stale picture; this way the view says that something failed.
    """

    @functools.wraps(redraw)
    def guarded(self, *args, **kwargs):
        try:
            return redraw(self, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 (shown, never swallowed silently)
            self.message.value = message_html(
                _("{bug}: {error}: {message}. Please report it with the settings above.").format(
                    bug=_(BUG), error=html.escape(type(exc).__name__), message=html.escape(str(exc))
                )
            )
            self.picture.value = ""
            if hasattr(self, "readout"):
                self.readout.value = ""

    return guarded
