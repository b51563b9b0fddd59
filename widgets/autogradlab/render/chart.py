"""Small SVG charts for the views: lines, steps, markers, bands, histograms and heatmaps, with axes and legends.

The views draw their pictures with this module instead of rasterising a matplotlib
figure: building the SVG text takes about a millisecond (a PNG of the same plot
takes 50 to 300 ms), the browser draws it at the size shown (sharp at any zoom or
pixel density), and its text is real text. The same chart always gives the same
string. Each panel's data is drawn inside a nested ``<svg>``, which clips it to the
plot area without ids, so many charts can share a page.

>>> chart = Chart(320, 200)
>>> p = chart.panel(50, 30, 250, 130, xlim=(0, 3), ylim=(0, 9))
>>> p.line([0, 1, 2, 3], [0, 1, 4, 9], color=BLUE)
>>> p.axes(xlabel="x", ylabel="x²")
>>> legend_height = chart.legend(50, 4, [("line", BLUE, "x²")])
>>> svg = chart.svg()
>>> svg.startswith("<svg") and svg.count("<path") >= 1 and chart.svg() == svg
True
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterable, Sequence

BLUE, ORANGE, GREEN, RED, PURPLE, GRAY = "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#7f7f7f"
CRIMSON, INK, MUTED, GRID = "#dc143c", "#212529", "#495057", "#e9ecef"
FONT = "system-ui, -apple-system, 'Segoe UI', 'DejaVu Sans', Arial, sans-serif"
FONT_SIZE = 12  # ticks, legends, cell numbers: at least 11 px everywhere
LABEL_SIZE = 13

# ColorBrewer RdBu (11 classes), blue for negative, white at 0, red for positive (matplotlib's RdBu_r).
_DIVERGING = [
    "#053061",
    "#2166ac",
    "#4393c3",
    "#92c5de",
    "#d1e5f0",
    "#f7f7f7",
    "#fddbc7",
    "#f4a582",
    "#d6604d",
    "#b2182b",
    "#67001f",
]
_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def escape(text: str) -> str:
    """Text safe inside SVG/HTML.

    >>> escape("a < b & c")
    'a &lt; b &amp; c'
    """
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def text_width(text: str, size: float = FONT_SIZE) -> float:
    """A generous estimate of the width of ``text`` in a sans-serif font (for layout: legends, margins).

    A wide character (Chinese) is about one em, the others about 0.62 em.
    """
    wide = sum(unicodedata.east_asian_width(c) in "WF" for c in text)
    return 0.62 * size * (len(text) - wide) + size * wide


def number(value: float, digits: int = 3) -> str:
    """A short label for a tick or a cell: ``0.25``, ``1500``, ``1.5e−07``, with true minus signs.

    >>> number(-0.25), number(2.0), number(1500.0), number(1.5e-7)
    ('−0.25', '2', '1500', '1.5e−07')
    """
    if math.isfinite(value) and value == int(value) and abs(value) < 1e6:
        return str(int(value)).replace("-", "−")
    text = f"{value:.{digits}g}"
    return text.replace("-", "−")


def power(base: int, exponent: int) -> str:
    """``10⁻¹⁶`` style label for ``base ** exponent``.

    >>> power(10, -16), power(2, 5)
    ('10⁻¹⁶', '2⁵')
    """
    return f"{base}{str(exponent).translate(_SUPERSCRIPT)}"


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5 or 5 times a power of ten) covering [lo, hi], about ``target`` of them.

    >>> nice_ticks(-3, 3, target=6)
    [-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0]
    >>> nice_ticks(0, 0.9)
    [0.0, 0.2, 0.4, 0.6, 0.8]
    """
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / max(target, 1)
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw * 0.999)
    first = math.ceil(lo / step - 1e-9)
    ticks = []
    k = first
    while k * step <= hi + step * 1e-9:
        ticks.append(round(k * step, 12) + 0.0)
        k += 1
    return ticks


