"""The Chinese edition's prose: one gettext message per paragraph of solutions/, kept in step by Babel.

solutions/ is the one source. Every markdown cell is split into translation units: a paragraph, a
heading, a list item, a table row, a quoted paragraph (a Pitfall box); code blocks, display math and
table rules stay as they are. Each unit is a message whose ``msgid`` is the English text and whose
``msgctxt`` is ``chapter#cell-id``, so identical sentences in two places are translated in their own
context, and a message says where it lives.

When the English changes, :func:`update_catalog` (Babel's ``Catalog.update``) marks exactly the edited
unit's translation *fuzzy* (stale) and keeps the old English as ``previous_id``; a unit that was removed
becomes obsolete; a new unit has no translation. :func:`problems` names each missing or stale unit by
chapter, cell and paragraph, and :func:`translate_notebook` refuses to build a chapter that has one.

The package's own learner-facing messages (checkers, views, the doctor) have one catalog per module, kept in
step by the same :func:`merge` rule: :mod:`autogradlab.release.package_catalog` (``package-update``,
``package-compile``).

>>> source = "## A heading\\n\\nFirst paragraph,\\nstill first.\\n\\n- item one\\n- item two\\n\\n```python\\nx = 1\\n```"
>>> [u.text for u in units(source)]
['A heading', 'First paragraph,\\nstill first.', 'item one', 'item two']
>>> rebuild(source, {u.text: u.text.upper() for u in units(source)}.get)
'## A HEADING\\n\\nFIRST PARAGRAPH,\\nSTILL FIRST.\\n\\n- ITEM ONE\\n- ITEM TWO\\n\\n```python\\nx = 1\\n```'
"""

from __future__ import annotations

import copy
import datetime
import difflib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po, write_po

LANGUAGES = {"zh": "简体中文"}
CATALOG = "translations/{lang}/{chapter}.po"  # one catalog per chapter, relative to the repository root

HEADER = (
    "# The Chinese edition of Autograd Lab: one message per paragraph of solutions/ (the one source).\n"
    "# python -m autogradlab.release.translation update   brings it in step; check   lists what needs work.\n"
    "# Terms follow translations/glossary.tsv."
)
_EPOCH = datetime.datetime(2026, 11, 26, tzinfo=datetime.UTC)

_FENCE = re.compile(r"^\s*(```|~~~)")
_LIST = re.compile(r"^(\s*(?:[-*+]|\d+[.)])\s+)(.*)$")
_HEADING = re.compile(r"^(#{1,6}\s+)(.*)$")
_QUOTE = re.compile(r"^(>\s?)(.*)$")
_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
_TABLE_RULE = re.compile(r"^\s*\|[\s:|-]+\|\s*$")


@dataclass(frozen=True)
class Unit:
    """One translatable piece of a markdown cell: ``text`` is its English; ``index`` its order in the cell."""

    text: str
    index: int


@dataclass
class _Piece:
    lead: str  # markup before the text (``- ``, ``## ``, ``> ``): never translated
    text: str
    translate: bool


def _blocks(lines: list[str]) -> Iterator[list[str]]:
    """Blocks separated by blank lines; a fenced code block or a ``$$`` display is one block however long."""
    block: list[str] = []
    fence = display = False
    for line in lines:
        if fence or display:
            block.append(line)
            if fence and _FENCE.match(line):
                fence = False
            elif display and line.strip().endswith("$$"):
                display = False
            continue
        if not line.strip():
            if block:
                yield block
                block = []
            continue
        block.append(line)
        if _FENCE.match(line):
            fence = True
        elif line.strip().startswith("$$") and not (line.strip().endswith("$$") and len(line.strip()) > 2):
            display = True
    if block:
        yield block


def _pieces(source: str) -> list[_Piece | str]:
    """The cell as translatable pieces and the verbatim text between them (newlines, code, math, rules)."""
    out: list[_Piece | str] = []
    lines = source.split("\n")
    blocks = list(_blocks(lines))
    for b, block in enumerate(blocks):
        if b:
            out.append("\n\n")
        first = block[0]
        if _FENCE.match(first) or first.strip().startswith("$$"):
            out.append("\n".join(block))
            continue
        items: list[_Piece | str] = []
        if all(_TABLE_ROW.match(line) for line in block):
            for line in block:
                items.append(line if _TABLE_RULE.match(line) else _Piece("", line, True))
        elif _LIST.match(first):
            for line in block:
                m = _LIST.match(line)
                if m:
                    items.append(_Piece(m.group(1), m.group(2), True))
                elif items and isinstance(items[-1], _Piece):  # a continuation line of the item
                    items[-1].text += "\n" + line
            # nested markup inside items stays in the item's text
        elif all(_QUOTE.match(line) for line in block):
            lead = _QUOTE.match(first).group(1)
            items.append(_Piece(lead, "\n".join(_QUOTE.match(line).group(2) for line in block), True))
        elif _HEADING.match(first) and len(block) == 1:
            m = _HEADING.match(first)
            items.append(_Piece(m.group(1), m.group(2), True))
        else:
            items.append(_Piece("", "\n".join(block), True))
        for i, item in enumerate(items):
            if i:
                out.append("\n")
            out.append(item)
    return out


