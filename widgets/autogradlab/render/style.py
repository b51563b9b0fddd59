"""How each kind of thing looks: one palette shared by the SVG writer, the legend and the dot output."""

from __future__ import annotations

import unicodedata

from autogradlab.i18n import N_

FONT = "DejaVu Sans Mono, Menlo, Consolas, monospace"
FONT_SIZE = 12
SMALL_SIZE = 10
CHAR_W = 7.3  # advance of one monospace character at FONT_SIZE (DejaVu Sans Mono: 0.602 em)
SMALL_CHAR_W = 6.1
LINE_H = 14
PAD_X = 8
PAD_Y = 5
BADGE_H = 16
BADGE_GAP = 3

# kind -> (fill, stroke); colours from the open-color palette, readable in light and dark themes.
COLORS = {
    "output": ("#d3f9d8", "#2b8a3e"),
    "op": ("#f1f3f5", "#495057"),
    "param": ("#d0ebff", "#1864ab"),
    "leaf": ("#e5dbff", "#5f3dc4"),
    "group": ("#fff0f6", "#a61e4d"),
    "saved-ok": ("#fff3bf", "#e67700"),
    "saved-stale": ("#ffe3e3", "#c92a2a"),
    "saved-freed": ("#ffffff", "#adb5bd"),
}
EDGE = "#868e96"
HIGHLIGHT = "#e8590c"
VISITED_FILL = "#ffe8cc"
NOTE = "#d9480f"

LEGEND = [  # shown through autogradlab.i18n._ (the legend is drawn in the learner's language)
    ("output", N_("output tensor")),
    ("op", N_("backward op")),
    ("param", N_("parameter (leaf)")),
    ("leaf", N_("other leaf")),
    ("saved-ok", N_("saved tensor")),
    ("saved-stale", N_("stale (changed in place)")),
    ("saved-freed", N_("freed by backward")),
]


def _kind_rules() -> str:
    rules = []
    for kind, (fill, stroke) in COLORS.items():
        if kind.startswith("saved-"):
            rules.append(f".agl .saved.{kind[6:]} > rect, .agl rect.k-{kind} {{ fill: {fill}; stroke: {stroke}; }}")
        else:
            rules.append(f".agl .node.{kind} > rect, .agl rect.k-{kind} {{ fill: {fill}; stroke: {stroke}; }}")
    return "\n".join(rules)


# Colours live in CSS, not on every element: a 5,000-node drawing stays small and quick to write.
CSS = f"""
.agl text {{ font-family: {FONT}; font-size: {FONT_SIZE}px; fill: #212529; }}
.agl .sm {{ font-size: {SMALL_SIZE}px; fill: #495057; }}
.agl .node > text {{ text-anchor: middle; }}
.agl text.e {{ text-anchor: end; }}
.agl .saved > text {{ text-anchor: start; }}
{_kind_rules()}
.agl .node.output > rect {{ stroke-width: 2; }}
.agl .node.group > rect {{ stroke-width: 1.5; stroke-dasharray: 6 3; }}
.agl .saved.freed > rect, .agl rect.k-saved-freed {{ stroke-dasharray: 3 2; }}
.agl .edge {{ fill: none; stroke: {EDGE}; stroke-width: 1.2; }}
.agl .edge.hl {{ stroke: {HIGHLIGHT}; stroke-width: 2; }}
.agl .nograd {{ stroke: #868e96; stroke-width: 1.3; stroke-dasharray: 3 2; fill: none; }}
.agl circle.nograd {{ stroke-dasharray: none; fill: #ffffff; }}
.agl text.nogradtext {{ fill: #868e96; }}
.agl .node.cur > rect {{ stroke: {HIGHLIGHT}; stroke-width: 3; }}
.agl .node.done > rect {{ fill: {VISITED_FILL}; }}
.agl .note {{ fill: {NOTE}; font-weight: bold; }}
.agl .stale text {{ fill: #c92a2a; font-weight: bold; }}
.agl .freed text {{ fill: #868e96; }}
""".strip()


def text_width(text: str, small: bool = False) -> float:
    """The width of ``text`` in the monospace font; a wide (CJK) character takes two columns."""
    return columns(text) * (SMALL_CHAR_W if small else CHAR_W)


def columns(text: str) -> int:
    """How many monospace columns ``text`` takes: two for each wide or full-width character (Chinese), else one.

    >>> columns("saved"), columns("保存的 tensor")
    (5, 13)
    """
    return len(text) + sum(unicodedata.east_asian_width(c) in "WF" for c in text)


def escape(text: str) -> str:
    if "&" not in text and "<" not in text and ">" not in text and '"' not in text:
        return text
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
