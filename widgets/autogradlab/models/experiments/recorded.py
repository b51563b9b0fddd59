"""Recorded results: JSON files shipped in the package (``autogradlab/data/``) that say where and when they were measured.

A learner without a GPU sees GPU results recorded on one, labelled with the
device, torch version, date and command from the file's header. The files are
package data, read with :mod:`importlib.resources`, so a chapter finds them from
a wheel install (Colab, Kaggle) as well as from the course checkout.

>>> from autogradlab.models.experiments.recorded import describe
>>> describe({"device_name": "NVIDIA H100", "device": "cuda", "torch": "2.13.0", "date": "2026-01-02T03:04:05+00:00",
...           "command": "python -m autogradlab.models.experiments all --device cuda", "preset": "gpu-large"})
'measured on NVIDIA H100 (cuda) · torch 2.13.0 · 2026-01-02 03:04 UTC · preset gpu-large · `python -m autogradlab.models.experiments all --device cuda`'
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

HEADER_KEYS = ("device", "device_name", "torch", "date", "command")
DATA_PACKAGE = "autogradlab"  # recorded files live in autogradlab/data/ (package data)


def data_dir():
    """The package's data folder, as an importlib.resources Traversable (a Path for a normal install).

    Write a new recording there from a checkout: ``--out widgets/autogradlab/data/gpu_NAME.json``.
    """
    return resources.files(DATA_PACKAGE) / "data"


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
    return (
        f"measured on {header.get('device_name', '?')} ({header.get('device', '?')}) · torch {header.get('torch', '?')} · "
        f"{date} · preset {header.get('preset', '?')} · `{header.get('command', '?')}`"
    )


def load_results(path) -> Recorded:
    """Read a results JSON written by ``python -m autogradlab.models.experiments``; check it has a header.

    ``path`` is a file path or an importlib.resources Traversable.
    """
    path = path if hasattr(path, "read_text") and not isinstance(path, str) else Path(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "header" not in data or "results" not in data:
        raise ValueError(f"{path} is not an experiments results file (needs 'header' and 'results')")
    missing = [k for k in HEADER_KEYS if k not in data["header"]]
    if missing:
        raise ValueError(
            f"{path}: the header lacks {', '.join(missing)}; results must say where and when they were measured"
        )
    return Recorded(path, data["header"], data["results"])


def recorded_files(kind: str = "gpu", folder: str | Path | None = None) -> list:
    """The ``{kind}_*.json`` files in the package's data folder (or ``folder``), sorted by name."""
    folder = Path(folder) if folder is not None else data_dir()
    if not folder.is_dir():
        return []
    return sorted(
        (p for p in folder.iterdir() if p.name.startswith(f"{kind}_") and p.name.endswith(".json")),
        key=lambda p: p.name,
    )


def latest_recorded(kind: str = "gpu", folder: str | Path | None = None) -> Recorded | None:
    """The most recently measured ``{kind}_*.json`` (by the header's date), or None when there is none."""
    found = [load_results(p) for p in recorded_files(kind, folder)]
    return max(found, key=lambda r: str(r.header["date"])) if found else None
