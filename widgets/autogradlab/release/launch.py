"""Where the course lives, and how a chapter opens outside its own environment: badges and a setup cell.

The release writes both into every chapter, so they never drift from this one setting:
:data:`REPOSITORY` and :data:`RELEASE_TAG` are the only place the course's address lives.
Badges and installs point at a tag, not at a moving branch, so Binder builds the image
once per release and Colab/Kaggle install code that matches the chapter.

>>> badges("05_custom_functions.ipynb").count("](https://")
6
>>> setup_source().splitlines()[0].startswith("#@title Setup")
True
"""

from __future__ import annotations

import copy
from urllib.parse import quote

from nbformat.v4 import new_code_cell

from autogradlab.workspace import LEARNER_DIR

REPOSITORY = "autogradlab/autograd-lab"  # GitHub owner/name
RELEASE_TAG = "v0.1.0"  # the tag the badges and the Colab/Kaggle install point at
SETUP_TAG = "course-setup"  # marks the cell the release adds (tests and tools recognise it)
PACKAGE_SPEC = f"autogradlab @ git+https://github.com/{REPOSITORY}@{RELEASE_TAG}#subdirectory=widgets"


# Each edition: the folder its chapters are published in and the learner's copy of it.
EDITIONS = {"en": ("chapters", LEARNER_DIR), "zh": ("chapters-zh", f"{LEARNER_DIR}-zh")}


def chapter_url(name: str, lang: str = "en") -> str:
    """The chapter's page on GitHub at the release tag."""
    return f"https://github.com/{REPOSITORY}/blob/{RELEASE_TAG}/{EDITIONS[lang][0]}/{name}"


def launch_urls(name: str, lang: str = "en") -> dict[str, str]:
    """Colab, Kaggle and Binder addresses that open chapter ``name`` of the ``lang`` edition."""
    folder, learner = EDITIONS[lang]
    return {
        "Colab": f"https://colab.research.google.com/github/{REPOSITORY}/blob/{RELEASE_TAG}/{folder}/{name}",
        "Kaggle": f"https://kaggle.com/kernels/welcome?src={quote(chapter_url(name, lang), safe='')}",
        # Binder opens the learner's copy, which the image's start script makes (autogradlab/workspace.py)
        "Binder": f"https://mybinder.org/v2/gh/{REPOSITORY}/{RELEASE_TAG}?urlpath={quote(f'lab/tree/{learner}/{name}', safe='')}",
    }


_BADGE_IMAGES = {
    "Colab": "https://colab.research.google.com/assets/colab-badge.svg",
    "Kaggle": "https://kaggle.com/static/images/open-in-kaggle.svg",
    "Binder": "https://mybinder.org/badge_logo.svg",
}


def badges(name: str, lang: str = "en") -> str:
    """One Markdown line of 'open in' badges for chapter ``name``."""
    return " ".join(f"[![Open in {k}]({_BADGE_IMAGES[k]})]({url})" for k, url in launch_urls(name, lang).items())


SETUP_TITLE = {
    "en": "#@title Setup: run this cell first (on Colab or Kaggle it installs the course package; elsewhere it does nothing)",
    "zh": "#@title 环境设置：请先运行本单元（在 Colab 或 Kaggle 上安装课程的 package；在其他环境中什么也不做）",
}
NOT_INSTALLED = {
    "en": "The course package is not installed here: run `make lab` in the course folder (README), or `pip install '{spec}'`.",
    "zh": "这里没有安装课程的 package：请在课程目录下运行 `make lab-zh`（见 README.zh.md），或 `pip install '{spec}'`。",
}
# Colab shows a form cell (#@title, cellView "form") as its title line; JupyterLab and VS Code fold a
# cell whose source is hidden. The code stays one click away in both.
SETUP_METADATA = {"tags": [SETUP_TAG], "cellView": "form", "jupyter": {"source_hidden": True}}


def setup_source(spec: str = PACKAGE_SPEC, lang: str = "en") -> str:
    """The setup cell: nothing where the package is installed; on Colab or Kaggle, install it and what is missing.

    ``--no-deps`` keeps the platform's torch (and its CUDA build) untouched; :func:`autogradlab.runtime.complete`
    then installs only the dependencies the runtime lacks, never torch, and says so in one line. The Chinese
    edition's cell also sets ``AUTOGRADLAB_LANG=zh``, so the package's messages are in Chinese.
    """
    language = 'os.environ["AUTOGRADLAB_LANG"] = "zh"  # 课程 package 的提示信息用中文\n' if lang != "en" else ""
    return f'''{SETUP_TITLE[lang]}
import importlib, importlib.util, os, subprocess, sys

{language}if importlib.util.find_spec("autogradlab") is None:
    if "google.colab" in sys.modules or "KAGGLE_KERNEL_RUN_TYPE" in os.environ:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "{spec}"], check=True)
        importlib.invalidate_caches()
        import autogradlab.runtime

        autogradlab.runtime.complete()
    else:
        print({NOT_INSTALLED[lang].format(spec=spec)!r})'''


def add_launch_cells(nb, name: str, lang: str = "en") -> None:
    """Put the badges under the chapter's title and the setup cell right after the first cell (in place)."""
    title, _, rest = nb.cells[0].source.partition("\n")
    nb.cells[0].source = f"{title}\n\n{badges(name, lang)}\n{rest}"
    cell = new_code_cell(setup_source(lang=lang), metadata=copy.deepcopy(SETUP_METADATA))
    cell.id = SETUP_TAG  # a fixed id (nbformat draws random ones), so the release is deterministic
    nb.cells.insert(1, cell)
