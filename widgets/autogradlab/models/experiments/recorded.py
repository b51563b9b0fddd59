"""Recorded results: the JSON files in chapters/data/ that say where and when they were measured.

A learner without a GPU sees GPU results recorded on one, labelled with the
device, torch version, date and command from the file's header.

>>> from autogradlab.models.experiments.recorded import describe
>>> describe({"device_name": "NVIDIA H100", "device": "cuda", "torch": "2.13.0", "date": "2026-01-02T03:04:05+00:00",
...           "command": "python -m autogradlab.models.experiments all --device cuda", "preset": "gpu-large"})
'measured on NVIDIA H100 (cuda) · torch 2.13.0 · 2026-01-02 03:04 UTC · preset gpu-large · `python -m autogradlab.models.experiments all --device cuda`'
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

_REPO = Path(__file__).resolve().parents[3]
HEADER_KEYS = ("device", "device_name", "torch", "date", "command")


def data_dir() -> Path:
    """chapters/data of the course checkout (the package is installed in editable mode from widgets/)."""
    for candidate in (_REPO / "chapters" / "data", Path.cwd() / "data", Path.cwd().parent / "chapters" / "data"):
        if candidate.is_dir():
            return candidate
    return _REPO / "chapters" / "data"


@dataclass
class Recorded:
    """One results file: its path, its header (where/when/how) and the results by experiment name."""

    path: Path
    header: dict
    results: dict

    def describe(self) -> str:
        return describe(self.header)


def describe(header: dict) -> str:
    """One line saying where, when and how results were measured."""
    date = str(header.get("date", "unknown date"))
    if "T" in date:
        day, time = date.split("T", 1)
        date = f"{day} {time[:5]} UTC"
    return (f"measured on {header.get('device_name', '?')} ({header.get('device', '?')}) · torch {header.get('torch', '?')} · "
            f"{date} · preset {header.get('preset', '?')} · `{header.get('command', '?')}`")


def load_results(path: str | Path) -> Recorded:
    """Read a results JSON written by ``python -m autogradlab.models.experiments``; check it has a header."""
    path = Path(path)
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or "header" not in data or "results" not in data:
        raise ValueError(f"{path} is not an experiments results file (needs 'header' and 'results')")
    missing = [k for k in HEADER_KEYS if k not in data["header"]]
    if missing:
        raise ValueError(f"{path}: the header lacks {', '.join(missing)}; results must say where and when they were measured")
    return Recorded(path, data["header"], data["results"])


def recorded_files(kind: str = "gpu", folder: str | Path | None = None) -> list[Path]:
    """The ``{kind}_*.json`` files in chapters/data (or ``folder``), sorted by name."""
    folder = Path(folder) if folder is not None else data_dir()
    return sorted(folder.glob(f"{kind}_*.json")) if folder.is_dir() else []


def latest_recorded(kind: str = "gpu", folder: str | Path | None = None) -> Recorded | None:
    """The most recently measured ``{kind}_*.json`` (by the header's date), or None when there is none."""
    found = [load_results(p) for p in recorded_files(kind, folder)]
    return max(found, key=lambda r: str(r.header["date"])) if found else None
