"""Matplotlib figures as PNG bytes for an ``ipywidgets.Image``.

An Image widget (rather than an Output widget capturing ``plt.show``) redraws in
place, needs no running kernel to test, and never duplicates plots.
"""

from __future__ import annotations

import io

from matplotlib.figure import Figure  # not pyplot: no global state, no backend switching


def new_figure(width: float = 5.5, height: float = 3.2) -> Figure:
    """A figure not registered with pyplot, so it is never shown twice or leaked."""
    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def figure_png(fig: Figure) -> bytes:
    """Render ``fig`` to PNG bytes (deterministic metadata, so the same plot gives the same bytes)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()
