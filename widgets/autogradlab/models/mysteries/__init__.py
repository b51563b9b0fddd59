"""The debugging lab's mysteries: training scripts that run without an error and do not do what they should.

Each script is a module of this package (so it ships with it) and a file the learner gets to run
and edit: :func:`unpack` writes ``debug_lab/mystery_N.py`` next to the notebook, :func:`load` imports
an edited copy as a fresh module, :func:`run_script` runs one as ``python mystery_N.py`` would.
:func:`original` and :func:`fixed` are the shipped script and the healthy reference (the shipped
text with the casebook's fix applied), which the checkers compare the learner's file with
(:mod:`.record`).

>>> script = fixed(4)
>>> script.Config().epochs, type(script.Trainer(script.Config()).optimizer).__name__
(6, 'Adam')
"""

from __future__ import annotations

import importlib
import sys
from functools import cache
from importlib import resources
from pathlib import Path
from types import ModuleType

from autogradlab.models.mysteries.casebook import MYSTERIES, Mystery
from autogradlab.models.mysteries.record import Recording, digest, record

FOLDER = "debug_lab"


def source(number: int) -> str:
    """The text of mystery ``number``'s script, as shipped."""
    return resources.files(__name__).joinpath(f"{MYSTERIES[number].module}.py").read_text()


def unpack(number: int, folder: str | Path = FOLDER, fresh: bool = False) -> Path:
    """Write mystery ``number`` to ``folder/mystery_N.py`` (unless an edited copy is there) and return its path.

    The folder gets a ``.gitignore`` of ``*``, so a course checkout stays clean.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    ignore = folder / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n")
    path = folder / f"mystery_{number}.py"
    shipped = source(number)
    if fresh or not path.exists():
        path.write_text(shipped)
    kept = path.read_text() != shipped
    note = "; your edited copy is kept (unpack(..., fresh=True) restores the original)" if kept else ""
    print(f"{path.as_posix()}: {len(shipped.splitlines())} lines{note}")
    return path


def _module(text: str, filename: str, name: str) -> ModuleType:
    """Execute ``text`` as a new module (registered while it runs: dataclasses look their module up)."""
    module = ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module
    try:
        exec(compile(text, filename, "exec"), module.__dict__)
    finally:
        sys.modules.pop(name, None)
    return module


def load(path: str | Path) -> ModuleType:
    """Import the script at ``path`` as a fresh module (its current text; ``main()`` is not run)."""
    path = Path(path)
    return _module(path.read_text(), str(path.resolve()), f"{FOLDER}_{path.stem}")


def run_script(path: str | Path, **config) -> None:
    """Run the script at ``path`` as ``python path`` would, with ``Config(**config)``, printing its log."""
    script = load(path)
    script.Trainer(script.Config(**config)).fit()


def original(number: int) -> ModuleType:
    """The shipped script of mystery ``number``, imported."""
    return importlib.import_module(f"{__name__}.{MYSTERIES[number].module}")


def fixed_source(number: int) -> str:
    """The shipped text with the casebook's fix applied: the healthy reference."""
    text = source(number)
    for old, new in MYSTERIES[number].fix:
        if text.count(old) != 1:
            raise ValueError(f"mystery {number}: the fix expects {old!r} once in the script")
        text = text.replace(old, new)
    return text


@cache
def fixed(number: int) -> ModuleType:
    """The healthy reference of mystery ``number``, as a module."""
    filename = str(resources.files(__name__).joinpath(f"{MYSTERIES[number].module}.py"))
    return _module(fixed_source(number), filename, f"{__name__}.fixed_{number}")


__all__ = [
    "FOLDER",
    "MYSTERIES",
    "Mystery",
    "Recording",
    "digest",
    "fixed",
    "fixed_source",
    "load",
    "original",
    "record",
    "run_script",
    "source",
    "unpack",
]
