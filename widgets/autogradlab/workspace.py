"""The learner's own copy of the chapters (``my-chapters/``, which git does not track).

JupyterLab saves a learner's answers into the notebook open in it. Working in ``chapters/`` would
make every course update (``git pull``) collide with those answers, so ``make lab``, Binder and a
hub open a copy. :func:`sync` brings the course into that copy and never loses the learner's work:

- a chapter the copy lacks is copied (a new chapter, or one the learner deleted to start afresh);
- a chapter the learner has not changed since it was copied follows the course when the course changes;
- a chapter the learner changed is kept as it is; when the course changed it too, sync says so.

``python -m autogradlab.workspace [--course DIR] [--to DIR]`` (defaults: ``chapters/`` and
``my-chapters/`` of the checkout around the current folder). What was copied is recorded by content
hash in ``my-chapters/.course-versions.json``.

>>> import pathlib, tempfile
>>> course, mine = (pathlib.Path(tempfile.mkdtemp()) / d for d in ("chapters", "my-chapters"))
>>> course.mkdir(); _ = (course / "00_a.ipynb").write_text("v1")
>>> sync(course, mine).copied, sync(course, mine).copied
(['00_a.ipynb'], [])
>>> _ = (mine / "00_a.ipynb").write_text("my answers"); _ = (course / "00_a.ipynb").write_text("v2")
>>> result = sync(course, mine); result.kept, (mine / "00_a.ipynb").read_text()
(['00_a.ipynb'], 'my answers')
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from autogradlab.i18n import _

LEARNER_DIR = "my-chapters"
MANIFEST = ".course-versions.json"
PATTERN = "[0-9][0-9]_*.ipynb"


@dataclass
class Sync:
    """What one :func:`sync` did: file names, in order."""

    copied: list[str] = field(default_factory=list)  # the learner did not have them
    updated: list[str] = field(default_factory=list)  # unchanged by the learner, changed by the course: replaced
    kept: list[str] = field(default_factory=list)  # changed by the learner AND by the course: the learner's kept

    def lines(self, course: Path) -> list[str]:
        out = [_("copied {name}").format(name=name) for name in self.copied] + [
            _("updated {name} (you had not changed it)").format(name=name) for name in self.updated
        ]
        out += [
            _("kept your {name}: the course changed it too; its new version is {path}").format(
                name=name, path=course / name
            )
            for name in self.kept
        ]
        return out


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sync(course: Path, learner: Path) -> Sync:
    """Bring every chapter of ``course`` into ``learner`` without overwriting a chapter the learner changed."""
    learner.mkdir(parents=True, exist_ok=True)
    manifest_path = learner / MANIFEST
    recorded: dict[str, str] = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    result = Sync()
    for source in sorted(course.glob(PATTERN)):
        name, target, new = source.name, learner / source.name, _digest(source)
        if not target.exists():
            result.copied.append(name)
        elif _digest(target) == new:
            recorded[name] = new  # the same as the course's: nothing to do (maybe copied by hand)
            continue
        elif recorded.get(name) == _digest(target):
            result.updated.append(name)
        else:
            if recorded.get(name, new) != new:
                result.kept.append(name)
            continue
        shutil.copyfile(source, target)
        recorded[name] = new
    manifest_path.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    return result


def _checkout(start: Path) -> Path:
    for folder in (start, *start.parents):
        if (folder / "chapters").is_dir():
            return folder
    raise SystemExit(f"no chapters/ folder in {start} or its parents: pass --course and --to")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autogradlab.workspace", description=__doc__.split("\n\n")[0])
    parser.add_argument("--course", type=Path, help="the course's chapters (default: chapters/ of the checkout)")
    parser.add_argument("--to", type=Path, help=f"the learner's copy (default: {LEARNER_DIR}/ next to chapters/)")
    args = parser.parse_args(argv)
    root = None if args.course and args.to else _checkout(Path.cwd())
    course, learner = args.course or root / "chapters", args.to or root / LEARNER_DIR
    if not any(course.glob(PATTERN)):
        print("workspace: " + _("no chapters in {course}").format(course=course), file=sys.stderr)
        return 2
    result = sync(course, learner)
    for line in result.lines(course):
        print(f"workspace: {line}")
    print(
        "workspace: "
        + _("your chapters are in {folder} (git does not track them; a course update never overwrites them)").format(
            folder=learner
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
