"""Chapter 10 checkers: correct answers pass in several forms; plausible wrong ones are rejected with the
mistake id that names them (overfit one batch, batch dependencies); the lab's gate, hint ladder and debrief;
mystery 1's fixes, symptom-chasing changes and partial fixes. Tests read the errors' fields, never their text."""

import copy
import re

import pytest
import torch

from autogradlab.checks.ch10 import (
    LAB,
    check_batch_dependencies,
    check_fix,
    check_mystery_1,
    check_overfit_one_batch,
    debrief,
    doctor_view,
    note,
)
from autogradlab.checks.core import ExerciseError
from autogradlab.models.debug_cases import leaf_cases
from autogradlab.models.doctor import Report
from autogradlab.models.four_checks import dependencies, overfit
from autogradlab.models.mysteries import MYSTERIES, fixed_source, source


def rejected(check, *args) -> ExerciseError:
    with pytest.raises(ExerciseError) as info:
        check(*args)
    return info.value


# ---------------------------------------------------------------------------- exercise 1: overfit one batch


def _overfit(kind="right"):
    def run(model, loss_fn, batch, steps=100, lr=1e-2):
        if kind == "in place":
            trained = model
        elif kind == "shallow copy":
            trained = copy.copy(model)
        else:
            trained = copy.deepcopy(model)
        if kind == "train the caller":
            model.train()
        if kind != "eval mode":
            trained.train()
        params = (model if kind == "optimizer first" else trained).parameters()
        optimizer = torch.optim.SGD(params, lr=lr) if kind == "sgd" else torch.optim.Adam(params, lr=lr)
        if kind == "zero at the end":
            for p in trained.parameters():
                p.grad = None
        x, y = batch
        losses = []
        for _ in range(steps):
            if kind == "new optimizer":
                optimizer = torch.optim.Adam(trained.parameters(), lr=lr)
            if kind not in ("no zero_grad", "zero at the end"):
                optimizer.zero_grad(set_to_none=kind != "zeros")
            loss = loss_fn(trained(x), y)
            loss.backward()
            optimizer.step()
            if kind == "zero at the end":
                optimizer.zero_grad()
            if kind == "after the update":
                with torch.no_grad():
                    loss = loss_fn(trained(x), y)
            losses.append(loss if kind == "tensors" else loss.item())
        return losses

    return run


@pytest.mark.parametrize("kind", ["right", "zeros", "zero at the end"])
def test_overfit_one_batch_passes(kind, capsys):
    check_overfit_one_batch(_overfit(kind))
    assert capsys.readouterr().out.startswith("✓ overfit_one_batch")


@pytest.mark.parametrize(
    "answer, kind, mistake",
    [
        (_overfit("in place"), "contract", "changed-parameters"),
        (_overfit("shallow copy"), "contract", "changed-parameters"),
        (_overfit("train the caller"), "contract", "changed-mode"),
        (_overfit("optimizer first"), "contract", "changed-grad"),
        (_overfit("eval mode"), "value", "eval-mode"),
        (_overfit("no zero_grad"), "value", "no-zero-grad"),
        (_overfit("new optimizer"), "value", "new-optimizer"),
        (_overfit("after the update"), "value", "loss-after-update"),
        (_overfit("sgd"), "value", "sgd"),
        (_overfit("tensors"), "type", "tensors"),
        (
            lambda model, loss_fn, batch, steps=100, lr=1e-2: overfit(model, loss_fn, batch, steps, lr),
            "off-limits",
            None,
        ),
        (
            lambda model, loss_fn, batch, steps=100, lr=1e-2: _overfit()(model, loss_fn, batch, steps + 1, lr),
            "type",
            "length",
        ),
        (lambda *args: (_ for _ in ()).throw(NotImplementedError()), "not-implemented", None),
    ],
)
def test_wrong_overfit_answers_are_rejected_with_their_mistake(answer, kind, mistake):
    error = rejected(check_overfit_one_batch, answer)
    assert error.kind == kind
    assert mistake is None or error.mistake == mistake
    assert error.kind in ("not-implemented", "off-limits", "type") or error.hint is not None


# ---------------------------------------------------------------------------- exercise 2: dependencies


