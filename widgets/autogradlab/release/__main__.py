"""CLI: ``python -m autogradlab.release [--check] [--root DIR]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

from autogradlab.release.student import ReleaseError, student_notebook, to_text


def _find_root(start: Path) -> Path:
    for folder in (start, *start.parents):
        if (folder / "solutions").is_dir():
            return folder
    raise ReleaseError(f"no solutions/ folder in {start} or its parents (use --root)")


def plan(root: Path) -> dict[Path, str]:
    """Map each chapters/NN_topic.ipynb to the text it should contain."""
    wanted = {}
    for source in sorted((root / "solutions").glob("[0-9][0-9]_*.ipynb")):
        try:
            nb = nbformat.read(source, as_version=4)
        except Exception as exc:  # unreadable JSON or schema: name the file
            raise ReleaseError(f"{source.relative_to(root)}: not a readable notebook ({exc})") from None
        wanted[root / "chapters" / source.name] = to_text(student_notebook(nb, f"solutions/{source.name}"))
    return wanted


def stale(root: Path, wanted: dict[Path, str]) -> list[str]:
    """Chapters that differ from what the solutions produce, or have no solution."""
    problems = [
        f"{path.relative_to(root)} is {'missing' if not path.exists() else 'out of date'}"
        for path, text in wanted.items()
        if not path.exists() or path.read_text(encoding="utf-8") != text
    ]
    orphans = set((root / "chapters").glob("[0-9][0-9]_*.ipynb")) - set(wanted)
    problems += [f"{p.relative_to(root)} has no source in solutions/" for p in sorted(orphans)]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autogradlab.release", description=__doc__)
    parser.add_argument("--check", action="store_true", help="only check that chapters/ is up to date")
    parser.add_argument("--root", type=Path, default=None, help="repository root (default: found from cwd)")
    args = parser.parse_args(argv)
    try:
        root = (args.root or _find_root(Path.cwd())).resolve()
        wanted = plan(root)
    except ReleaseError as exc:
        print(f"release: error: {exc}", file=sys.stderr)
        return 2
    problems = stale(root, wanted)
    if args.check:
        for problem in problems:
            print(f"release: {problem}", file=sys.stderr)
        if problems:
            print("release: run `python -m autogradlab.release` to regenerate chapters/", file=sys.stderr)
            return 1
        print(f"release: chapters/ is up to date ({len(wanted)} notebooks)")
        return 0
    (root / "chapters").mkdir(exist_ok=True)
    for path, text in wanted.items():
        path.write_text(text, encoding="utf-8")
    print(f"release: wrote {len(wanted)} chapters ({len(problems)} changed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
