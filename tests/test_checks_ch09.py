"""Chapter 09 checkers: repaired models and steps pass in several correct forms; each typical
broken one is rejected with its own hint (most through the doctor's finding)."""

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from autogradlab.checks.ch09 import (
    CLIP_NORM,
    HEAD_LIMIT,
    TinyConvNet,
    _layer_scale_forward,
    check_amp_step,
    check_layer_scale_mlp,
    check_repaired_convnet,
    check_train_step,
    reference_amp_step,
    reference_train_step,
)
from autogradlab.checks.core import ExerciseError

# ---------------------------------------------------------------------------- exercise 1


def _convnet(body):
    return type("Candidate", (TinyConvNet,), {"forward": body})


def _fixed_logged(self, x):
    f = self.features(x)
    self.logged = f.detach()
    f = f / f.norm(dim=1, keepdim=True)
    return self.head(f).squeeze(1)


def _fixed_eps(self, x):
    f = self.features(x)
    return self.head(f / (f.norm(dim=1, keepdim=True) + 1e-6)).squeeze(-1)


def _fixed_normalize(self, x):
    return self.head(F.normalize(self.features(x), dim=1))[:, 0]


def _detached(self, x):
    f = self.features(x).detach()
    f /= f.norm(dim=1, keepdim=True)
    return self.head(f).squeeze(1)


def _in_place(self, x):
    f = self.features(x)
    f /= f.norm(dim=1, keepdim=True)
    return self.head(f).squeeze(1)


def _wrong_dim(self, x):
    f = self.features(x)
    return self.head(f / (f.norm(dim=0, keepdim=True) + 1e-6)).squeeze(1)


def _not_normalised(self, x):
    return self.head(self.features(x)).squeeze(1)


def _no_squeeze(self, x):
    return self.head(F.normalize(self.features(x), dim=1))


def _not_implemented(self, x):
    raise NotImplementedError()


@pytest.mark.parametrize("body", [_fixed_logged, _fixed_eps, _fixed_normalize])
def test_repaired_convnets_pass(body, capsys):
    check_repaired_convnet(_convnet(body))
    assert capsys.readouterr().out.startswith("✓ RepairedConvNet")


@pytest.mark.parametrize(
    "body, hint",
    [
        (_detached, "gets no gradient"),
        (_in_place, "in-place normalisation"),
        (_wrong_dim, "dim=1"),
        (_not_normalised, "not normalised"),
        (_no_squeeze, "squeeze"),
        (_not_implemented, "NotImplementedError"),
    ],
)
def test_broken_convnets_are_rejected_with_their_hint(body, hint):
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_repaired_convnet(_convnet(body))


def test_a_class_that_is_not_a_tinyconvnet_is_rejected():
    with pytest.raises(ExerciseError, match="subclass TinyConvNet"):
        check_repaired_convnet(nn.ReLU)


# ---------------------------------------------------------------------------- exercise 2


def _amp(clip="after", clamp="no_grad", zero_grad=True, stepper="scaler", autocast=True, ret="detach"):
    def step(model, optimizer, scaler, batch):
        x, y = batch
        if zero_grad:
            optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(x)
            loss = F.binary_cross_entropy_with_logits(logits.float(), y)
        scaler.scale(loss).backward()
        if clip == "before":
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
        scaler.unscale_(optimizer)
        if clip == "after":
            torch.nn.utils.clip_grad_norm_(list(model.parameters()), max_norm=CLIP_NORM)
        if stepper == "scaler":
            scaler.step(optimizer)
        else:
            optimizer.step()
        scaler.update()
        if clamp == "no_grad":
            with torch.no_grad():
                model.head.weight.clamp_(-HEAD_LIMIT, HEAD_LIMIT)
                model.head.bias.clamp_(-HEAD_LIMIT, HEAD_LIMIT)
        elif clamp == "data":
            for p in model.head.parameters():
                p.data.clamp_(-HEAD_LIMIT, HEAD_LIMIT)
        return loss.item() if ret == "item" else loss.detach()

    return step


def _amp_zero_grad_at_end(model, optimizer, scaler, batch):
    loss = reference_amp_step(model, optimizer, scaler, batch)
    optimizer.zero_grad(set_to_none=True)
    return loss


