"""The Chinese edition follows one glossary (translations/glossary.tsv): every current translation of a unit
whose English uses a term carries the term's fixed form (PyTorch's English term kept, or the Chinese given).
The chapters' prose (translations/zh/NN_topic.po) and the package's messages (translations/zh/package/) alike."""

import csv
import re
from pathlib import Path

import pytest

from autogradlab.release.translation import read_catalog

ROOT = Path(__file__).resolve().parent.parent
CATALOGS = sorted((ROOT / "translations" / "zh").glob("[0-9][0-9]_*.po")) + sorted(
    (ROOT / "translations" / "zh" / "package").glob("*.po")
)


def glossary() -> list[tuple[str, str, str]]:
    """``(english, fixed form, rule)`` rows, longest English first (a longer term wins over one inside it)."""
    lines = [
        line for line in (ROOT / "translations" / "glossary.tsv").read_text().splitlines() if not line.startswith("#")
    ]
    rows = list(csv.DictReader(lines, delimiter="\t"))
    return sorted(((r["english"], r["chinese"], r["rule"]) for r in rows), key=lambda row: -len(row[0]))


def _pattern(term: str) -> re.Pattern:
    return re.compile(r"(?<![\w-])" + re.escape(term) + r"(s|es)?(?![\w-])", re.IGNORECASE)


_CODE_AND_MATH = re.compile(
    r"`[^`]*`|\$\$.*?\$\$|\$[^$]*\$|```.*?```"
    # the package's messages write code without backticks: calls, dotted names, keyword arguments, {fields}
    r"|[\w.]*\w\([^()]*\)|\w+(?:\.\w+)+|\w+=\w*|\{\w*(?:[:!][^{}]*)?\}",
    re.S,
)


def missing_terms(english: str, chinese: str, terms: list[tuple[str, str, str]]) -> list[str]:
    """The glossary terms ``english``'s prose uses (not its code or math) whose fixed form ``chinese`` lacks."""
    english = _CODE_AND_MATH.sub(" ", english)
    missing = []
    for term, fixed, rule in terms:
        pattern = _pattern(term)
        if pattern.search(english):
            if rule != "skip" and fixed.lower() not in chinese.lower():
                missing.append(f"{term} → {fixed}")
            english = pattern.sub(" ", english)  # a longer term's words are not also shorter terms
    return missing


def test_the_finder_sees_a_missing_term_and_lets_the_longer_term_win():
    terms = glossary()
    assert missing_terms("The backward pass frees saved tensors.", "反向传播会释放 saved tensors。", terms) == []
    assert missing_terms("Walk backwards from the loss.", "从 loss 往回走。", terms) == []
    assert missing_terms("Call `optimizer.step()` with `gradient=`.", "调用 `optimizer.step()`。", terms) == []
    assert (
        missing_terms("{node} ran optimizer.step() on model.parameters()", "{node} 运行了 optimizer.step()", terms)
        == []
    )
    assert missing_terms("The gradient of a leaf tensor.", "叶子张量的导数。", terms) == [
        "leaf tensor → leaf tensor",
        "gradient → 梯度",
    ]


@pytest.mark.parametrize(
    "path", CATALOGS, ids=[p.stem if p.parent.name == "zh" else f"package/{p.stem}" for p in CATALOGS]
)
def test_translations_use_the_glossary(path):
    terms = glossary()
    problems = []
    for message in read_catalog(path):
        if message.id and message.string and not message.fuzzy:
            missing = missing_terms(message.id, message.string, terms)
            if missing:
                where = message.auto_comments[:1] or [f"{path}:{line}" for path, line in message.locations[:1]]
                problems.append(f"{where[0] if where else message.id[:60]}: {', '.join(missing)}")
    assert not problems, f"{path.name}: terms the glossary fixes are missing:\n" + "\n".join(problems)
