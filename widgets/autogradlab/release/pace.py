"""How long a chapter takes a learner: one stated rule, so every chapter's estimate is computed the same way.

A learner reads the prose at about 130 words a minute (technical text with formulas),
spends about a minute on each demo cell (predict, run, read the output), and spends on
each exercise the minutes its heading states, e.g. ``### Exercise 2 — the VJP of
softmax (about 15 min)``. The first cell states the total, rounded to 5 minutes:
``*Estimated time: about 45 minutes.*``; the notebook convention tests hold every
chapter to it, and to at most :data:`MAX_MINUTES`.

``python -m autogradlab.release.pace`` prints the table for solutions/.

>>> import nbformat
>>> nb = nbformat.v4.new_notebook(cells=[
...     nbformat.v4.new_markdown_cell("word " * 260),
...     nbformat.v4.new_code_cell("print(1)"),
...     nbformat.v4.new_markdown_cell("### Exercise 1 — a thing (about 10 min)"),
... ])
>>> estimate(nb).minutes, estimate(nb).rounded
(13.1, 15)
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

WORDS_PER_MINUTE = 130
MINUTES_PER_DEMO_CELL = 1.0
MAX_MINUTES = 75
EXERCISE_MINUTES = re.compile(r"^#+ *Exercise\b.*\(about (\d+) min\)", re.M)
STATED = re.compile(r"Estimated time: about (\d+) minutes")


@dataclass(frozen=True)
class Pace:
    words: int
    demo_cells: int
    exercise_minutes: tuple[int, ...]
    stated: int | None

    @property
    def minutes(self) -> float:
        reading = self.words / WORDS_PER_MINUTE
        return round(reading + self.demo_cells * MINUTES_PER_DEMO_CELL + sum(self.exercise_minutes), 1)

    @property
    def rounded(self) -> int:
        return max(5, 5 * round(self.minutes / 5))


def _is_graded(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return bool(meta.get("solution") or meta.get("grade"))


def estimate(nb) -> Pace:
    """Count what the rule counts in one notebook."""
    words, demo_cells, exercises = 0, 0, []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            words += len(cell.source.split())
            exercises += [int(m) for m in EXERCISE_MINUTES.findall(cell.source)]
        elif cell.cell_type == "code" and not _is_graded(cell) and cell.source.strip():
            demo_cells += 1
    stated = STATED.search(nb.cells[0].source) if nb.cells else None
    return Pace(words, demo_cells, tuple(exercises), int(stated.group(1)) if stated else None)


def main(argv: list[str] | None = None) -> int:
    folder = Path(argv[0] if argv else "solutions")
    print(f"{'chapter':34} {'words':>6} {'demo cells':>10} {'exercises (min)':>22} {'minutes':>8} {'stated':>7}")
    for path in sorted(folder.glob("[0-9][0-9]_*.ipynb")):
        pace = estimate(nbformat.read(path, as_version=4))
        ex = "+".join(map(str, pace.exercise_minutes)) or "-"
        print(f"{path.name:34} {pace.words:6} {pace.demo_cells:10} {ex:>22} {pace.minutes:8} {str(pace.stated):>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
