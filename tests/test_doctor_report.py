"""The doctor's report and code table: readable, deterministic text; an HTML table for notebooks."""

import pytest
import torch

from autogradlab.models.doctor import CODES, Finding, Report, code_table, graph_leaves


def _report():
    return Report(
        [
            Finding("data-bypass", "warning", "head.weight", "changed outside optimizer.step()"),
            Finding("missing-grad", "error", "conv.weight", "no gradient <detach>"),
            Finding("eval-mode-in-training", "info", "body.1", "frozen block"),
        ],
        steps=3,
        losses=[0.6931, 0.6931, 0.6931],
    )


def test_findings_are_sorted_errors_first_and_codes_is_a_set():
    report = _report()
    assert [f.severity for f in report.findings] == ["error", "warning", "info"]
    assert report.codes == {"data-bypass", "missing-grad", "eval-mode-in-training"}
    assert not report.ok and len(report.errors) == 1 and len(report.warnings) == 1
    assert report["missing-grad"][0].where == "conv.weight"


def test_text_repr_is_deterministic_and_has_a_fix_per_finding():
    text = repr(_report())
    assert text == repr(_report()) == str(_report())
    assert text.splitlines()[0] == "Doctor: 3 steps observed, loss 0.693 → 0.693; 1 error, 1 warning, 1 info."
    assert text.count("fix: ") == 3
    assert "0x" not in text


def test_html_is_a_table_with_escaped_text_and_fix_hints():
    page = _report()._repr_html_()
    assert "<table>" in page and page.count("<tr>") == 4
    assert "&lt;detach&gt;" in page and "fix:" in page


def test_empty_report():
    report = Report([], steps=2, losses=[1.0, 0.5])
    assert report.ok and repr(report) == "Doctor: 2 steps observed, loss 1 → 0.5; no findings."
    assert "<table>" not in report._repr_html_()


def test_unknown_code_or_severity_is_rejected():
    with pytest.raises(ValueError, match="unknown doctor code"):
        Finding("typo", "error", "x", "y")
    with pytest.raises(ValueError, match="severity"):
        Finding("missing-grad", "fatal", "x", "y")


def test_code_table_lists_every_code_with_meaning_and_blind_spots():
    text = repr(code_table())
    assert all(code in text for code in CODES)
    assert all(c.meaning and c.fix and c.blind_spots for c in CODES.values())
    assert all(CODES[code].blind_spots[:30] in repr(code_table(blind_spots=True)) for code in CODES)
    assert code_table()._repr_html_().count("<tr>") == len(CODES) + 1


def test_graph_leaves_walks_deep_graphs_without_recursion():
    w = torch.ones(1, requires_grad=True)
    x = torch.zeros(1)
    for _ in range(10_000):
        x = x + w
    assert [t is w for t in graph_leaves(x)] == [True]
    assert graph_leaves(torch.ones(1)) == [] and graph_leaves(3.0) == []


def test_graph_leaves_survive_backward():
    a, b = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
    loss = (a * b).sum()
    loss.backward()
    assert {id(t) for t in graph_leaves(loss)} == {id(a), id(b)}
