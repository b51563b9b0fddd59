"""Write a laid-out scene as one self-contained, deterministic SVG string."""

from __future__ import annotations

import base64
import html

from autogradlab.i18n import _
from autogradlab.render import style
from autogradlab.render.layout import Layout
from autogradlab.render.scene import Box, Scene

MARGIN = 10.0
LEGEND_ROW = 20.0
MIN_LEGEND_WIDTH = 520.0


def _path(points: list[tuple[float, float]], bend: float = 0.0) -> str:
    """Smooth curve through ``points`` (vertical tangents); ``bend`` pulls it sideways (parallel edges)."""
    (x0, y0) = points[0]
    parts = [f"M{x0:.0f},{y0:.0f}"]
    for (ax, ay), (bx, by) in zip(points, points[1:]):
        mid = (ay + by) / 2
        parts.append(f"C{ax + bend:.0f},{mid:.0f} {bx + bend:.0f},{mid:.0f} {bx:.0f},{by:.0f}")
    return "".join(parts)


def _legend(kinds: list[tuple[str, str]], width: float, direction: str) -> tuple[list[str], float]:
    out: list[str] = []
    x, y = 0.0, 0.0
    items = kinds + [
        (
            "arrow",
            _("arrows: gradient flow (backward)") if direction == "backward" else _("arrows: data flow (forward)"),
        )
    ]
    for kind, text in items:
        item_w = 22 + style.text_width(text, small=True) + 14
        if x and x + item_w > width:
            x, y = 0.0, y + LEGEND_ROW
        if kind == "arrow":
            out.append(f'<path class="edge" d="M{x:.0f},{y + 7:.0f}h16" marker-end="url(#agl-arrow)"/>')
        elif kind == "nograd":
            out.append(
                f'<path class="nograd" d="M{x + 16:.0f},{y + 2:.0f}v6h-12"/>'
                f'<circle class="nograd" cx="{x + 2:.0f}" cy="{y + 8:.0f}" r="2"/>'
            )
        elif kind == "shared":
            out.append(f'<text class="sm" x="{x + 2:.0f}" y="{y + 11:.0f}">≡k</text>')
            text = text.split(": ", 1)[1]
        else:
            out.append(f'<rect class="k-{kind}" x="{x:.0f}" y="{y:.0f}" width="16" height="14" rx="3"/>')
        out.append(f'<text class="sm" x="{x + 22:.0f}" y="{y + 11:.0f}">{style.escape(text)}</text>')
        x += item_w
    return out, y + LEGEND_ROW + 8


_RX = {"output": 4, "op": 3, "group": 6}  # leaves are drawn as pills: rx = half the height


def _box(box: Box, cx: float, top: float, out: list[str]) -> None:
    w, h = box.body_w, box.body_h
    left = cx - w / 2
    rx = _RX.get(box.kind, h / 2)
    cls = f"node {box.kind} {box.classes}" if box.classes else f"node {box.kind}"
    esc = style.escape
    out.append(
        f'<g class="{cls}"><title>{esc(box.tooltip)}</title>'
        f'<rect x="{left:.0f}" y="{top:.0f}" width="{w:.0f}" height="{h:.0f}" rx="{rx:.0f}"/>'
    )
    y = top + style.PAD_Y + 11
    first = True
    for line in box.lines:
        out.append(
            f'<text x="{cx:.0f}" y="{y:.0f}">{esc(line)}</text>'
            if first
            else f'<text class="sm" x="{cx:.0f}" y="{y:.0f}">{esc(line)}</text>'
        )
        first = False
        y += style.LINE_H
    if box.badge_lines:
        bx = cx + w / 2 + 6
        by = top
        bw = f"{box.badge_w:.0f}"
        for (text, state), saved in zip(box.badge_lines, box.saved):
            out.append(
                f'<g class="saved {state}"><title>{esc(saved.describe())}</title>'
                f'<rect x="{bx:.0f}" y="{by:.0f}" width="{bw}" height="{style.BADGE_H}" rx="2"/>'
                f'<text class="sm" x="{bx + 5:.0f}" y="{by + 12:.0f}">{esc(text)}</text></g>'
            )
            by += style.BADGE_H + style.BADGE_GAP
    if box.note:
        out.append(f'<text class="sm note e" x="{left - 6:.0f}" y="{top + h / 2 + 4:.0f}">{esc(box.note)}</text>')
    if box.no_grad:
        # A dashed stub from the lower left, ending in an open circle: an input that needs no gradient
        # (None in next_functions). The text sits at the stub's end, so it visibly belongs to this box.
        sx, sy = left + 8, top + h
        out.append(
            f'<path class="nograd" d="M{sx:.0f},{sy:.0f}v8h-9"/>'
            f'<circle class="nograd" cx="{sx - 11:.0f}" cy="{sy + 8:.0f}" r="2"/>'
        )
        if box.stub_text:
            out.append(f'<text class="sm e nogradtext" x="{sx - 16:.0f}" y="{sy + 12:.0f}">{box.stub_text}</text>')
    out.append("</g>")


