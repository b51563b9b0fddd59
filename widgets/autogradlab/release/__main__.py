"""CLI: ``python -m autogradlab.release [--check] [--root DIR]``.

Writes chapters/ (English) and, from the translation catalogs (translations/zh/), chapters-zh/ (the
Chinese edition). ``--check`` fails when either is out of date, when a unit of prose has no current
translation (named by chapter, cell and paragraph), or when a package message has none or the package's
``.mo`` is stale (named by module and msgid; ``autogradlab.release.package_catalog``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

from autogradlab.release import package_catalog
from autogradlab.release.launch import EDITIONS
from autogradlab.release.student import ReleaseError, student_notebook, to_text
from autogradlab.release.translation import LANGUAGES, catalog_path, problems, read_catalog, translate_notebook


def _find_root(start: Path) -> Path:
    for folder in (start, *start.parents):
        if (folder / "solutions").is_dir():
            return folder
    raise ReleaseError(f"no solutions/ folder in {start} or its parents (use --root)")


def plan(root: Path) -> tuple[dict[Path, str], list[str]]:
    """Map each chapter of every edition to the text it should contain; list the translations that block one.

    An edition is built where its catalogs' folder exists (translations/<lang>/); a chapter with a missing or
    stale unit is left out of the plan, and each such unit is listed.
    """
    wanted, untranslated = {}, []
    for source in sorted((root / "solutions").glob("[0-9][0-9]_*.ipynb")):
        try:
            nb = nbformat.read(source, as_version=4)
        except Exception as exc:  # unreadable JSON or schema: name the file
            raise ReleaseError(f"{source.relative_to(root)}: not a readable notebook ({exc})") from None
        notebook = f"solutions/{source.name}"
        wanted[root / "chapters" / source.name] = to_text(student_notebook(nb, notebook))
        for lang in LANGUAGES:
            if not catalog_path(root, lang, source.stem).parent.is_dir():
                continue  # a checkout without that edition (a fork, a test repository)
            catalog = read_catalog(catalog_path(root, lang, source.stem), lang)
            gaps = problems(catalog, {source.stem: nb})
            if gaps:
                untranslated += [f"{lang}: {gap}" for gap in gaps]
                continue
            translated = translate_notebook(nb, source.stem, catalog)
            folder = EDITIONS[lang][0]
            wanted[root / folder / source.name] = to_text(student_notebook(translated, notebook, lang=lang))
    return wanted, untranslated


def stale(root: Path, wanted: dict[Path, str]) -> list[str]:
    """Chapters that differ from what the solutions produce, or have no solution."""
    problems = [
        f"{path.relative_to(root)} is {'missing' if not path.exists() else 'out of date'}"
        for path, text in wanted.items()
        if not path.exists() or path.read_text(encoding="utf-8") != text
    ]
    sources = {p.name for p in (root / "solutions").glob("[0-9][0-9]_*.ipynb")}
    for folder, _ in EDITIONS.values():
        orphans = [p for p in sorted((root / folder).glob("[0-9][0-9]_*.ipynb")) if p.name not in sources]
        problems += [f"{p.relative_to(root)} has no source in solutions/" for p in orphans]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autogradlab.release", description=__doc__)
    parser.add_argument("--check", action="store_true", help="only check that chapters/ is up to date")
    parser.add_argument("--root", type=Path, default=None, help="repository root (default: found from cwd)")
    args = parser.parse_args(argv)
    try:
        root = (args.root or _find_root(Path.cwd())).resolve()
        wanted, untranslated = plan(root)
    except ReleaseError as exc:
        print(f"release: error: {exc}", file=sys.stderr)
        return 2
    problems = stale(root, wanted)
    untranslated += [f"{lang}: {line}" for lang in LANGUAGES for line in package_catalog.problems(root, lang)]
    for line in untranslated:
        print(f"release: translation {line}", file=sys.stderr)
    if untranslated:
        print(
            "release: a unit has no current translation: `python -m autogradlab.release.translation update`, "
            "or `package-update MODULE`, then translate what it lists (translations/<lang>/NN_topic.po, "
            "translations/<lang>/package/MODULE.po) and `package-compile`",
            file=sys.stderr,
        )
    if args.check:
        for problem in problems:
            print(f"release: {problem}", file=sys.stderr)
        if problems:
            print("release: run `python -m autogradlab.release` to regenerate the chapters", file=sys.stderr)
        if problems or untranslated:
            return 1
        print(f"release: chapters are up to date ({len(wanted)} notebooks in {len(EDITIONS)} editions)")
        return 0
    for path, text in wanted.items():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    print(f"release: wrote {len(wanted)} chapters ({len(problems)} changed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
