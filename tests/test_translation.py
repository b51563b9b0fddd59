"""The translation catalog of the Chinese edition: units, staleness, rebuilding a chapter."""

import nbformat
import pytest

from autogradlab.release.translation import (
    problems,
    read_catalog,
    rebuild,
    template,
    translate_notebook,
    units,
    update_catalog,
    write_catalog,
)

CELL = """## Saved tensors

Autograd keeps what backward needs:
the inputs of `mul`, the output of `exp`.

> ⚠️ **Pitfall — in place.** A changed saved tensor raises.
>
> ```python
> y.add_(1)
> ```

| op | saves |
|---|---|
| `exp` | its output |

1. first item
   continued
2. second item

$$
\\frac{\\partial L}{\\partial x} = G W^\\top
$$

```python
x = torch.ones(2)
```"""


def test_units_split_paragraphs_items_rows_and_quotes_and_skip_code_and_math():
    texts = [u.text for u in units(CELL)]
    assert texts == [
        "Saved tensors",
        "Autograd keeps what backward needs:\nthe inputs of `mul`, the output of `exp`.",
        "⚠️ **Pitfall — in place.** A changed saved tensor raises.\n\n```python\ny.add_(1)\n```",
        "| op | saves |",
        "| `exp` | its output |",
        "first item\n   continued",
        "second item",
    ]


def test_rebuild_keeps_markup_code_and_math_and_is_the_identity_without_a_translation():
    assert rebuild(CELL, lambda text: text) == CELL
    marked = rebuild(CELL, lambda text: "ZH " + text)
    assert "## ZH Saved tensors" in marked and "> ZH ⚠️" in marked and "1. ZH first item" in marked
    assert "\\frac{\\partial L}" in marked and "x = torch.ones(2)" in marked and "|---|---|" in marked


def test_every_solution_cell_rebuilds_to_itself(repo_root):
    for path in sorted((repo_root / "solutions").glob("[0-9][0-9]_*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown":
                assert rebuild(cell.source, lambda text: text) == cell.source, path.name


def _notebook(*sources):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(s) for s in sources])
    for i, cell in enumerate(nb.cells):
        cell.id = f"c{i}"
    return nb


def test_an_english_edit_marks_exactly_its_translation_stale(tmp_path):
    nb = _notebook("First paragraph.\n\nSecond paragraph.", "Another cell.")
    catalog = update_catalog(read_catalog(tmp_path / "zh.po"), {"07_demo": nb})
    for message in catalog:
        if message.id:
            message.string = "译文：" + message.id
    path = tmp_path / "zh.po"
    write_catalog(catalog, path)
    assert problems(read_catalog(path), {"07_demo": nb}) == []

    nb.cells[0].source = "First paragraph.\n\nSecond paragraph, edited."
    catalog = update_catalog(read_catalog(path), {"07_demo": nb})
    found = problems(catalog, {"07_demo": nb})
    assert len(found) == 1 and found[0].startswith("07_demo, cell 0, paragraph 2: stale")
    stale = catalog.get("Second paragraph, edited.", context="07_demo#c0")
    assert stale.fuzzy and stale.previous_id == ["Second paragraph."]

    nb.cells.append(nbformat.v4.new_markdown_cell("A new cell."))
    nb.cells[-1].id = "c9"
    found = problems(update_catalog(catalog, {"07_demo": nb}), {"07_demo": nb})
    assert [f.split(": ")[1] for f in found] == ["stale", "missing"]


def test_a_chapter_is_built_only_from_current_translations(tmp_path):
    nb = _notebook("## Title\n\nText.")
    catalog = template({"00_demo": nb})
    catalog.locale = "zh"
    for message in catalog:
        if message.id:
            message.string = {"Title": "标题", "Text.": "正文。"}[message.id]
    assert translate_notebook(nb, "00_demo", catalog).cells[0].source == "## 标题\n\n正文。"
    catalog.get("Text.", context="00_demo#c0").flags.add("fuzzy")
    with pytest.raises(KeyError):
        translate_notebook(nb, "00_demo", catalog)
