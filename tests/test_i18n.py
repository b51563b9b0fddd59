"""The package speaks Chinese when asked (issue 26): gettext catalogs per module, one compiled .mo, English default."""

from __future__ import annotations

import logging
import re

import pytest

from autogradlab import i18n
from autogradlab.release import package_catalog
from autogradlab.release.translation import read_catalog, write_catalog


@pytest.fixture
def zh(monkeypatch):
    """The package in Chinese for one test (the language is read at each call)."""
    monkeypatch.setenv("AUTOGRADLAB_LANG", "zh")
    yield
    monkeypatch.delenv("AUTOGRADLAB_LANG")


def test_english_is_the_default_and_unknown_languages_fall_back_to_it(monkeypatch):
    monkeypatch.delenv("AUTOGRADLAB_LANG", raising=False)
    assert i18n.language() == "en" and i18n._("Hint: ") == "Hint: "
    monkeypatch.setenv("AUTOGRADLAB_LANG", "xx")
    assert i18n.language() == "en"
    monkeypatch.setenv("AUTOGRADLAB_LANG", "zh_CN.UTF-8")
    assert i18n.language() == "zh"
    assert i18n._("") == ""  # never gettext's header


def _package(tmp_path, source: str):
    """A repository with one module ``views.demo`` wrapping messages, and an empty zh edition."""
    module = tmp_path / "widgets" / "autogradlab" / "views" / "demo.py"
    module.parent.mkdir(parents=True)
    module.write_text(source)
    (tmp_path / "translations" / "zh").mkdir(parents=True)
    return module


DEMO = """from autogradlab.i18n import N_, _

LEGEND = {"leaf": N_("a leaf tensor")}


def title(name):
    return _("Gradient of `{name}`").format(name=name) + _("Hint: ")
"""


def test_update_translate_compile_check_flow(tmp_path):
    module = _package(tmp_path, DEMO)
    assert [p.name for p in package_catalog.update(tmp_path)] == ["views.demo.po"]
    path = tmp_path / "translations/zh/package/views.demo.po"
    found = package_catalog.problems(tmp_path)
    assert len(found) == 3 and all(": missing: " in line for line in found), found
    assert "package views.demo, line 3: missing: 'a leaf tensor'" in found

    catalog = read_catalog(path)
    zh = {"a leaf tensor": "leaf tensor", "Gradient of `{name}`": "`{name}` 的梯度", "Hint: ": "提示："}
    for message in catalog:
        if message.id:
            message.string = zh[message.id]
    write_catalog(catalog, path)
    assert package_catalog.problems(tmp_path) == [
        "package: widgets/autogradlab/locale/zh/LC_MESSAGES/autogradlab.mo is not what the catalogs compile to "
        "(run `python -m autogradlab.release.translation package-compile`)"
    ]
    package_catalog.compile_mo(tmp_path)
    assert package_catalog.problems(tmp_path) == []
    first = (tmp_path / package_catalog.MO.format(lang="zh")).read_bytes()
    package_catalog.compile_mo(tmp_path)
    assert (tmp_path / package_catalog.MO.format(lang="zh")).read_bytes() == first  # compiling is reproducible
    before = path.read_bytes()
    package_catalog.update(tmp_path, names=["autogradlab.views.demo"])
    assert path.read_bytes() == before  # an update that changes nothing leaves the file as it was

    # an English edit: its translation is kept but stale, with the old English beside it
    module.write_text(DEMO.replace("Gradient of `{name}`", "The gradient of `{name}`"))
    assert any("catalog out of step" in line for line in package_catalog.problems(tmp_path))
    package_catalog.update(tmp_path)
    stale = read_catalog(path).get("The gradient of `{name}`")
    assert stale.fuzzy and stale.string == "`{name}` 的梯度"
    assert '#| msgid "Gradient of `{name}`"' in path.read_text()
    stale_line, mo_line = package_catalog.problems(tmp_path)
    assert stale_line == "package views.demo, line 7: stale: 'The gradient of `{name}`'"
    assert "is not what the catalogs compile to" in mo_line  # a stale translation is not compiled


def test_check_names_lost_fields_f_strings_conflicts_and_orphan_catalogs(tmp_path):
    _package(tmp_path, DEMO + '\n\ndef bad(x):\n    return _(f"value {x}")\n')
    package_catalog.update(tmp_path)
    path = tmp_path / "translations/zh/package/views.demo.po"
    catalog = read_catalog(path)
    for message in catalog:
        if message.id:
            message.string = "梯度" if "{name}" in message.id else "提示："
    write_catalog(catalog, path)
    other = tmp_path / "translations/zh/package/views.gone.po"
    write_catalog(catalog, other)
    other_catalog = read_catalog(other)
    other_catalog.get("Hint: ").string = "提示:"
    write_catalog(other_catalog, other)
    package_catalog.compile_mo(tmp_path)
    found = "\n".join(package_catalog.problems(tmp_path))
    assert "views/demo.py:11: _() wraps an f-string" in found
    assert "line 7: the translation's {fields} differ: 'Gradient of `{name}`'" in found
    assert "package views.gone: a catalog for a module that wraps no message" in found
    assert "translate 'Hint: ' differently" in found


def test_release_check_fails_naming_module_and_msgid(tmp_path, capsys):
    from autogradlab.release.__main__ import main

    _package(tmp_path, DEMO)
    (tmp_path / "solutions").mkdir()
    assert main(["--root", str(tmp_path), "--check"]) == 1
    err = capsys.readouterr().err
    assert "release: translation zh: package views.demo: no catalog for its 3 messages" in err
    package_catalog.update(tmp_path)
    assert main(["--root", str(tmp_path), "--check"]) == 1
    assert "package views.demo, line 7: missing: 'Gradient of `{name}`'" in capsys.readouterr().err