def _loop(model, x):
    x_in = x.detach().clone().requires_grad_()
    flat = model(x_in).reshape(x.shape[0], -1)
    rows = []
    for i in range(x.shape[0]):
        square = torch.zeros(x.shape[0])
        for k in range(flat.shape[1]):
            (grad,) = torch.autograd.grad(flat[i, k], x_in, retain_graph=True)
            square += grad.reshape(x.shape[0], -1).pow(2).sum(dim=1)
        rows.append(square.sqrt())
    return torch.stack(rows)


def _batched_vjp(model, x):
    x_in = x.detach().clone().requires_grad_()
    flat = model(x_in).reshape(-1)
    eye = torch.eye(flat.numel(), dtype=flat.dtype)
    (jac,) = torch.autograd.grad(flat, x_in, grad_outputs=eye, is_grads_batched=True)
    b = x.shape[0]
    return jac.reshape(b, -1, b, x[0].numel()).pow(2).sum(dim=(1, 3)).sqrt()


def _functional(model, x):
    b = x.shape[0]
    jac = torch.autograd.functional.jacobian(model, x)
    return jac.reshape(b, -1, b, x[0].numel()).pow(2).sum(dim=(1, 3)).sqrt()


def _sum_trick(model, x):
    rows = []
    for i in range(x.shape[0]):
        x_in = x.detach().clone().requires_grad_()
        (grad,) = torch.autograd.grad(model(x_in)[i].sum(), x_in)
        rows.append(grad.reshape(x.shape[0], -1).norm(dim=1))
    return torch.stack(rows)


def _abs_sum(model, x):
    b = x.shape[0]
    jac = torch.autograd.functional.jacobian(model, x)
    return jac.reshape(b, -1, b, x[0].numel()).abs().sum(dim=(1, 3))


def _eval_first(model, x):
    model.eval()
    return _loop(model, x)


def _backward(model, x):
    x_in = x.detach().clone().requires_grad_()
    flat = model(x_in).reshape(x.shape[0], -1)
    rows = []
    for i in range(x.shape[0]):
        square = torch.zeros(x.shape[0])
        for k in range(flat.shape[1]):
            x_in.grad = None
            flat[i, k].backward(retain_graph=True)  # also fills the parameters' .grad
            square += x_in.grad.reshape(x.shape[0], -1).pow(2).sum(dim=1)
        rows.append(square.sqrt())
    return torch.stack(rows)


def _callers_x(model, x):
    x.requires_grad_()
    return _loop(model, x.detach())


@pytest.mark.parametrize("answer", [_loop, _batched_vjp, _functional])
def test_batch_dependencies_pass(answer, capsys):
    check_batch_dependencies(answer)
    assert capsys.readouterr().out.startswith("✓ batch_dependencies")


@pytest.mark.parametrize(
    "answer, kind, mistake",
    [
        (_sum_trick, "value", "sum"),
        (lambda model, x: _loop(model, x).t(), "value", "transposed"),
        (_abs_sum, "value", "abs-sum"),
        (_eval_first, "contract", "changed-mode"),
        (lambda model, x: _loop(copy.deepcopy(model).eval(), x), "value", "eval-copy"),
        (_backward, "contract", "changed-grad"),
        (_callers_x, "changed-input", "x-requires-grad"),
        (lambda model, x: torch.diag(_loop(model, x).diag()), "value", "diagonal-only"),
        (lambda model, x: dependencies(model, x), "off-limits", None),
        (lambda model, x: _loop(model, x).tolist(), "type", None),
        (lambda model, x: (_ for _ in ()).throw(NotImplementedError()), "not-implemented", None),
    ],
)
def test_wrong_batch_dependencies_are_rejected_with_their_mistake(answer, kind, mistake):
    error = rejected(check_batch_dependencies, answer)
    assert (error.kind, error.mistake if mistake else None) == (kind, mistake)


# ---------------------------------------------------------------------------- the lab: gate, ladder, debrief


@pytest.fixture(autouse=True)
def fresh_lab():
    LAB.clear()
    yield
    LAB.clear()


def script(tmp_path, number, *replacements, base=None, name="mystery.py"):
    """A copy of mystery ``number`` (shipped, or ``base`` text) with ``(old, new)`` text replacements."""
    text = source(number) if base is None else base
    for old, new in replacements:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = tmp_path / name
    path.write_text(text)
    return path