def _amp_without_scaler(model, optimizer, scaler, batch):
    x, y = batch
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.binary_cross_entropy_with_logits(model(x).float(), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
    optimizer.step()
    with torch.no_grad():
        for p in model.head.parameters():
            p.clamp_(-HEAD_LIMIT, HEAD_LIMIT)
    return loss


@pytest.mark.parametrize("step", [reference_amp_step, _amp(ret="item"), _amp_zero_grad_at_end])
def test_correct_amp_steps_pass(step, capsys):
    check_amp_step(step)
    assert capsys.readouterr().out.startswith("✓ amp_step")


@pytest.mark.parametrize(
    "step, hint",
    [
        (_amp(clip="before"), "call scaler.unscale_(optimizer) before clip_grad_norm_"),
        (_amp(clamp="data"), "not through p.data"),
        (_amp(zero_grad=False), "zero_grad() at the start"),
        (_amp(clip="none"), "the gradients are not clipped"),
        (_amp(clamp="none"), "the head is not kept in"),
        (_amp(autocast=False), "torch.autocast"),
        (_amp(stepper="optimizer"), "calls optimizer.step() itself"),
        (_amp_without_scaler, "does not use the GradScaler"),
        (lambda model, optimizer, scaler, batch: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    ],
)
def test_broken_amp_steps_are_rejected_with_their_hint(step, hint):
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_amp_step(step)


def _clamp_everything(model, optimizer, scaler, batch):
    loss = reference_amp_step(model, optimizer, scaler, batch)
    with torch.no_grad():
        for p in model.parameters():
            p.clamp_(-HEAD_LIMIT, HEAD_LIMIT)
    return loss


def _amp_unscaled_backward(model, optimizer, scaler, batch):
    x, y = batch
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.binary_cross_entropy_with_logits(model(x).float(), y)
    loss.backward()  # the bug: the loss is not scaled
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def _amp_no_scaler_step(model, optimizer, scaler, batch):
    x, y = batch
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.binary_cross_entropy_with_logits(model(x).float(), y)
    scaler.scale(loss).backward()
    optimizer.step()  # the bug: scaled gradients, and no inf check before update()
    scaler.update()
    return loss.detach()


@pytest.mark.parametrize(
    "step, hint",
    [(_amp_unscaled_backward, "scaler.scale(loss).backward()"), (_amp_no_scaler_step, "step with scaler.step(optimizer)")],
)
def test_steps_that_raise_inside_the_scaler_get_a_hint(step, hint):
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_amp_step(step)


def test_clamping_every_parameter_is_named():
    with pytest.raises(ExerciseError, match="only the head is constrained"):
        check_amp_step(_clamp_everything)


# ---------------------------------------------------------------------------- exercise 3


def _scale_mlp(make_scales, forward=_layer_scale_forward):
    class Candidate(nn.Module):
        def __init__(self, sizes):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))
            self.scales = make_scales(sizes)

        def forward(self, x):
            return forward(self, x)

    return Candidate


def _parameter_list_appended(sizes):
    scales = nn.ParameterList()
    for width in sizes[1:]:
        scales.append(nn.Parameter(torch.ones(width)))
    return scales


CORRECT_SCALES = {
    "ParameterList of Parameters": lambda sizes: nn.ParameterList(nn.Parameter(torch.ones(b)) for b in sizes[1:]),
    "ParameterList of tensors": lambda sizes: nn.ParameterList([torch.ones(b) for b in sizes[1:]]),
    "appended": _parameter_list_appended,
}

WRONG_SCALES = {
    "Python list": (lambda sizes: [nn.Parameter(torch.ones(b)) for b in sizes[1:]], "nn.ParameterList"),
    "list of grad tensors": (lambda sizes: [torch.ones(b, requires_grad=True) for b in sizes[1:]], "nn.ParameterList"),
    "plain tensors": (lambda sizes: [torch.ones(b) for b in sizes[1:]], "does not require grad"),
    "random start": (lambda sizes: nn.ParameterList(torch.randn(b) for b in sizes[1:]), "start at ones"),
    "one scalar per layer": (lambda sizes: nn.ParameterList(torch.ones(1) for b in sizes[1:]), "one factor per output"),
    "too few": (lambda sizes: nn.ParameterList([torch.ones(sizes[1])]), "one scale per layer"),
    "not implemented": (lambda sizes: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
}


@pytest.mark.parametrize("name", CORRECT_SCALES)
def test_registered_scales_pass(name, capsys):
    check_layer_scale_mlp(_scale_mlp(CORRECT_SCALES[name]))
    assert capsys.readouterr().out.startswith("✓ LayerScaleMLP")


@pytest.mark.parametrize("name", WRONG_SCALES)
def test_unregistered_scales_are_rejected_with_their_hint(name):
    make, hint = WRONG_SCALES[name]
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_layer_scale_mlp(_scale_mlp(make))


# ---------------------------------------------------------------------------- exercise 4


def _train(train=True, ret="detach", zero_grad="start"):
    def step(model, optimizer, batch):
        x, y = batch
        if train:
            model.train()
        if zero_grad == "start":
            optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        if zero_grad == "end":
            optimizer.zero_grad(set_to_none=True)
        return {"detach": loss.detach(), "item": loss.item(), "graph": loss}[ret]

    return step


@pytest.mark.parametrize("step", [reference_train_step, _train(ret="item"), _train(zero_grad="end")])
def test_correct_train_steps_pass(step, capsys):
    check_train_step(step)
    assert capsys.readouterr().out.startswith("✓ train_step")


@pytest.mark.parametrize(
    "step, hint",
    [
        (_train(train=False), "call model.train() at the start"),
        (_train(ret="graph"), "return loss.detach() or loss.item()"),
        (_train(zero_grad="never"), "zero_grad() once per step"),
        ("train_step", "should be a function"),
    ],
)
def test_broken_train_steps_are_rejected_with_their_hint(step, hint):
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_train_step(step)