# ---------------------------------------------------------------- the package's own catalogs


ROOT_CATALOGS = sorted(package_catalog.catalogs(package_catalog.Path(__file__).resolve().parent.parent).items())


def test_the_package_messages_are_translated_and_the_mo_is_fresh(repo_root):
    assert package_catalog.problems(repo_root) == []


def test_one_english_text_has_one_translation_across_catalogs(repo_root):
    assert package_catalog.translations(repo_root)[1] == []


@pytest.mark.parametrize("module,catalog", ROOT_CATALOGS, ids=[name for name, _ in ROOT_CATALOGS])
def test_translations_keep_their_fields_code_and_markup(module, catalog):
    code = re.compile(r"`[^`]*`")
    for message in catalog:
        if message.id and message.string:
            assert package_catalog.fields(message.id) == package_catalog.fields(message.string), message.id
            assert sorted(code.findall(message.id)) == sorted(code.findall(message.string)), message.id


# ---------------------------------------------------------------- the package in Chinese


def _graph_view():
    import torch

    from autogradlab.views import GraphView

    w = torch.ones(3, requires_grad=True)
    view = GraphView((w * w).sum(), params={"w": w})
    view.step.value = 1
    return view


def _missing_zero_grad_report():
    import torch

    from autogradlab.models.doctor import diagnose

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(batch):  # no zero_grad: gradients pile up
        x, y = batch
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return diagnose(step, model, opt, [(torch.randn(8, 3), torch.randn(8, 1)) for _ in range(3)])


def test_english_views_and_doctor_are_unchanged(monkeypatch):
    monkeypatch.delenv("AUTOGRADLAB_LANG", raising=False)
    view = _graph_view()
    assert view.shapes_box.description == "shapes" and "<b>Step 1 of 3</b>" in view.info.value
    assert "output tensor" in view.picture.value
    report = _missing_zero_grad_report()
    finding = report["grad-not-cleared"][0]
    assert repr(report).startswith("Doctor: 3 steps observed, loss")
    assert finding.message.startswith("in steps 2, 3 backward added to a gradient still left from before")
    assert finding.fix == "call optimizer.zero_grad() once per optimizer step (before backward or after step)"


def test_a_view_and_a_doctor_finding_speak_chinese(zh):
    view = _graph_view()
    assert view.shapes_box.description == "形状" and "<b>第 1 步，共 3 步</b>" in view.info.value
    assert "输出张量" in view.picture.value  # the graph's legend, drawn in the SVG
    report = _missing_zero_grad_report()
    finding = report["grad-not-cleared"][0]
    assert repr(report).startswith("Doctor：观察了 3 步，loss")
    assert finding.code == "grad-not-cleared"  # codes are ids: never translated
    assert finding.message.startswith("在第 2, 3 步，backward 把梯度累加到了上一次 optimizer.step() 之前留下的梯度上")
    assert finding.fix.startswith("每个优化器步骤调用一次 optimizer.zero_grad()")


# ---------------------------------------------------------------- the views' course texts (models' N_ tables)


def _course_views():
    """Chapter 03's, 06's, 07's and 11's views, showing texts that live in the models' tables."""
    import torch

    from autogradlab.models.compiled import compare
    from autogradlab.models.train_state import graph_stats
    from autogradlab.views import AccumulationLab, CompileView, TrainStepInspector, VJPExplorer

    inspector = TrainStepInspector()
    inspector.next_button.click()  # model.train(): the module mode changed
    option = "min-cut + checkpoint (save matmuls)"
    logging.disable(logging.WARNING)  # pytest's log capture would switch on torch's structured trace: slow
    try:
        compiled = CompileView({("block", option): compare("block", option)}, model="block", option=option)
    finally:
        logging.disable(logging.NOTSET)
    x = torch.ones(2, requires_grad=True)
    return (
        inspector,
        VJPExplorer(op="softmax"),
        AccumulationLab(reduction="mean (no ÷K)"),
        compiled,
        graph_stats([x * x]),
    )


def test_english_course_texts_are_unchanged(monkeypatch):
    monkeypatch.delenv("AUTOGRADLAB_LANG", raising=False)
    inspector, vjp, lab, compiled, graph = _course_views()
    assert "<b>module mode</b>" in inspector.status.value and "forward graph" in inspector.table.value
    assert "<i>one block diag(y) − y yᵀ per slice along dim." in vjp.readout.value
    assert lab.reduction.label == "mean (no ÷K)" and "K = 4, mean (no ÷K), float32" in lab.readout.value
    assert (
        compiled.model_picker.label == "block" and compiled.option_picker.label == "min-cut + checkpoint (save matmuls)"
    )
    assert str(graph) == "alive: 2 nodes, 8 B saved"


def test_the_views_course_texts_speak_chinese(zh):
    inspector, vjp, lab, compiled, graph = _course_views()
    assert "<b>模块模式</b>" in inspector.status.value and "前向计算图" in inspector.table.value
    assert "<i>沿 dim 的每个切片对应一个 diag(y) − y yᵀ 块。" in vjp.readout.value
    assert lab.reduction.label == "mean（不 ÷K）" and "K = 4, mean（不 ÷K）, float32" in lab.readout.value
    assert lab.reduction.value == "mean (no ÷K)"  # the value is the model's name in every language
    assert (
        compiled.model_picker.label == "transformer 块"
        and "min-cut + checkpoint（保存 matmul）" in compiled.picture.value
    )
    assert str(graph) == "存活：2 个节点，保存 8 B"