def write_svg(scene: Scene, layout: Layout, *, direction: str = "backward", legend: bool = True) -> str:
    """The SVG text for ``scene`` placed by ``layout``."""
    width = layout.width + 2 * MARGIN
    head: list[str] = []
    legend_h = 0.0
    if legend:
        kinds = [(kind, _(text)) for kind, text in style.LEGEND]
        if scene.collapsed:
            kinds.append(("group", _("module group (collapsed)")))
        if scene.shared:
            kinds.append(("shared", _("≡k: one storage, held once")))
        if any(b.no_grad for b in scene.boxes):
            kinds.append(("nograd", _("input that needs no grad (None in next_functions)")))
        head, legend_h = _legend(kinds, max(width - 2 * MARGIN, MIN_LEGEND_WIDTH), direction)
        width = max(width, MIN_LEGEND_WIDTH + 2 * MARGIN)
    height = layout.height + legend_h + 2 * MARGIN + 16  # room for no-grad stubs below the last row
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="agl" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}">',
        f"<style>{style.CSS}</style>",
        "<defs>"
        f'<marker id="agl-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        f'orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="{style.EDGE}"/></marker>'
        f'<marker id="agl-arrow-hl" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" '
        f'orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="{style.HIGHLIGHT}"/></marker>'
        "</defs>",
    ]
    if head:
        out.append(f'<g transform="translate({MARGIN:.0f},{MARGIN:.0f})">')
        out.extend(head)
        out.append("</g>")
    out.append(f'<g transform="translate({MARGIN:.0f},{MARGIN + legend_h:.0f})">')
    labels: list[str] = []
    seen: dict[tuple[int, int], int] = {}
    for arrow, route in zip(scene.arrows, layout.routes):
        if not route:
            continue
        repeat = seen[(arrow.src, arrow.dst)] = seen.get((arrow.src, arrow.dst), -1) + 1
        bend = 14.0 * ((repeat + 1) // 2) * (1 if repeat % 2 else -1) if repeat else 0.0
        points = route if direction == "backward" else route[::-1]
        hl = arrow.highlight
        out.append(
            f'<path class="edge{" hl" if hl else ""}" d="{_path(points, bend)}" '
            f'marker-end="url(#agl-arrow{"-hl" if hl else ""})"/>'
        )
        if arrow.label:
            # Near the lower end: edges fan out from one node but arrive at different ones.
            lower = route if route[-1][1] > route[0][1] else route[::-1]
            (ax, ay), (bx, by) = lower[-2], lower[-1]
            lx, ly = ax + 0.7 * (bx - ax) + bend * 0.5, ay + 0.7 * (by - ay)
            labels.append(f'<text class="sm" x="{lx + 4:.0f}" y="{ly:.0f}">{style.escape(arrow.label)}</text>')
    out.extend(labels)
    for box, cx, top in zip(scene.boxes, layout.x, layout.y):
        _box(box, cx, top, out)
    out.append("</g></svg>")
    return "".join(out)


def as_img(svg: str, alt: str = "") -> str:
    """An HTML ``<img>`` showing ``svg`` from a ``data:`` URI: drawn by every renderer and kept by HTML sanitizers.

    Untrusted JupyterLab (every fresh clone) strips inline ``<svg>`` from HTML, leaving its text as a run-on
    dump, and does not render ``image/svg+xml`` outputs at all; it keeps this image.

    >>> as_img("<svg width='4' height='2'></svg>", alt="a <box>")[:60]
    '<img src="data:image/svg+xml;base64,PHN2ZyB4bWxucz0iaHR0cDov'
    >>> 'alt="a &lt;box&gt;"' in as_img("<svg></svg>", alt="a <box>")
    True
    """
    if "xmlns=" not in svg.split(">", 1)[0]:  # an SVG document loaded as an image needs its namespace
        svg = svg.replace("<svg", '<svg xmlns="http://www.w3.org/2000/svg"', 1)
    data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return f'<img src="data:image/svg+xml;base64,{data}" alt="{html.escape(alt)}" style="max-width:100%;height:auto">'
