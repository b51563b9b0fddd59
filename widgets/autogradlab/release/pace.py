"""How long a chapter takes a median learner: one stated rule, so every chapter's estimate is computed the same way.

The rule, calibrated against learners (``python -m autogradlab.release.pace`` prints it next to
the walk-through ranges that calibrated it, :data:`LEARNER_MINUTES`):

* prose is read at about 130 words a minute, plus :data:`MINUTES_PER_FORMULA` per inline
  formula and :data:`MINUTES_PER_DISPLAY` per displayed one (dense math is re-read), plus
  :data:`MINUTES_PER_TABLE_ROW` per row of a markdown table;
* each demo cell takes about a minute (run it, read the output), and a cell that answers a
  **Predict** prompt (tag ``answers-prediction``) :data:`MINUTES_PER_PREDICTION` more: the
  learner stops, thinks and writes a guess;
* each exercise takes :data:`EXERCISE_FACTOR` × the minutes its heading states, e.g.
  ``### Exercise 2 — the VJP of softmax (about 15 min)``: headings state what an experienced
  learner needs, and a learner new to the derivation needs longer.

The first cell states the total, rounded to 5 minutes: ``*Estimated time: about 45 minutes.*``;
the notebook convention tests hold every chapter to it, and to at most :data:`MAX_MINUTES`
(a chapter that needs more is trimmed or split).

>>> import nbformat
>>> nb = nbformat.v4.new_notebook(cells=[
...     nbformat.v4.new_markdown_cell("word " * 260 + "$x$ and $y$"),
...     nbformat.v4.new_code_cell("print(1)", metadata={"tags": ["answers-prediction"]}),
...     nbformat.v4.new_markdown_cell("### Exercise 1 — a thing (about 10 min)\\n\\n| a | b |\\n|---|---|\\n| 1 | 2 |"),
... ])
>>> estimate(nb).minutes, estimate(nb).rounded
(17.8, 20)
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

WORDS_PER_MINUTE = 130
MINUTES_PER_FORMULA = 0.05
MINUTES_PER_DISPLAY = 1.0
MINUTES_PER_TABLE_ROW = 0.25
MINUTES_PER_DEMO_CELL = 1.0
MINUTES_PER_PREDICTION = 2.0
EXERCISE_FACTOR = 1.2
MAX_MINUTES = 90

# Walk-through estimates (minutes, low–high) of a median learner, chapters 00–10 as of the round-3
# review (../shared/reviews/errata.md §6, 2026-11): the rule's constants were fitted to these.
LEARNER_MINUTES = {
    "00": (25, 35),
    "01": (110, 150),
    "02": (100, 140),
    "03": (100, 120),
    "04": (100, 120),
    "05": (95, 120),
    "06": (90, 100),
    "07": (100, 110),
    "08": (105, 120),
    "09": (95, 110),
    "10": (70, 85),
}

EXERCISE_MINUTES = re.compile(r"^#+ *Exercise\b.*\(about (\d+) min\)", re.M)
STATED = re.compile(r"Estimated time: about (\d+) minutes")
_DISPLAY = re.compile(r"\$\$.+?\$\$", re.S)
_INLINE = re.compile(r"(?<![\\$])\$[^$\n]+?\$")
_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$", re.M)
_TABLE_RULE = re.compile(r"^\s*\|[\s:|-]+\|\s*$")


@dataclass(frozen=True)
class Pace:
    words: int
    formulas: int
    displays: int
    table_rows: int
    demo_cells: int
    predictions: int
    exercise_minutes: tuple[int, ...]
    stated: int | None

    @property
    def minutes(self) -> float:
        reading = (
            self.words / WORDS_PER_MINUTE
            + self.formulas * MINUTES_PER_FORMULA
            + self.displays * MINUTES_PER_DISPLAY
            + self.table_rows * MINUTES_PER_TABLE_ROW
        )
        running = self.demo_cells * MINUTES_PER_DEMO_CELL + self.predictions * MINUTES_PER_PREDICTION
        return round(reading + running + EXERCISE_FACTOR * sum(self.exercise_minutes), 1)

    @property
    def rounded(self) -> int:
        return max(5, 5 * round(self.minutes / 5))


def _is_graded(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return bool(meta.get("solution") or meta.get("grade"))


def estimate(nb) -> Pace:
    """Count what the rule counts in one notebook."""
    words = formulas = displays = rows = demo_cells = predictions = 0
    exercises: list[int] = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            text = cell.source
            displays += len(_DISPLAY.findall(text))
            text = _DISPLAY.sub(" ", text)
            formulas += len(_INLINE.findall(text))
            words += len(text.split())
            rows += sum(not _TABLE_RULE.match(row) for row in _TABLE_ROW.findall(text))
            exercises += [int(m) for m in EXERCISE_MINUTES.findall(text)]
        elif cell.cell_type == "code" and not _is_graded(cell) and cell.source.strip():
            demo_cells += 1
            predictions += "answers-prediction" in cell.get("metadata", {}).get("tags", [])
    stated = STATED.search(nb.cells[0].source) if nb.cells else None
    return Pace(
        words,
        formulas,
        displays,
        rows,
        demo_cells,
        predictions,
        tuple(exercises),
        int(stated.group(1)) if stated else None,
    )


def main(argv: list[str] | None = None) -> int:
    folder = Path(argv[0] if argv else "solutions")
    header = ("chapter", "words", "formulas", "rows", "cells", "predict", "exercises", "minutes", "stated", "learners")
    print("{:30} {:>6} {:>8} {:>5} {:>6} {:>7} {:>14} {:>8} {:>7} {:>9}".format(*header))
    for path in sorted(folder.glob("[0-9][0-9]_*.ipynb")):
        pace = estimate(nbformat.read(path, as_version=4))
        ex = "+".join(map(str, pace.exercise_minutes)) or "-"
        low_high = LEARNER_MINUTES.get(path.name[:2])
        learners = f"{low_high[0]}–{low_high[1]}" if low_high else "-"
        print(
            f"{path.name[:30]:30} {pace.words:6} {pace.formulas + pace.displays:8} {pace.table_rows:5} "
            f"{pace.demo_cells:6} {pace.predictions:7} {ex:>14} {pace.minutes:8} {str(pace.stated):>7} {learners:>9}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
