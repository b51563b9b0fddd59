"""CLI: ``python -m autogradlab.release [--check] [--root DIR]``, and
``python -m autogradlab.release --nbgrader-source DIR [--lang zh] [NN_topic ...]`` for an instructor.

Writes chapters/ (English) and, from the translation catalogs (translations/zh/), chapters-zh/ (the
Chinese edition). ``--check`` fails when either is out of date, when a unit of prose has no current
translation (named by chapter, cell and paragraph), or when a package message has none or the package's
``.mo`` is stale (named by module and msgid; ``autogradlab.release.package_catalog``).

``--nbgrader-source DIR`` writes nbgrader's source folder instead (``DIR/NN_topic/NN_topic.ipynb``, see
:func:`nbgrader_sources`), for the chapters named (default: all), in the ``--lang`` edition.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

from autogradlab.release import package_catalog
from autogradlab.release.launch import EDITIONS, add_launch_cells
from autogradlab.release.student import ReleaseError, student_notebook, to_text, validate
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


def nbgrader_sources(root: Path, lang: str = "en", chapters: list[str] | None = None) -> dict[Path, str]:
    """nbgrader's source folder of the ``lang`` edition: ``NN_topic/NN_topic.ipynb`` -> its text, per chapter.

    English: the solution notebook as it is. Another edition: the solution with its prose translated and that
    edition's badges and setup cell, so nbgrader's student version has the code of the edition's chapter cell
    for cell, setup cell included (it sets ``AUTOGRADLAB_LANG``: the checks speak the edition's language in the
    student's kernel and in ``nbgrader autograde``). Raises ReleaseError naming a chapter that does not exist
    or a unit without a current translation.
    """
    sources = {p.stem: p for p in sorted((root / "solutions").glob("[0-9][0-9]_*.ipynb"))}
    unknown = sorted(set(chapters or ()) - set(sources))
    if unknown:
        raise ReleaseError(f"no chapter {', '.join(unknown)} in solutions/ (names like 00_welcome)")
    out = {}
    for stem in chapters or sources:
        text = sources[stem].read_text(encoding="utf-8")
        if lang != "en":
            nb = nbformat.reads(text, as_version=4)
            catalog = read_catalog(catalog_path(root, lang, stem), lang)
            gaps = problems(catalog, {stem: nb})
            if gaps:
                raise ReleaseError(f"{lang}: {gaps[0]} (and {len(gaps) - 1} more)" if len(gaps) > 1 else gaps[0])
            nb = translate_notebook(nb, stem, catalog)
            validate(nb, f"solutions/{stem}.ipynb")
            add_launch_cells(nb, f"{stem}.ipynb", lang)
            text = to_text(nb)
        out[Path(stem) / f"{stem}.ipynb"] = text
    return out


def write_nbgrader_sources(root: Path, folder: Path, lang: str, chapters: list[str]) -> int:
    for path, text in nbgrader_sources(root, lang, chapters).items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text, encoding="utf-8")
        print(f"release: wrote {folder / path} ({lang})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autogradlab.release", description=__doc__)
    parser.add_argument("--check", action="store_true", help="only check that chapters/ is up to date")
    parser.add_argument("--root", type=Path, default=None, help="repository root (default: found from cwd)")
    parser.add_argument(
        "--nbgrader-source",
        type=Path,
        metavar="DIR",
        help="write nbgrader's source folder (DIR/NN_topic/NN_topic.ipynb) of the --lang edition instead",
    )
    parser.add_argument("--lang", default="en", choices=("en", *LANGUAGES), help="the edition (--nbgrader-source)")
    parser.add_argument("chapters", nargs="*", help="with --nbgrader-source: only these chapters (00_welcome ...)")
    args = parser.parse_args(argv)
    if args.chapters and not args.nbgrader_source:
        parser.error("chapter names go with --nbgrader-source")
    try:
        root = (args.root or _find_root(Path.cwd())).resolve()
        if args.nbgrader_source:
            return write_nbgrader_sources(root, args.nbgrader_source, args.lang, args.chapters)
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
