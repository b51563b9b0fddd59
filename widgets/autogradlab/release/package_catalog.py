"""The package's own messages in Chinese: one catalog per module, compiled into the ``.mo`` that ships with it.

The flow (README, "For authors"):

1. **wrap** a learner-facing string in ``autogradlab.i18n._`` (``N_`` for one stored in a table; see that
   module's docstring for what is wrapped and how values are filled);
2. **update**: ``python -m autogradlab.release.translation package-update [MODULE ...]`` extracts the wrapped
   strings with Babel (:func:`extract`) and writes each module's catalog,
   ``translations/zh/package/<module>.po`` (``checks.ch05.po``, ``views.graph_view.po``): new messages empty,
   an edited one keeps its old translation marked fuzzy (stale) with the old English as ``previous_id``
   (:func:`autogradlab.release.translation.merge`, the same rule as the chapters' prose). Given modules,
   only their catalogs are written;
3. **translate**: fill every empty ``msgstr`` and fix every fuzzy one (then drop its ``fuzzy`` flag), keeping
   each ``{field}``, code span and markup;
4. **compile**: ``python -m autogradlab.release.translation package-compile`` merges every package catalog's
   current translations into ``widgets/autogradlab/locale/zh/LC_MESSAGES/autogradlab.mo`` (:func:`compile_mo`);
5. **commit** the ``.po`` files and the ``.mo``.

:func:`problems` lists what is left: a wrapped message missing or stale in its catalog (named by module,
line and msgid), a catalog not in step with its module, a translation that drops or adds a ``{field}``, one
English text translated two ways in two catalogs, a wrapped f-string, and an ``.mo`` that is not what the
catalogs compile to. ``python -m autogradlab.release --check`` and ``translation check`` fail on any.

>>> fields("`{name}` returned shape {got}, expected {want}.")
['got', 'name', 'want']
"""

from __future__ import annotations

import ast
import gettext
import re
import string
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_file
from babel.messages.mofile import write_mo

from autogradlab.release.translation import _EPOCH, merge, read_catalog, write_catalog

PACKAGE = "widgets/autogradlab"  # the package's sources, relative to the repository root
CATALOG = "translations/{lang}/package/{module}.po"  # one catalog per module with messages
MO = PACKAGE + "/locale/{lang}/LC_MESSAGES/autogradlab.mo"  # what autogradlab.i18n reads
KEYWORDS = {"_": None, "N_": None}

HEADER = (
    "# The package's learner-facing messages in Chinese, one catalog per module (autogradlab.{module}).\n"
    "# python -m autogradlab.release.translation package-update {module}   brings it in step;\n"
    "# package-compile   writes the .mo; check   lists what needs work. Terms follow translations/glossary.tsv."
)

_MARKED = re.compile(r"(?<![\w.])N?_\(")  # a file worth extracting: it calls _( or N_(


def _candidates(root: Path) -> dict[str, Path]:
    """``{dotted module: source}`` for every module whose text calls ``_(`` or ``N_(`` (``views.graph_view``)."""
    base = root / PACKAGE
    found = {}
    for path in sorted(base.rglob("*.py")):
        if path.name == "i18n.py" and path.parent == base:
            continue
        if _MARKED.search(path.read_text(encoding="utf-8")):
            found[".".join(path.relative_to(base).with_suffix("").parts)] = path
    return found


def modules(root: Path) -> dict[str, Catalog]:
    """``{dotted module: its messages}`` for every module of the package that wraps a message."""
    extracted = {name: extract(path, root) for name, path in _candidates(root).items()}
    return {name: catalog for name, catalog in extracted.items() if len(catalog)}


def fields(message: str) -> list[str]:
    """The named ``{fields}`` of a message, sorted (``ValueError`` on unbalanced braces)."""
    return sorted({name for _, name, _, _ in string.Formatter().parse(message) if name is not None})


def extract(path: Path, root: Path) -> Catalog:
    """A catalog of the messages ``path`` wraps (English only), in the order they appear, with their lines."""
    catalog = Catalog(project="Autograd Lab", fuzzy=False)
    where = path.relative_to(root).as_posix()
    for lineno, message, comments, _context in extract_from_file(
        "python", str(path), keywords=KEYWORDS, comment_tags=("TRANSLATORS:",), strip_comment_tags=True
    ):
        if isinstance(message, str) and message:
            catalog.add(message, locations=[(where, lineno)], auto_comments=comments)
    return catalog


def catalog_path(root: Path, lang: str, module: str) -> Path:
    """Where module ``module``'s catalog for ``lang`` lives."""
    return root / CATALOG.format(lang=lang, module=module)


def update(root: Path, lang: str = "zh", names: list[str] | None = None) -> list[Path]:
    """Bring the catalogs of ``names`` (every module when ``None``) in step with their sources; the files written.

    A module that no longer wraps a message loses its catalog.
    """
    found = modules(root)
    names = list(found) if names is None else [name.removeprefix("autogradlab.") for name in names]
    written = []
    for name in names:
        path = catalog_path(root, lang, name)
        if name not in found:
            if not (root / PACKAGE / Path(*name.split("."))).with_suffix(".py").exists():
                raise ValueError(f"no module autogradlab.{name} in {root / PACKAGE}")
            path.unlink(missing_ok=True)
            continue
        catalog = merge(read_catalog(path, lang), found[name], header=HEADER.format(module=name))
        write_catalog(catalog, path)
        written.append(path)
    return written