def units(source: str) -> list[Unit]:
    """The translatable units of one markdown cell, in order."""
    texts = [p.text for p in _pieces(source) if isinstance(p, _Piece) and p.translate and p.text.strip()]
    return [Unit(text, i) for i, text in enumerate(texts)]


def rebuild(source: str, translated: Callable[[str], str | None]) -> str:
    """The cell with each unit replaced by ``translated(unit text)`` (markup, code and math kept).

    A quoted unit's translation is quoted line by line again.
    """
    out = []
    for piece in _pieces(source):
        if isinstance(piece, str):
            out.append(piece)
            continue
        text = translated(piece.text) if piece.text.strip() else piece.text
        if text is None:
            raise KeyError(piece.text)
        if piece.lead.startswith(">"):
            text = "\n".join((piece.lead + line) if line else piece.lead.rstrip() for line in text.split("\n"))
            out.append(text)
        else:
            out.append(piece.lead + text)
    return "".join(out)


# --------------------------------------------------------------------------- catalogs


def context(chapter: str, cell) -> str:
    """The ``msgctxt`` of a cell's units: ``NN_topic#cell-id``."""
    return f"{chapter}#{cell.get('id', '')}"


def template(notebooks: dict[str, object]) -> Catalog:
    """A catalog of every unit of every markdown cell (``{chapter: notebook}``), English only."""
    catalog = Catalog(project="Autograd Lab", fuzzy=False)
    for chapter, nb in sorted(notebooks.items()):
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "markdown":
                continue
            for unit in units(cell.source):
                catalog.add(
                    unit.text,
                    context=context(chapter, cell),
                    locations=[(f"solutions/{chapter}.ipynb", index)],
                    auto_comments=[f"cell {index}, paragraph {unit.index + 1}"],
                )
    return catalog


def read_catalog(path: Path, lang: str = "zh") -> Catalog:
    """The catalog at ``path`` (an empty one for ``lang`` when the file does not exist yet)."""
    if not path.exists():
        return Catalog(locale=lang, project="Autograd Lab", fuzzy=False)
    with path.open("rb") as f:
        return read_po(f, locale=lang)


