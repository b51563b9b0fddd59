"""The package's learner-facing text in the learner's language: gettext, chosen by ``AUTOGRADLAB_LANG``.

English is the source and the default. ``AUTOGRADLAB_LANG=zh`` (set by the Chinese chapters'
setup cell and by ``make lab-zh``) selects the Chinese catalog that ships with the package
(``autogradlab/locale/zh/LC_MESSAGES/autogradlab.mo``, compiled from the ``.po`` beside it). The
language is read at each call, so setting the variable in a running kernel takes effect at once.

A message with values is written with named fields and filled after translation, so a translator
can move them: ``_("`{name}` is wrong for {label}.").format(name=name, label=label)``.

>>> import os
>>> os.environ.pop("AUTOGRADLAB_LANG", None) and None
>>> _("Hint: ")
'Hint: '
>>> language()
'en'
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
    return message if lang == "en" else _catalog(lang).gettext(message)


__all__ = ["DOMAIN", "LANGUAGES", "_", "language"]