def catalogs(root: Path, lang: str = "zh") -> dict[str, Catalog]:
    """``{module: catalog}`` of every package catalog for ``lang``."""
    folder = root / CATALOG.format(lang=lang, module="x").rsplit("/", 1)[0]
    return {p.stem: read_catalog(p, lang) for p in sorted(folder.glob("*.po"))}


def translations(root: Path, lang: str = "zh") -> tuple[dict[str, str], list[str]]:
    """Every current translation of every package catalog (``{msgid: msgstr}``), and the msgids translated two ways."""
    merged: dict[str, str] = {}
    where: dict[str, str] = {}
    conflicts = []
    for module, catalog in catalogs(root, lang).items():
        for message in catalog:
            if not message.id or not message.string or message.fuzzy:
                continue
            if message.id in merged and merged[message.id] != message.string:
                conflicts.append(f"{module} and {where[message.id]} translate {message.id!r} differently")
                continue
            merged.setdefault(message.id, message.string)
            where.setdefault(message.id, module)
    return merged, conflicts


def compiled(root: Path, lang: str = "zh") -> Catalog:
    """One catalog holding every current translation of the package (what the ``.mo`` is written from)."""
    catalog = Catalog(locale=lang, project="Autograd Lab", fuzzy=False)
    catalog.creation_date = catalog.revision_date = _EPOCH
    catalog.language_team = catalog.last_translator = "Autograd Lab"
    for msgid, msgstr in sorted(translations(root, lang)[0].items()):
        catalog.add(msgid, msgstr)
    return catalog


def compile_mo(root: Path, lang: str = "zh") -> Path:
    """Write the package's ``.mo`` for ``lang`` from its catalogs; its path."""
    path = root / MO.format(lang=lang)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        write_mo(f, compiled(root, lang))
    return path


def _mo_messages(path: Path) -> dict[str, str]:
    with path.open("rb") as f:
        found = dict(gettext.GNUTranslations(f)._catalog)
    found.pop("", None)  # the header (Babel's version, dates): not a message
    return found


def _f_strings(path: Path, root: Path) -> list[str]:
    """``module:line`` of each ``_(f"...")`` and of each ``_()`` inside an f-string: neither gets a translation.

    An f-string's text is not known before it runs; Babel does not look inside f-strings for ``_()``.
    """
    where = path.relative_to(root).as_posix()
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if _marks(node) and node.args and isinstance(node.args[0], ast.JoinedStr):
            found.append(f"{where}:{node.lineno}: _() wraps an f-string (use named fields and .format)")
        elif isinstance(node, ast.JoinedStr):
            found += [
                f"{where}:{inner.lineno}: _() of a literal inside an f-string is not extracted (call it outside)"
                for inner in ast.walk(node)
                if _marks(inner) and inner.args and isinstance(inner.args[0], ast.Constant)
            ]
    return list(dict.fromkeys(found))  # an f-string's format spec is an f-string of its own: seen twice


def _marks(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in KEYWORDS


def problems(root: Path, lang: str = "zh") -> list[str]:
    """One line per thing that keeps the package's ``lang`` messages from being complete and current."""
    if not (root / PACKAGE).is_dir() or not (root / "translations" / lang).is_dir():
        return []  # a checkout without the package or without that edition
    found = []
    sources = modules(root)
    existing = catalogs(root, lang)
    update_hint = "run `python -m autogradlab.release.translation package-update {}`"
    for name in sorted(set(existing) - set(sources)):
        found.append(f"package {name}: a catalog for a module that wraps no message ({update_hint.format(name)})")
    for path in _candidates(root).values():
        found += [f"package {line}" for line in _f_strings(path, root)]
    for name, fresh in sources.items():
        catalog = existing.get(name)
        if catalog is None:
            found.append(f"package {name}: no catalog for its {len(fresh)} messages ({update_hint.format(name)})")
            continue
        ids = {m.id for m in fresh if m.id}
        if ids != {m.id for m in catalog if m.id}:
            found.append(f"package {name}: catalog out of step with the module ({update_hint.format(name)})")
        for message in fresh:
            if not message.id:
                continue
            line = message.locations[0][1] if message.locations else "?"
            kept = catalog.get(message.id)
            state = "missing" if kept is None or not kept.string else "stale" if kept.fuzzy else None
            if state:
                found.append(f"package {name}, line {line}: {state}: {message.id[:70]!r}")
                continue
            try:
                same = fields(message.id) == fields(kept.string)
            except ValueError:
                same = False
            if not same:
                found.append(f"package {name}, line {line}: the translation's {{fields}} differ: {message.id[:70]!r}")
    merged, conflicts = translations(root, lang)
    found += [f"package: {line}" for line in conflicts]
    mo = root / MO.format(lang=lang)
    if merged and (not mo.exists() or _mo_messages(mo) != merged):
        found.append(
            f"package: {mo.relative_to(root)} is not what the catalogs compile to "
            "(run `python -m autogradlab.release.translation package-compile`)"
        )
    return found


__all__ = [
    "CATALOG",
    "KEYWORDS",
    "MO",
    "catalog_path",
    "catalogs",
    "compile_mo",
    "compiled",
    "extract",
    "fields",
    "modules",
    "problems",
    "translations",
    "update",
]