def diverging(value: float, scale: float) -> str:
    """The colour of ``value`` on a symmetric scale: white at 0, full blue at −scale, full red at +scale.

    >>> diverging(0.0, 1.0), diverging(1.0, 1.0), diverging(-5.0, 1.0)
    ('#f7f7f7', '#67001f', '#053061')
    """
    t = 0.0 if scale <= 0 or not math.isfinite(value) else max(-1.0, min(1.0, value / scale))
    pos = (t + 1) / 2 * (len(_DIVERGING) - 1)
    i = min(int(pos), len(_DIVERGING) - 2)
    f = pos - i
    a, b = _DIVERGING[i], _DIVERGING[i + 1]
    rgb = [round(int(a[k : k + 2], 16) * (1 - f) + int(b[k : k + 2], 16) * f) for k in (1, 3, 5)]
    return "#" + "".join(f"{c:02x}" for c in rgb)


def bin_counts(values, edges: Sequence[float]) -> list[int]:
    """How many ``values`` fall in each bin between ``edges`` (for :meth:`Panel.stairs`); values beyond the
    ends count in the end bins, so nothing silently drops out of a histogram.

    >>> bin_counts([0.5, 1.5, 1.7, 99.0], [0, 1, 2, 3])
    [1, 2, 1]
    """
    import numpy as np

    clipped = np.clip(np.asarray(values, dtype=float), edges[0], edges[-1])
    return np.histogram(clipped, bins=np.asarray(edges, dtype=float))[0].tolist()


class Axis:
    """Maps data values to pixels along one side of a panel (linear or logarithmic; y grows downwards)."""

    def __init__(self, lo: float, hi: float, length: float, log: bool = False, flip: bool = False):
        if log and not (lo > 0 and hi > 0):
            raise ValueError(f"a log axis needs positive limits, got {lo}, {hi}")
        self.lo, self.hi, self.length, self.log, self.flip = lo, hi, length, log, flip
        self._a = math.log10(lo) if log else lo
        span = (math.log10(hi) if log else hi) - self._a
        self._k = length / span if span else 0.0

    def __call__(self, value: float) -> float:
        v = (math.log10(value) if value > 0 else -math.inf) if self.log else value
        p = (v - self._a) * self._k
        return self.length - p if self.flip else p


def _f(v: float) -> str:
    return f"{v:.1f}"


