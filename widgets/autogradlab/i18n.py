"""The package's learner-facing text in the learner's language: gettext, chosen by ``AUTOGRADLAB_LANG``.

English is the source and the default. ``AUTOGRADLAB_LANG=zh`` (set by the Chinese chapters'
setup cell and by ``make lab-zh``) selects the Chinese catalog that ships with the package
(``autogradlab/locale/zh/LC_MESSAGES/autogradlab.mo``). The language is read at each call, so setting
the variable in a running kernel takes effect at once.

A message with values is written with named fields and filled after translation, so a translator
can move them: ``_("`{name}` is wrong for {label}.").format(name=name, label=label)``. Never wrap an
f-string (its text is not known until it runs, so it has no translation). A message stored in a table
at import time is marked with :func:`N_` (it stays English there) and translated where it is shown,
``_(HINTS[slip])``. Code, ids, kinds, dict keys and developer errors stay unwrapped.

The flow for an author (README, "For authors"; ``autogradlab.release.package_catalog``):

1. wrap the learner-facing string in ``_()`` (or ``N_()`` in a table);
2. ``python -m autogradlab.release.translation package-update autogradlab.views.graph_view`` brings that
   module's catalog, ``translations/zh/package/views.graph_view.po``, in step (new messages empty,
   edited ones fuzzy);
3. fill each empty or fuzzy ``msgstr`` (glossary: translations/glossary.tsv);
4. ``python -m autogradlab.release.translation package-compile`` writes the ``.mo`` from every
   package catalog;
5. commit the ``.po`` and the ``.mo``. ``python -m autogradlab.release --check`` fails on any step left out.

>>> import os
>>> os.environ.pop("AUTOGRADLAB_LANG", None) and None
>>> _("Hint: ")
'Hint: '
>>> language()
'en'
>>> N_("stays English until shown")
'stays English until shown'
"""

from __future__ import annotations

import functools
import gettext
import os
from importlib import resources

LANGUAGES = ("en", "zh")
DOMAIN = "autogradlab"


def language() -> str:
    """The language learner-facing text is shown in: ``AUTOGRADLAB_LANG`` if it names a known one, else English."""
    lang = os.environ.get("AUTOGRADLAB_LANG", "en").strip().lower().split("_")[0].split("-")[0]
    return lang if lang in LANGUAGES else "en"


@functools.cache
def _catalog(lang: str) -> gettext.NullTranslations:
    localedir = resources.files("autogradlab") / "locale"
    return gettext.translation(DOMAIN, localedir=str(localedir), languages=[lang], fallback=True)


def _(message: str) -> str:
    """``message`` in the current language (the English itself when there is no translation)."""
    lang = language()
    return message if lang == "en" or not message else _catalog(lang).gettext(message)


def N_(message: str) -> str:
    """Mark ``message`` for translation without translating it (a table built at import; ``_()`` it when shown)."""
    return message


def said(table: dict, key: str, **values: object) -> str:
    """The message ``table[key]`` (stored with ``N_``) in the current language, its ``{fields}`` filled from ``values``.

    >>> said({"late": N_("{name} ran {n} steps late.")}, "late", name="step", n=2)
    'step ran 2 steps late.'
    """
    return _(table[key]).format(**values)


__all__ = ["DOMAIN", "LANGUAGES", "N_", "_", "language", "said"]