HYPOTHESIS = "the head's weight never gets a gradient, so every logit is the bias"
EVIDENCE = "after 1 step head.weight.grad is None; loss 0.6931 = ln 2"


@pytest.mark.parametrize(
    "hypothesis, evidence, kind",
    [
        ("", EVIDENCE, "no-hypothesis"),
        ("no idea", EVIDENCE, "no-hypothesis"),
        (None, EVIDENCE, "no-hypothesis"),
        (HYPOTHESIS, "", "no-evidence"),
        (HYPOTHESIS, "head.weight.grad is None", "no-evidence"),
        (HYPOTHESIS, 3, "no-evidence"),
    ],
)
def test_a_note_needs_a_hypothesis_and_measured_evidence(hypothesis, evidence, kind):
    assert rejected(note, 1, hypothesis, evidence).kind == kind
    assert not LAB.get(1) or not LAB[1].hypothesis


def test_the_doctor_opens_after_a_note_and_sees_mystery_1(tmp_path, capsys):
    path = script(tmp_path, 1)
    assert rejected(doctor_view, 1, path).kind == "gate"
    note(1, HYPOTHESIS, EVIDENCE)
    report = doctor_view(1, path)
    assert isinstance(report, Report) and "missing-grad" in report.codes and report.steps == 3


@pytest.mark.parametrize("number", [1, 2, 3, 4])
def test_hints_escalate_with_attempts_and_a_note(tmp_path, number):
    path = script(tmp_path, number)
    levels = []
    for attempt in range(5):
        if attempt == 3:
            note(number, HYPOTHESIS, EVIDENCE)
        error = rejected(check_fix, number, path)
        assert (error.kind, error.mistake) == ("unchanged", "unchanged")
        levels.append((error.measured["hint_level"], error.hint is None))
    # no hint at first; the symptom; without a note the ladder waits; which tool, then where, after the note
    assert levels == [(0, True), (1, False), (1, False), (2, False), (3, False)]
    assert rejected(check_fix, number, path).measured["hint_level"] == len(MYSTERIES[number].ladder)  # the top


def test_the_debrief_opens_once_the_fix_passes(tmp_path, capsys):
    assert rejected(debrief, 1).kind == "gate"
    check_mystery_1(script(tmp_path, 1, base=fixed_source(1)))
    assert capsys.readouterr().out.startswith("✓ mystery 1")
    assert debrief(1).data == MYSTERIES[1].debrief


CJK = re.compile("[\u4e00-\u9fff]")


def test_the_ladder_the_debrief_and_the_input_labels_speak_chinese_when_asked(tmp_path, monkeypatch, capsys):
    path, symptom = script(tmp_path, 1), MYSTERIES[1].ladder[0]
    rejected(check_fix, 1, path)  # the first failure shows no rung
    error = rejected(check_fix, 1, path)
    assert error.hint == symptom[0].upper() + symptom[1:]  # English: the rung as written
    monkeypatch.setenv("AUTOGRADLAB_LANG", "zh")
    error = rejected(check_fix, 1, path)
    assert error.measured["hint_level"] == 1 and CJK.search(error.hint) and "entropy" not in error.hint
    LAB[1].solved = True
    shown = debrief(1).data
    assert CJK.search(shown) and "The bug" not in shown and "`self.weight.data.float()`" in shown
    assert CJK.search(leaf_cases()[0][0])


# ---------------------------------------------------------------------------- mystery 1


BUG_1 = "self.weight.data.float()"


@pytest.mark.parametrize(
    "replacements",
    [
        [(BUG_1, "self.weight.float()")],
        [(BUG_1, "self.weight")],
        [(BUG_1, "self.weight.to(torch.float32)")],
        [
            (BUG_1, "self.weight.float()"),
            ('        self.grad_norm = float("nan")\n', "        self.grad_norm = 0.0\n"),
            ("module.bias.data.zero_()", "nn.init.zeros_(module.bias)"),
        ],
    ],
    ids=["float", "no cast", "to float32", "and tidied"],
)
def test_mystery_1_fixes_pass(tmp_path, replacements, capsys):
    check_mystery_1(script(tmp_path, 1, *replacements))
    assert capsys.readouterr().out.startswith("✓ mystery 1")


