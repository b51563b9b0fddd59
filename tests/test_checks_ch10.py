"""Chapter 10 checkers: correct answers pass in several forms; plausible wrong ones are rejected with a hint
that names the mistake (overfit one batch, batch dependencies, the two mysteries and the hypothesis gate)."""

import copy
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from autogradlab.checks.ch10 import (
    batches_of,
    check_batch_dependencies,
    check_mystery_1,
    check_mystery_2,
    check_overfit_one_batch,
    clusters,
    doctor_after_hypothesis,
    readings,
    reference_dependencies,
    reference_overfit,
)
from autogradlab.checks.core import ExerciseError
from autogradlab.models.doctor import Report

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


def _overfit_with_reference(model, loss_fn, batch, steps=100, lr=1e-2):
    return reference_overfit(model, loss_fn, batch, steps, lr)


@pytest.mark.parametrize("kind", ["right", "zeros", "zero at the end"])
def test_overfit_one_batch_passes(kind, capsys):
    check_overfit_one_batch(_overfit(kind))
    assert capsys.readouterr().out.startswith("✓ overfit_one_batch")


@pytest.mark.parametrize(
    "answer, hint",
    [
        (_overfit("in place"), "changed the caller's parameters"),
        (_overfit("shallow copy"), "changed the caller's parameters"),
        (_overfit("train the caller"), "changed the caller's mode"),
        (_overfit("optimizer first"), "an optimizer built from model.parameters() instead of the copy's"),
        (_overfit("eval mode"), "put the copy in training mode"),
        (_overfit("no zero_grad"), "gradients accumulate across steps"),
        (_overfit("new optimizer"), "a new Adam every step"),
        (_overfit("after the update"), "before its update"),
        (_overfit("sgd"), "torch.optim.Adam"),
        (_overfit("tensors"), "Python floats"),
        (_overfit_with_reference, "reference_overfit is the checker's answer"),
        (
            lambda model, loss_fn, batch, steps=100, lr=1e-2: _overfit()(model, loss_fn, batch, steps + 1, lr),
            "one loss per step",
        ),
        (lambda *args: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    ],
)
def test_wrong_overfit_answers_are_rejected_with_their_hint(answer, hint):
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_overfit_one_batch(answer)


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


def _sum_trick(model, x):
    rows = []
    for i in range(x.shape[0]):
        x_in = x.detach().clone().requires_grad_()
        (grad,) = torch.autograd.grad(model(x_in)[i].sum(), x_in)
        rows.append(grad.reshape(x.shape[0], -1).norm(dim=1))
    return torch.stack(rows)


def _transposed(model, x):
    return _loop(model, x).t()


def _abs_sum(model, x):
    b = x.shape[0]
    jac = torch.autograd.functional.jacobian(model, x)
    return jac.reshape(b, -1, b, x[0].numel()).abs().sum(dim=(1, 3))


def _eval_first(model, x):
    model.eval()
    return _loop(model, x)


def _eval_copy(model, x):
    return _loop(copy.deepcopy(model).eval(), x)


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


def _diagonal_only(model, x):
    d = _loop(model, x)
    return torch.diag(d.diag())  # only ∂out_i/∂x_i: assumes the examples are independent


def _functional(model, x):
    b = x.shape[0]
    jac = torch.autograd.functional.jacobian(model, x)
    return jac.reshape(b, -1, b, x[0].numel()).pow(2).sum(dim=(1, 3)).sqrt()


def _calls_reference(model, x):
    return reference_dependencies(model, x)


@pytest.mark.parametrize("answer", [_loop, _batched_vjp, _functional])
def test_batch_dependencies_pass(answer, capsys):
    check_batch_dependencies(answer)
    assert capsys.readouterr().out.startswith("✓ batch_dependencies")


@pytest.mark.parametrize(
    "answer, hint",
    [
        (_sum_trick, "a sum of outputs can cancel"),
        (_transposed, "rows are outputs"),
        (_abs_sum, "Frobenius norm"),
        (_eval_first, "changed the model's mode"),
        (_eval_copy, "keep the model's mode"),
        (_backward, "left gradients in the model's parameters"),
        (_callers_x, "changed the x it was given"),
        (_diagonal_only, "only the diagonal"),
        (_calls_reference, "reference_dependencies is the checker's answer"),
        (lambda model, x: _loop(model, x).tolist(), "Expected a tensor"),
        (lambda model, x: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    ],
)
def test_wrong_batch_dependencies_are_rejected_with_their_hint(answer, hint):
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_batch_dependencies(answer)


# ---------------------------------------------------------------------------- mysteries


def _classifier_script(shuffle="one permutation", zero_grad=True, hidden=64):
    def script(seed=0):
        x, y = clusters(1024, seed=seed)
        gen = torch.Generator().manual_seed(seed)
        if shuffle == "one permutation":
            order = torch.randperm(len(x), generator=gen)
            x, y = x[order], y[order]
        elif shuffle == "fresh generator per call":

            def shuffled(t):
                return t[torch.randperm(len(t), generator=torch.Generator().manual_seed(seed))]

            x, y = shuffled(x), shuffled(y)
        elif shuffle == "two permutations":  # the bug
            x = x[torch.randperm(len(x), generator=gen)]
            y = y[torch.randperm(len(y), generator=gen)]
        elif shuffle == "inputs only":
            x = x[torch.randperm(len(x), generator=gen)]
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(2, hidden), nn.ReLU(), nn.Linear(hidden, 3))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

        def step(batch):
            xb, yb = batch
            if zero_grad:
                optimizer.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
            return loss.item()

        return step, model, optimizer, batches_of(x, y, 64)

    return script


@pytest.mark.parametrize("shuffle", ["one permutation", "fresh generator per call", "none"])
def test_mystery_1_fixes_pass(shuffle, capsys):
    check_mystery_1(_classifier_script(shuffle))
    assert capsys.readouterr().out.startswith("✓ fixed_mystery_1")


@pytest.mark.parametrize(
    "answer, hint",
    [
        (_classifier_script("two permutations"), "do inputs and labels still belong together"),
        (_classifier_script("two permutations", hidden=256), "do inputs and labels still belong together"),
        (_classifier_script("inputs only"), "do inputs and labels still belong together"),
        (_classifier_script(zero_grad=False), "grad-not-cleared"),
        (lambda seed=0: _classifier_script()(seed)[:3], "should return (step, model, optimizer, batches)"),
        ("fixed", "should be a function"),
        (lambda seed=0: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    ],
)
def test_wrong_mystery_1_fixes_are_rejected(answer, hint):
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_mystery_1(answer)


def _regression_script(loss="squeeze", zero_grad=True):
    def script(seed=0):
        x, y = readings(1024, seed=seed)
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 1))
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)

        def step(batch):
            xb, yb = batch
            if zero_grad:
                optimizer.zero_grad()
            prediction = model(xb)
            if loss == "squeeze":
                value = ((prediction.squeeze(1) - yb) ** 2).mean()
            elif loss == "unsqueeze":
                value = ((prediction - yb.unsqueeze(1)) ** 2).mean()
            elif loss == "mse_loss":
                value = F.mse_loss(prediction.view(-1), yb)
            elif loss == "broadcast":  # the bug
                value = ((prediction - yb) ** 2).mean()
            elif loss == "mse_loss broadcast":
                with pytest.warns(UserWarning):
                    value = F.mse_loss(prediction, yb)
            elif loss == "sum over pairs / B":
                value = ((prediction - yb) ** 2).sum() / len(yb)
            value.backward()
            optimizer.step()
            return value.item()

        return step, model, optimizer, batches_of(x, y, 64)

    return script