def write_catalog(catalog: Catalog, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        write_po(f, catalog, width=0, omit_header=False, include_previous=True, sort_output=False)


def update_catalog(catalog: Catalog, notebooks: dict[str, object]) -> Catalog:
    """A catalog in step with the notebooks: new units added, edited ones stale (fuzzy), removed ones dropped.

    An edited unit is matched to the removed unit of the *same cell* it most resembles (see :func:`merge`).
    """
    return merge(catalog, template(notebooks))


def merge(catalog: Catalog, fresh: Catalog, header: str = HEADER) -> Catalog:
    """``fresh`` (every current message, English only) with ``catalog``'s translations carried over.

    A message whose English is unchanged keeps its translation (and flags). An edited one is matched to the
    removed message of the *same context* it most resembles (difflib): its old translation is kept, marked
    fuzzy, with the old English as ``previous_id``. A message with no such counterpart is new (missing); one
    that is gone is dropped. A chapter's context is its cell, so a new sentence never inherits an unrelated
    cell's translation; the package's messages have no context, so they match within their module.
    """
    fresh.locale, fresh.project = catalog.locale, catalog.project
    # a stable header: an update that changes no message leaves the file as it was
    fresh.creation_date = fresh.revision_date = _EPOCH
    fresh.header_comment = header
    fresh.language_team = fresh.last_translator = "Autograd Lab"
    by_context: dict[str | None, dict[str, object]] = {}
    for message in catalog:
        if message.id:
            by_context.setdefault(message.context, {})[message.id] = message
    for message in fresh:
        if not message.id:
            continue
        old = by_context.get(message.context, {})
        if message.id in old:
            kept = old.pop(message.id)
            message.string, message.flags = kept.string, set(kept.flags)
            message.previous_id = list(kept.previous_id)
    for message in fresh:
        if not message.id or message.string:
            continue
        old = by_context.get(message.context, {})
        close = difflib.get_close_matches(message.id, list(old), n=1, cutoff=0.5)
        if close and old[close[0]].string:
            previous = old.pop(close[0])
            message.string = previous.string
            message.flags.add("fuzzy")
            message.previous_id = [previous.id]
    return fresh


def problems(catalog: Catalog, notebooks: dict[str, object]) -> list[str]:
    """One line per unit without a current translation: ``chapter, cell N, paragraph K: missing|stale``."""
    found = []
    for chapter, nb in sorted(notebooks.items()):
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "markdown":
                continue
            for unit in units(cell.source):
                message = catalog.get(unit.text, context=context(chapter, cell))
                state = "missing" if message is None or not message.string else "stale" if message.fuzzy else None
                if state:
                    found.append(f"{chapter}, cell {index}, paragraph {unit.index + 1}: {state}: {unit.text[:60]!r}")
    return found


def translate_notebook(nb, chapter: str, catalog: Catalog):
    """A copy of ``nb`` with every markdown cell in the catalog's language (raises KeyError on a gap)."""
    out = copy.deepcopy(nb)
    for cell in out.cells:
        if cell.cell_type != "markdown":
            continue
        ctx = context(chapter, cell)

        def translated(text: str, ctx: str = ctx) -> str | None:
            message = catalog.get(text, context=ctx)
            return message.string if message is not None and message.string and not message.fuzzy else None

        cell.source = rebuild(cell.source, translated)
    return out


def catalog_path(root: Path, lang: str, chapter: str) -> Path:
    """Where chapter ``chapter``'s catalog for ``lang`` lives."""
    return root / CATALOG.format(lang=lang, chapter=chapter)


def solution_notebooks(root: Path) -> dict[str, object]:
    """``{chapter: notebook}`` for every solution notebook (the one source)."""
    import nbformat

    return {p.stem: nbformat.read(p, as_version=4) for p in sorted((root / "solutions").glob("[0-9][0-9]_*.ipynb"))}


def main(argv: list[str] | None = None) -> int:
    """``python -m autogradlab.release.translation update|check|package-update|package-compile [--lang zh]``.

    ``update`` brings every chapter's catalog in step with solutions/ (new units empty, edited ones fuzzy);
    ``package-update [MODULE ...]`` does the same for the package's messages (every module's catalog, or only
    the named ones: ``autogradlab.views.graph_view`` or ``views.graph_view``); ``package-compile`` writes the
    package's ``.mo`` from its catalogs (``autogradlab.release.package_catalog``); ``check`` lists every
    missing or stale unit and package message and fails when there is one.
    """
    import argparse
    import sys

    from autogradlab.release import package_catalog

    parser = argparse.ArgumentParser(prog="python -m autogradlab.release.translation")
    parser.add_argument("command", choices=("update", "check", "package-update", "package-compile"))
    parser.add_argument("modules", nargs="*", help="package-update: only these modules' catalogs")
    parser.add_argument("--lang", default="zh", choices=sorted(LANGUAGES))
    parser.add_argument("--root", type=Path, default=Path.cwd())
    args = parser.parse_args(argv)
    if args.modules and args.command != "package-update":
        parser.error("modules are named only with package-update")
    if args.command == "package-update":
        written = package_catalog.update(args.root, args.lang, args.modules or None)
        print(f"package ({args.lang}): {len(written)} catalogs written")
        return 0
    if args.command == "package-compile":
        path = package_catalog.compile_mo(args.root, args.lang)
        print(f"package ({args.lang}): {len(package_catalog.compiled(args.root, args.lang))} messages in {path}")
        return 0
    notebooks = solution_notebooks(args.root)
    found = []
    for chapter, nb in notebooks.items():
        path = catalog_path(args.root, args.lang, chapter)
        catalog = read_catalog(path, args.lang)
        if args.command == "update":
            catalog = update_catalog(catalog, {chapter: nb})
            write_catalog(catalog, path)
        found += problems(catalog, {chapter: nb})
    for line in found:
        print(line, file=sys.stderr)
    units_total = sum(len(units(c.source)) for nb in notebooks.values() for c in nb.cells if c.cell_type == "markdown")
    print(f"translation ({args.lang}): {units_total - len(found)} of {units_total} units current")
    if args.command == "check":
        package = package_catalog.problems(args.root, args.lang)
        for line in package:
            print(line, file=sys.stderr)
        print(f"translation ({args.lang}): {len(package)} package problems")
        found += package
    return 1 if found and args.command == "check" else 0


__all__ = [
    "CATALOG",
    "catalog_path",
    "solution_notebooks",
    "LANGUAGES",
    "Unit",
    "merge",
    "problems",
    "read_catalog",
    "rebuild",
    "template",
    "translate_notebook",
    "units",
    "update_catalog",
    "write_catalog",
]


if __name__ == "__main__":
    raise SystemExit(main())
