"""Chapter 11 checkers: right answers pass; plausible wrong ones are rejected with the mistake named (fields only)."""

import logging
import re

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import CheckpointPolicy

from autogradlab.checks.ch11 import (
    SAVED_MISTAKES,
    STEP_MISTAKES,
    _policies,
    check_checkpoint_policy,
    check_saved_bytes,
    check_step_without_breaks,
)
from autogradlab.checks.core import ExerciseError
from autogradlab.models.compiled import saved_values


@pytest.fixture(autouse=True)
def _compiler_logs_off():
    logging.disable(logging.WARNING)  # pytest's log capture would switch on torch's structured trace: slow
    yield
    logging.disable(logging.NOTSET)


def rejected(call) -> ExerciseError:
    with pytest.raises(ExerciseError) as info:
        call()
    return info.value


# --------------------------------------------------------------------------- exercise 1


def by_saved_values(forward, backward):
    return sum({v.base: v.base_nbytes for v in saved_values(forward, backward) if v.source == "new"}.values())


def test_an_answer_that_edits_the_graphs_leaves_the_next_check_its_own():
    """The compiled graphs are made once per process; each answer reads a copy, so one that edits them
    (here: drops every node's metadata, which saved_values reads) cannot spoil a later check."""

    def edits(forward, backward):
        for node in [*forward.graph.nodes, *backward.graph.nodes]:
            node.meta.clear()
        return 0

    assert rejected(lambda: check_saved_bytes(edits)).kind == "value"
    check_saved_bytes(by_saved_values)


def by_walking_views(forward, backward):
    """An alternative: the saved values are the forward outputs named like the backward's non-tangent inputs."""
    wanted = {p.name for p in backward.graph.nodes if p.op == "placeholder" and not p.name.startswith("tangents")}
    bases = set()
    for node in forward.graph.nodes:
        if node.name in wanted:
            while node.op == "call_function" and node.target.is_view:
                node = node.args[0]
            if node.op != "placeholder":
                bases.add(node)
    return sum(b.meta["val"].numel() * b.meta["val"].element_size() for b in bases)


def test_saved_bytes_must_be_a_number():
    error = rejected(lambda: check_saved_bytes(lambda f, b: [1, 2]))
    assert error.kind == "type"
    assert rejected(lambda: check_saved_bytes(lambda f, b: 1 / 0)).kind == "raised"


# --------------------------------------------------------------------------- exercise 2


def with_where(model, x, y):
    loss = F.mse_loss(model(x).clamp(-10, 10), y)
    return torch.where(loss > 1, loss / loss.detach(), loss)


def with_a_factor(model, x, y):
    """An alternative: clamp with min/max and multiply by a factor that carries no gradient."""
    out = torch.clamp(model(x), min=-10.0, max=10.0)
    loss = ((out - y) ** 2).mean()
    return loss * torch.where(loss.detach() > 1, 1 / loss.detach(), torch.ones_like(loss))


def keeps_print(model, x, y):
    loss = with_where(model, x, y)
    print("loss", loss)
    return loss


def keeps_item(model, x, y):
    loss = F.mse_loss(model(x).clamp(-10, 10), y)
    return torch.where(loss > 1, loss / loss.item(), loss)


def keeps_if(model, x, y):
    loss = F.mse_loss(model(x).clamp(-10, 10), y)
    if loss > 1:
        loss = loss / loss.detach()
    return loss


@torch.compiler.disable
def normalized(loss):
    return loss / loss.item() if loss.item() > 1 else loss


def disabled(model, x, y):
    return normalized(F.mse_loss(model(x).clamp(-10, 10), y))


@pytest.mark.parametrize(
    ("answer", "mistake"), [(keeps_print, "print"), (keeps_item, "item"), (keeps_if, "branch"), (disabled, "disabled")]
)
def test_steps_that_still_break_or_skip_the_graph_are_named(answer, mistake):
    error = rejected(lambda: check_step_without_breaks(answer))
    assert (error.kind, error.mistake) == ("graph-break", mistake)


def test_a_step_that_returns_a_number_is_a_type_error():
    error = rejected(lambda: check_step_without_breaks(lambda m, x, y: with_where(m, x, y).item()))
    assert error.kind == "type"


# --------------------------------------------------------------------------- exercise 3


def smaller_output(ctx, op, *args, **kwargs):
    matmul = op in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)
    small = matmul and args[-1].shape[-1] < args[-2].shape[-1]
    return CheckpointPolicy.MUST_SAVE if small else CheckpointPolicy.PREFER_RECOMPUTE


def by_output_numel(ctx, op, *args, **kwargs):
    """An alternative: save a matmul whose output has fewer elements than its input."""
    if op not in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
        return CheckpointPolicy.PREFER_RECOMPUTE
    inp, weight = args[-2], args[-1]
    out = inp.shape[0] * weight.shape[1]
    return CheckpointPolicy.MUST_SAVE if out < inp.numel() else CheckpointPolicy.PREFER_RECOMPUTE


@pytest.mark.parametrize("name", list(_policies()))
def test_wrong_policies_are_named(name):
    error = rejected(lambda: check_checkpoint_policy(_policies()[name]))
    assert (error.kind, error.mistake) == ("contract", name) and error.hint


def test_a_policy_that_returns_a_bool_is_a_type_error():
    error = rejected(lambda: check_checkpoint_policy(lambda ctx, op, *a, **k: True))
    assert error.kind == "type" and error.hint


def test_the_chapter_shows_logged_step_as_the_package_defines_it():
    import inspect
    from pathlib import Path

    import nbformat

    from autogradlab.models.compiled.exercises import logged_step

    notebook = Path(__file__).resolve().parent.parent / "solutions" / "11_compile.ipynb"
    prose = "\n".join(c.source for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "markdown")
    assert inspect.getsource(logged_step).rstrip() in prose


RIGHT = [
    (check_saved_bytes, by_saved_values),
    (check_saved_bytes, by_walking_views),
    (check_saved_bytes, lambda f, b: torch.tensor(by_walking_views(f, b))),
    (check_step_without_breaks, with_where),
    (check_step_without_breaks, with_a_factor),
    (check_checkpoint_policy, smaller_output),
    (check_checkpoint_policy, by_output_numel),
]


@pytest.mark.parametrize(("checker", "answer"), RIGHT, ids=[f"{c.__name__}-{i}" for i, (c, _) in enumerate(RIGHT)])
def test_right_answers_pass(checker, answer, capsys):
    checker(answer)
    assert capsys.readouterr().out.startswith("✓")


WRONG = [(check_saved_bytes, m) for m in SAVED_MISTAKES] + [(check_step_without_breaks, m) for m in STEP_MISTAKES]


@pytest.mark.parametrize(("checker", "mistake"), WRONG, ids=[m.id for _, m in WRONG])
def test_wrong_values_are_named(checker, mistake):
    error = rejected(lambda: checker(mistake.compute))
    assert (error.kind, error.mistake) == ("value", mistake.id) and error.hint


def test_a_rejected_answer_speaks_chinese_when_asked(monkeypatch):
    """Under AUTOGRADLAB_LANG=zh the checker's summary and hint are Chinese; kind and mistake stay."""
    monkeypatch.setenv("AUTOGRADLAB_LANG", "zh")
    error, chinese = rejected(lambda: check_step_without_breaks(keeps_print)), re.compile("[\u4e00-\u9fff]")
    assert (error.kind, error.mistake) == ("graph-break", "print"), str(error)
    assert chinese.search(error.summary) and chinese.search(str(error).splitlines()[-1]), str(error)  # the hint line