@pytest.mark.parametrize("loss", ["squeeze", "unsqueeze", "mse_loss"])
def test_mystery_2_fixes_pass(loss, capsys):
    check_mystery_2(_regression_script(loss))
    assert capsys.readouterr().out.startswith("✓ fixed_mystery_2")


@pytest.mark.parametrize(
    "answer, hint",
    [
        (_regression_script("broadcast"), "compare the shapes"),
        (_regression_script("mse_loss broadcast"), "compare the shapes"),
        (_regression_script("sum over pairs / B"), "compare the shapes"),
        (_regression_script(zero_grad=False), "grad-not-cleared"),
        (lambda seed=0: _regression_script()(seed)[1:], "should return (step, model, optimizer, batches)"),
        (lambda seed=0: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    ],
)
def test_wrong_mystery_2_fixes_are_rejected(answer, hint):
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_mystery_2(answer)


@pytest.mark.parametrize("hypothesis", ["", "   ", None, "bug", 42])
def test_the_doctor_waits_for_a_hypothesis(hypothesis):
    with pytest.raises(ExerciseError, match="Write your first hypothesis"):
        doctor_after_hypothesis(hypothesis, _classifier_script("two permutations"))


def test_the_doctor_runs_after_a_hypothesis_and_is_silent_on_the_mysteries(capsys):
    report = doctor_after_hypothesis(
        "the labels look shuffled apart from the inputs", _classifier_script("two permutations")
    )
    assert isinstance(report, Report) and report.ok and report.steps == 3
    assert capsys.readouterr().out.startswith("Your hypothesis: the labels look shuffled")
    assert doctor_after_hypothesis("a shape broadcasts in the loss", _regression_script("broadcast")).ok