@pytest.mark.parametrize(
    "replacements, kind, mistake",
    [
        ([], "unchanged", "unchanged"),
        ([(BUG_1, "self.weight.detach().float()")], "unchanged", "unchanged"),
        ([("    lr: float = 3e-3", "    lr: float = 3e-2")], "symptom-chasing", "learning-rate"),
        (
            [(BUG_1, "self.weight.float()"), ("    lr: float = 3e-3", "    lr: float = 1e-2")],
            "symptom-chasing",
            "learning-rate",
        ),
        ([('GradScaler("cpu")', 'GradScaler("cpu", init_scale=2.0**10)')], "symptom-chasing", "loss-scale"),
        ([("    max_grad_norm: float = 1.0", "    max_grad_norm: float = 0.005")], "not-fixed", "smaller-gradients"),
        (
            [
                (
                    "self.weight = nn.Parameter(torch.zeros(out, dim))",
                    "self.weight = nn.Parameter(0.1 * torch.randn(out, dim))",
                )
            ],
            "changed-elsewhere",
            "start",
        ),
        (
            [
                (BUG_1, "self.weight.float()"),
                ("nn.GELU(),\n            nn.LayerNorm", "nn.ReLU(),\n            nn.LayerNorm"),
            ],
            "not-fixed",
            "gradients",
        ),
        (
            [
                (
                    "        with torch.autocast(h.device.type, enabled=False):\n            return F.linear(h.float(), self.weight.data.float(), self.bias.float())",
                    "        return F.linear(h, self.weight, self.bias)",
                )
            ],
            "not-fixed",
            "gradients",
        ),
        ([('"weight_decay": cfg.weight_decay}', '"weight_decay": 0.0}')], "changed-elsewhere", "optimizer"),
    ],
    ids=[
        "unchanged",
        "detach",
        "lr x10",
        "fixed but lr",
        "loss scale",
        "clipping",
        "random head init",
        "relu",
        "head in bf16",
        "no weight decay",
    ],
)
def test_wrong_mystery_1_fixes_are_rejected_without_naming_the_bug(tmp_path, replacements, kind, mistake):
    error = rejected(check_mystery_1, script(tmp_path, 1, *replacements))
    assert (error.kind, error.mistake) == (kind, mistake)
    assert error.measured["hint_level"] == 0  # a first attempt gets the category only, no ladder hint


def test_a_script_that_breaks_its_structure_is_reported_where_it_raises(tmp_path):
    path = script(tmp_path, 1, ("def fit(self, log=print)", "def train(self, log=print)"))
    error = rejected(check_fix, 1, path)
    assert (error.kind, error.mistake) == ("contract", "structure") and error.hint is not None
    path.write_text(
        source(1).replace("self.optimizer.zero_grad(set_to_none=True)", "self.optimizer.zero_grad(set_to_none=True")
    )
    error = rejected(check_fix, 1, path)
    assert (error.kind, error.mistake) == ("raised", None)


def test_a_missing_script_is_named(tmp_path):
    assert rejected(check_mystery_1, tmp_path / "nope.py").kind == "type"


def test_the_file_is_imported_afresh_at_each_check(tmp_path, capsys):
    path = script(tmp_path, 1)
    assert rejected(check_mystery_1, path).mistake == "unchanged"
    path.write_text(fixed_source(1))
    check_mystery_1(path)
    assert capsys.readouterr().out.startswith("✓ mystery 1")


@pytest.mark.parametrize("answer, mistake", [(_overfit("in place"), "changed-parameters"), (_callers_x, None)])
def test_a_rejected_answer_speaks_chinese_when_asked(answer, mistake, monkeypatch):
    """Under AUTOGRADLAB_LANG=zh the checker's summary and hint are Chinese; kind and mistake stay."""
    monkeypatch.setenv("AUTOGRADLAB_LANG", "zh")
    check = check_batch_dependencies if mistake is None else check_overfit_one_batch
    error, chinese = rejected(check, answer), re.compile("[\u4e00-\u9fff]")
    assert error.mistake == (mistake or "x-requires-grad"), str(error)
    assert chinese.search(error.summary) and chinese.search(str(error).splitlines()[-1]), str(error)  # the hint line
