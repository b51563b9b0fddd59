"""What the package needs from the Python it runs in, and the last step of the Colab/Kaggle setup cell.

A chapter's setup cell installs the package with ``pip --no-deps`` (so pip never replaces the platform's
torch, its CUDA build and drivers), then calls :func:`complete`: it installs only the declared
dependencies the runtime lacks or has below their floor (``widgets/pyproject.toml``), never torch,
and says in one visible line what it did and what the runtime lacks (an old torch, no GPU).
Only the standard library at import time: it runs before anything is known to be there.

>>> floor("2.11.0+cu130"), floor("7.7.1"), floor("1.26rc1")
((2, 11, 0), (7, 7, 1), (1, 26))
>>> lacking({"torch": (2, 11), "tqdm": (4, 66)}, {"torch": "2.13.0+cpu", "tqdm": None})
{'tqdm': None}
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from collections.abc import Callable

from autogradlab.i18n import _

NOT_INSTALLED_HERE = ("torch",)  # the platform's build is kept: a replacement is GBs and may lose its GPU


def floor(version: str) -> tuple[int, ...]:
    """The numeric release part of a version string, comparable as a tuple."""
    match = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(part) for part in match.group(0).split(".")) if match else ()


def requirements(package: str = "autogradlab") -> dict[str, tuple[int, ...]]:
    """The package's declared dependencies and their lower bounds (``name>=X`` entries, no markers)."""
    found = {}
    for line in importlib.metadata.requires(package) or ():
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*>=\s*([0-9.]+)", line.strip())
        if match:
            found[match.group(1).lower()] = floor(match.group(2))
    return found


def installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def lacking(needs: dict[str, tuple[int, ...]], have: dict[str, str | None]) -> dict[str, str | None]:
    """The dependencies missing (``None``) or below their floor (the version found), by name."""
    return {name: have[name] for name, need in needs.items() if have[name] is None or floor(have[name]) < need}


def _spec(name: str, need: tuple[int, ...]) -> str:
    return f"{name}>={'.'.join(map(str, need))}"


def complete(pip: Callable[[list[str]], int] | None = None, gpu: Callable[[], bool] | None = None) -> list[str]:
    """Install what the runtime lacks (except torch), print what happened, return the printed lines."""
    needs = requirements()
    have = {name: installed(name) for name in needs}
    missing = lacking(needs, have)
    lines = []
    to_install = [_spec(name, needs[name]) for name in missing if name not in NOT_INSTALLED_HERE]
    if to_install:
        if have.get("torch"):
            to_install.append(f"torch=={have['torch']}")  # pin the platform's torch: pip must not touch it
        run = pip or (lambda args: subprocess.call([sys.executable, "-m", "pip", "install", "--quiet", *args]))
        status = run(to_install)
        what = ", ".join(s for s in to_install if not s.startswith("torch=="))
        lines.append(
            (
                _("Installed what this runtime lacked: {what}.") if status == 0 else _("⚠ Could not install {what}.")
            ).format(what=what)
        )
    if "torch" in missing:
        found = f"torch {missing['torch']}" if missing["torch"] else _("no torch")
        lines.append(
            _(
                "⚠ This runtime has {found}; the course needs {spec}. Chapters may fail. "
                "To upgrade (a download of several GiB): %pip install -U '{spec}', then restart the runtime."
            ).format(found=found, spec=_spec("torch", needs["torch"]))
        )
    else:
        has_gpu = gpu() if gpu else _cuda()
        ready = (
            _("✓ Course package ready, with this runtime's torch {version} and its GPU.")
            if has_gpu
            else _(
                "✓ Course package ready, with this runtime's torch {version} on the CPU "
                "(no GPU here: every chapter runs; for live GPU experiments pick a GPU runtime)."
            )
        )
        lines.append(ready.format(version=have["torch"]))
    for line in lines:
        print(line)
    return lines


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()