class Panel:
    """One plot area: data drawn in data coordinates (clipped), plus its axes, ticks, labels and title."""

    def __init__(
        self,
        left: float,
        top: float,
        width: float,
        height: float,
        xlim: tuple[float, float],
        ylim: tuple[float, float],
        xlog: bool = False,
        ylog: bool = False,
    ):
        self.left, self.top, self.width, self.height = left, top, width, height
        self.x = Axis(*xlim, width, log=xlog)
        self.y = Axis(*ylim, height, log=ylog, flip=True)
        self.grid: list[str] = []
        self.data: list[str] = []
        self.frame: list[str] = []

    # ---------------------------------------------------------------------------- data (clipped)

    def _points(self, xs: Iterable[float], ys: Iterable[float]) -> list[list[tuple[float, float]]]:
        """Pixel points split into runs at non-finite values; far-off points clamped so the SVG stays small."""
        runs, run = [], []
        lim = 10 * (self.width + self.height)
        fx, fy = self.x, self.y
        for x, y in zip(xs, ys):
            px, py = fx(float(x)), fy(float(y))
            if not (math.isfinite(px) and math.isfinite(py)):
                if run:
                    runs.append(run)
                run = []
                continue
            run.append((max(-lim, min(lim, px)), max(-lim, min(lim, py))))
        if run:
            runs.append(run)
        return runs

    def line(
        self,
        xs: Sequence[float],
        ys: Sequence[float],
        color: str = BLUE,
        width: float = 1.8,
        dash: str | None = None,
        step: bool = False,
    ) -> None:
        """A polyline through the points; ``step=True`` holds each value until the next x (a 'post' step plot)."""
        if step:  # only the corners: a flat run of a thousand steps is two points
            sx, sy = [], []
            for x, y in zip(xs, ys):
                if not sy or y != sy[-1]:
                    if sy:
                        sx.append(x)
                        sy.append(sy[-1])
                    sx.append(x)
                    sy.append(y)
            if sx and xs[-1] != sx[-1]:
                sx.append(xs[-1])
                sy.append(sy[-1])
            xs, ys = sx, sy
        style = f' stroke-dasharray="{dash}"' if dash else ""
        for run in self._points(xs, ys):
            coords = [f"{px:.1f},{py:.1f}" for px, py in run]
            kept = [c for i, c in enumerate(coords) if i == 0 or c != coords[i - 1]]
            if len(kept) == 1:
                kept.append(kept[0])
            self.data.append(
                f'<path d="M{"L".join(kept)}" fill="none" stroke="{color}" stroke-width="{width}"'
                f' stroke-linejoin="round"{style}/>'
            )

    def markers(
        self, xs: Sequence[float], ys: Sequence[float], color: str = BLUE, shape: str = "o", size: float = 4.0
    ) -> None:
        """Circles (``"o"``) or crosses (``"x"``) at the points."""
        parts = []
        for run in self._points(xs, ys):
            for px, py in run:
                if shape == "x":
                    parts.append(
                        f"M{_f(px - size)},{_f(py - size)}l{_f(2 * size)},{_f(2 * size)}"
                        f"M{_f(px - size)},{_f(py + size)}l{_f(2 * size)},{_f(-2 * size)}"
                    )
                else:
                    self.data.append(f'<circle cx="{_f(px)}" cy="{_f(py)}" r="{size}" fill="{color}"/>')
        if parts:
            self.data.append(f'<path d="{"".join(parts)}" stroke="{color}" stroke-width="1.6" fill="none"/>')

    def hline(self, y: float, color: str = GRAY, dash: str | None = "5 4", width: float = 1.2) -> None:
        self.line([self.x.lo, self.x.hi], [y, y], color=color, dash=dash, width=width)

    def vband(self, x0: float, x1: float, color: str, opacity: float = 0.15) -> None:
        """A shaded vertical band from x0 to x1 over the whole height."""
        a, b = sorted((self.x(x0), self.x(x1)))
        a, b = max(a, -1.0), min(b, self.width + 1)
        if b > a:
            self.data.append(
                f'<rect x="{_f(a)}" y="0" width="{_f(b - a)}" height="{_f(self.height)}" '
                f'fill="{color}" fill-opacity="{opacity}"/>'
            )

    def stairs(self, counts: Sequence[float], edges: Sequence[float], color: str, opacity: float = 0.8) -> None:
        """A histogram: ``counts[i]`` between ``edges[i]`` and ``edges[i+1]``, filled, as one path."""
        base = self.y(max(self.y.lo, 0.0) if not self.y.log else self.y.lo)
        d = [f"M{_f(self.x(edges[0]))},{_f(base)}"]
        for c, a, b in zip(counts, edges, edges[1:]):
            y = self.y(c) if c > 0 else base
            d.append(f"L{_f(self.x(a))},{_f(y)}L{_f(self.x(b))},{_f(y)}")
        d.append(f"L{_f(self.x(edges[-1]))},{_f(base)}Z")
        self.data.append(f'<path d="{"".join(d)}" fill="{color}" fill-opacity="{opacity}" stroke="none"/>')

    def label(
        self,
        x: float,
        y: float,
        text: str,
        color: str = INK,
        anchor: str = "start",
        dx: float = 0,
        dy: float = 0,
        size: float = FONT_SIZE,
        weight: str = "normal",
    ) -> None:
        """Text at a data position (kept inside the plot area)."""
        px = min(max(self.x(x) + dx, 2), self.width - 2)
        py = min(max(self.y(y) + dy, size), self.height - 3)
        self.data.append(_text(px, py, text, color=color, anchor=anchor, size=size, weight=weight))

    def note(self, text: str, color: str = MUTED) -> None:
        """A message in the middle of the plot area (e.g. why there is nothing to draw)."""
        self.data.append(_text(self.width / 2, self.height / 2, text, color=color, anchor="middle", size=LABEL_SIZE))

    def heatmap(self, values: Sequence[Sequence[float]], scale: float, annotate=None, dead_zone: float = 0.0) -> None:
        """Cells coloured on the symmetric ``scale`` (row 0 at the top; xlim/ylim should be the column/row counts).

        ``annotate(value) -> str`` writes a number in each cell (white on dark cells); values with
        ``|value| <= dead_zone`` are coloured exactly as 0.
        """
        rows, cols = len(values), len(values[0]) if len(values) else 0
        cw, ch = self.width / max(cols, 1), self.height / max(rows, 1)
        cells, texts = [], []
        for i, row in enumerate(values):
            for j, v in enumerate(row):
                v = float(v)
                shade = 0.0 if abs(v) <= dead_zone else v
                cells.append(
                    f'<rect x="{_f(j * cw)}" y="{_f(i * ch)}" width="{_f(cw)}" height="{_f(ch)}" '
                    f'fill="{diverging(shade, scale)}"/>'
                )
                if annotate is not None:
                    dark = scale > 0 and abs(v) > 0.6 * scale
                    texts.append(
                        _text(
                            j * cw + cw / 2,
                            i * ch + ch / 2 + 4,
                            annotate(v),
                            anchor="middle",
                            color="#ffffff" if dark else INK,
                        )
                    )
        # hairlines between cells: neighbouring white (zero) cells stay apart
        lines = [f"M{_f(j * cw)},0V{_f(rows * ch)}" for j in range(1, cols)] + [
            f"M0,{_f(i * ch)}H{_f(cols * cw)}" for i in range(1, rows)
        ]
        grid = [f'<path d="{"".join(lines)}" stroke="#dee2e6" stroke-width="1"/>'] if lines else []
        self.data.extend(cells + grid + texts)

    # ---------------------------------------------------------------------------- frame (not clipped)

    def axes(
        self,
        xlabel: str = "",
        ylabel: str = "",
        title: str = "",
        xticks=None,
        yticks=None,
        grid: bool = True,
        box: bool = True,
    ) -> None:
        """Frame, ticks with labels, grid lines, axis labels and title.

        ``xticks``/``yticks``: a list of values or of (value, label) pairs; default: round values.
        """
        xt = _ticks(xticks, self.x, max(3, int(self.width // 70)))
        yt = _ticks(yticks, self.y, max(3, int(self.height // 45)))
        out = self.frame
        lines = [f"M{_f(self.x(v))},0V{_f(self.height)}" for v, _ in xt] + [
            f"M0,{_f(self.y(v))}H{_f(self.width)}" for v, _ in yt
        ]
        if grid and lines:
            self.grid.append(f'<path d="{"".join(lines)}" stroke="{GRID}" stroke-width="1"/>')
        if box:
            out.append(
                f'<rect x="0" y="0" width="{_f(self.width)}" height="{_f(self.height)}" fill="none" '
                f'stroke="#adb5bd" stroke-width="1"/>'
            )
        for v, text in xt:
            out.append(_text(self.x(v), self.height + 15, text, anchor="middle", color=MUTED))
        for v, text in yt:
            out.append(_text(-5, self.y(v) + 4, text, anchor="end", color=MUTED))
        if xlabel:
            out.append(_text(self.width / 2, self.height + 33, xlabel, anchor="middle", size=LABEL_SIZE))
        if ylabel:
            widest = max((text_width(t) for _, t in yt), default=0.0)
            x = -widest - 14
            out.append(
                f'<text transform="translate({_f(x)},{_f(self.height / 2)}) rotate(-90)" text-anchor="middle" '
                f'font-size="{LABEL_SIZE}" fill="{INK}">{escape(ylabel)}</text>'
            )
        if title:
            out.append(_text(self.width / 2, -8, title, anchor="middle", size=LABEL_SIZE, weight="600"))

    def svg(self) -> str:
        return (
            f'<g transform="translate({_f(self.left)},{_f(self.top)})">'
            f'{"".join(self.grid)}<svg x="0" y="0" width="{_f(self.width)}" height="{_f(self.height)}">{"".join(self.data)}</svg>'
            f"{''.join(self.frame)}</g>"
        )


def _ticks(ticks, axis: Axis, target: int) -> list[tuple[float, str]]:
    if ticks is None:
        ticks = nice_ticks(min(axis.lo, axis.hi), max(axis.lo, axis.hi), target)
    out = []
    for t in ticks:
        value, text = t if isinstance(t, tuple) else (t, number(t))
        if min(axis.lo, axis.hi) - 1e-9 <= value <= max(axis.lo, axis.hi) + 1e-9:
            out.append((value, text))
    return out


def _text(
    x: float,
    y: float,
    text: str,
    color: str = INK,
    anchor: str = "start",
    size: float = FONT_SIZE,
    weight: str = "normal",
) -> str:
    extra = f' font-weight="{weight}"' if weight != "normal" else ""
    anchor_attr = f' text-anchor="{anchor}"' if anchor != "start" else ""
    size_attr = f' font-size="{size}"' if size != FONT_SIZE else ""
    return f'<text x="{_f(x)}" y="{_f(y)}" fill="{color}"{anchor_attr}{size_attr}{extra}>{escape(text)}</text>'


class Chart:
    """An SVG picture of a fixed pixel size holding panels, legends and free text."""

    def __init__(self, width: float, height: float):
        self.width, self.height = width, height
        self.panels: list[Panel] = []
        self.extra: list[str] = []

    def panel(self, left: float, top: float, width: float, height: float, **limits) -> Panel:
        """Add a plot area at pixel position (left, top); ``limits``: xlim, ylim, xlog, ylog."""
        p = Panel(left, top, width, height, **limits)
        self.panels.append(p)
        return p

    def text(self, x: float, y: float, text: str, **style) -> None:
        self.extra.append(_text(x, y, text, **style))

    def legend(self, x: float, y: float, items: Sequence[tuple], width: float | None = None) -> float:
        """Legend entries in a row starting at (x, y), wrapping at ``width``; returns the height used.

        Each item: ``("line", color, text[, dash])``, ``("marker", color, text, "o"|"x")`` or
        ``("patch", color, text[, opacity])``.
        """
        width = width or self.width - x
        cx, cy, row_h = x, y, 18
        for item in items:
            kind, color, text = item[:3]
            item_w = 26 + text_width(text) + 16
            if cx > x and cx + item_w > x + width:
                cx, cy = x, cy + row_h
            mid = cy + 9
            if kind == "line":
                dash = f' stroke-dasharray="{item[3]}"' if len(item) > 3 and item[3] else ""
                self.extra.append(f'<path d="M{_f(cx)},{_f(mid)}h20" stroke="{color}" stroke-width="2"{dash}/>')
            elif kind == "marker":
                if len(item) > 3 and item[3] == "x":
                    self.extra.append(
                        f'<path d="M{_f(cx + 6)},{_f(mid - 4)}l8,8M{_f(cx + 6)},{_f(mid + 4)}l8,-8" '
                        f'stroke="{color}" stroke-width="1.6"/>'
                    )
                else:
                    self.extra.append(f'<circle cx="{_f(cx + 10)}" cy="{_f(mid)}" r="4.5" fill="{color}"/>')
            else:
                opacity = item[3] if len(item) > 3 else 0.8
                self.extra.append(
                    f'<rect x="{_f(cx + 2)}" y="{_f(mid - 6)}" width="16" height="12" fill="{color}" '
                    f'fill-opacity="{opacity}"/>'
                )
            self.extra.append(_text(cx + 26, mid + 4, text))
            cx += item_w
        return cy + row_h - y

    def colorbar(self, x: float, y: float, width: float, scale: float, label: str, note: str = "") -> None:
        """A horizontal diverging colour bar from −scale to +scale with its 0 in the middle, a label after it
        and an optional muted ``note`` under the label."""
        steps = 24
        for k in range(steps):
            v = -scale + (k + 0.5) * 2 * scale / steps
            self.extra.append(
                f'<rect x="{_f(x + k * width / steps)}" y="{_f(y)}" width="{_f(width / steps + 0.3)}" '
                f'height="10" fill="{diverging(v, scale)}"/>'
            )
        self.extra.append(
            f'<rect x="{_f(x)}" y="{_f(y)}" width="{_f(width)}" height="10" fill="none" stroke="#adb5bd"/>'
        )
        for frac, text, anchor in (
            (0.0, number(-scale, 2), "start"),
            (0.5, "0", "middle"),
            (1.0, number(scale, 2), "end"),
        ):
            self.extra.append(_text(x + frac * width, y + 23, text, anchor=anchor, color=MUTED))
        self.extra.append(_text(x + width + 12, y + 10, label))
        if note:
            self.extra.append(_text(x + width + 12, y + 25, note, color=MUTED))

    def svg(self) -> str:
        """The whole chart as one self-contained ``<svg>`` element, drawn at its own pixel size (or, where the
        output is narrower, scaled down to fit: vector graphics stay sharp)."""
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{_f(self.width)}" height="{_f(self.height)}" '
            f'viewBox="0 0 {_f(self.width)} {_f(self.height)}" font-family="{FONT}" font-size="{FONT_SIZE}" '
            f'style="display:block;max-width:100%;height:auto">'
            + "".join(p.svg() for p in self.panels)
            + "".join(self.extra)
            + "</svg>"
        )
