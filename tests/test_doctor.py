"""The training-step doctor: every code fires on a minimal broken step and stays silent on the
corrected one; correct steps of several kinds give no warnings; observing changes nothing."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from autogradlab.models.doctor import CODES, diagnose


def _batches(n_batches: int = 4, batch: int = 8, dim: int = 6, seed: int = 0, regression: bool = False) -> list:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n_batches):
        x = torch.randn(batch, dim, generator=gen)
        y = x[:, :1].sum(1, keepdim=True) * 2 if regression else (x[:, 0] + 0.5 * x[:, 1] > 0).long()
        out.append((x, y))
    return out


def _mlp(seed: int = 0, dropout: bool = False, bn: bool = False, out: int = 2) -> nn.Sequential:
    torch.manual_seed(seed)
    layers: list[nn.Module] = [nn.Linear(6, 16)]
    if bn:
        layers.append(nn.BatchNorm1d(16))
    layers.append(nn.ReLU())
    if dropout:
        layers.append(nn.Dropout(0.2))
    layers.append(nn.Linear(16, out))
    return nn.Sequential(*layers)


@dataclass
class Setup:
    step: Callable[[Any], Any]
    model: nn.Module
    optimizer: Any
    batches: list
    scaler: Any = None
    extra: dict = field(default_factory=dict)

    def diagnose(self):
        return diagnose(self.step, self.model, self.optimizer, self.batches, scaler=self.scaler)


def _plain_step(model, opt, loss_fn=F.cross_entropy, zero_grad=True, after_step=None, before=None):
    def step(batch):
        x, y = batch
        if before:
            before()
        if zero_grad:
            opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if after_step:
            after_step()
        return loss

    return step


# ---------------------------------------------------------------------------- correct steps


def plain_sgd(seed=0) -> Setup:
    model = _mlp(seed, dropout=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    return Setup(_plain_step(model, opt), model, opt, _batches(seed=seed))


def plain_adam_bn(seed=0) -> Setup:
    model = _mlp(seed, bn=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)

    def step(batch):
        model.train()
        return _plain_step(model, opt)(batch)

    model.eval()  # a validation pass before: the step puts the model back in training mode
    return Setup(step, model, opt, _batches(seed=seed))


def accumulation_inner(seed=0, accum=3) -> Setup:
    model = _mlp(seed, dropout=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(batch):
        x, y = batch
        opt.zero_grad(set_to_none=False)
        total = 0.0
        for xs, ys in zip(x.chunk(accum), y.chunk(accum)):
            loss = F.cross_entropy(model(xs), ys) / accum
            loss.backward()
            total += loss.item()
        opt.step()
        return total

    return Setup(step, model, opt, _batches(batch=9, seed=seed))


def accumulation_every_k(seed=0, accum=2) -> Setup:
    model = _mlp(seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    calls = {"n": 0}

    def step(batch):
        x, y = batch
        loss = F.cross_entropy(model(x), y) / accum
        loss.backward()
        calls["n"] += 1
        if calls["n"] % accum == 0:
            opt.step()
            opt.zero_grad()
        return loss.detach()

    return Setup(step, model, opt, _batches(n_batches=6, seed=seed))


def amp_bf16(seed=0, clip_first=False, clamp_data=False) -> Setup:
    model = _mlp(seed, dropout=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")

    def step(batch):
        x, y = batch
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        if clip_first:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.unscale_(opt)
        else:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        if clamp_data:
            model[0].weight.data.clamp_(-0.2, 0.2)
        else:
            with torch.no_grad():
                model[0].weight.clamp_(-0.2, 0.2)
        return loss

    return Setup(step, model, opt, _batches(seed=seed), scaler)


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2))
        self.head = nn.Linear(16, 2)

    def forward(self, x):
        return self.head(self.body(x))


def frozen_backbone(seed=0, filtered=True) -> Setup:
    torch.manual_seed(seed)
    model = Backbone()
    model.body.requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad] if filtered else model.parameters()
    opt = torch.optim.SGD(params, lr=0.1)

    def step(batch):
        model.train()
        model.body.eval()  # frozen feature extractor: keep its batch-norm statistics fixed
        return _plain_step(model, opt)(batch)

    return Setup(step, model, opt, _batches(seed=seed))


CORRECT = {
    "plain SGD + dropout": plain_sgd,
    "AdamW + batch norm after validation": plain_adam_bn,
    "accumulation inside the step": accumulation_inner,
    "accumulation across calls": accumulation_every_k,
    "AMP bf16 + GradScaler('cpu') + clip": amp_bf16,
    "frozen backbone in eval mode": frozen_backbone,
}


@pytest.mark.parametrize("kind", CORRECT)
def test_correct_steps_give_no_errors_or_warnings(kind):
    report = CORRECT[kind]().diagnose()
    assert report.ok, report
    assert report.steps >= 4


def _state(setup: Setup) -> dict:
    state = {k: v.clone() for k, v in setup.model.state_dict().items()}
    for i, s in enumerate(setup.optimizer.state_dict()["state"].values()):
        for k, v in s.items():
            if isinstance(v, torch.Tensor):
                state[f"opt{i}.{k}"] = v.clone()
    if setup.scaler is not None:
        state["scale"] = torch.tensor(setup.scaler.get_scale())
    return state


@pytest.mark.parametrize("kind", CORRECT)
def test_observing_changes_nothing(kind):
    watched, plain = CORRECT[kind](seed=1), CORRECT[kind](seed=1)
    torch.manual_seed(123)
    watched.diagnose()
    torch.manual_seed(123)
    for batch in plain.batches:
        plain.step(batch)
    a, b = _state(watched), _state(plain)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    for p, q in zip(watched.model.parameters(), plain.model.parameters()):
        assert (p.grad is None) == (q.grad is None) and (p.grad is None or torch.equal(p.grad, q.grad))


def test_every_hook_and_wrapper_is_restored_even_when_the_step_raises():
    setup = amp_bf16()
    norm, value = torch.nn.utils.clip_grad_norm_, torch.nn.utils.clip_grad.clip_grad_value_
    backward = torch.autograd.backward

    def step(batch):
        setup.step(batch)
        raise RuntimeError("boom")

    diagnose(step, setup.model, setup.optimizer, setup.batches, scaler=setup.scaler)
    assert all(not m._forward_hooks for m in setup.model.modules())
    assert all(not p._backward_hooks for p in setup.model.parameters())
    assert not setup.optimizer._optimizer_step_pre_hooks and not setup.optimizer._optimizer_step_post_hooks
    assert torch.nn.utils.clip_grad_norm_ is norm and torch.nn.utils.clip_grad.clip_grad_value_ is value
    assert "step" not in vars(setup.scaler)
    assert torch.autograd.backward is backward


# ---------------------------------------------------------------------------- broken / fixed pairs


class ListScales(nn.Module):
    """Per-layer output scales; ``registered`` picks nn.ParameterList over a Python list."""

    def __init__(self, registered: bool):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(6, 16), nn.Linear(16, 2)])
        scales = [nn.Parameter(torch.ones(16)), nn.Parameter(torch.ones(2))]
        self.scales = nn.ParameterList(scales) if registered else scales

    def forward(self, x):
        x = torch.relu(self.layers[0](x) * self.scales[0])
        return self.layers[1](x) * self.scales[1]


def not_in_optimizer_list(fixed: bool) -> Setup:
    torch.manual_seed(0)
    model = ListScales(registered=fixed)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return Setup(_plain_step(model, opt), model, opt, _batches())


def not_in_optimizer_partial(fixed: bool) -> Setup:
    model = _mlp()
    opt = torch.optim.SGD(model.parameters() if fixed else model[0].parameters(), lr=0.1)
    return Setup(_plain_step(model, opt), model, opt, _batches())


def frozen_in_optimizer(fixed: bool) -> Setup:
    return frozen_backbone(filtered=fixed)


class Detaching(nn.Module):
    def __init__(self, mode: str):
        super().__init__()
        self.mode = mode
        self.first, self.second, self.unused = nn.Linear(6, 16), nn.Linear(16, 2), nn.Linear(6, 6)

    def forward(self, x):
        if self.mode == "no_grad":
            with torch.no_grad():
                h = torch.relu(self.first(x))
        else:
            h = torch.relu(self.first(x))
            if self.mode == "detach":
                h = h.detach()
        return self.second(h)


def missing_grad(fixed: bool, mode: str = "detach") -> Setup:
    torch.manual_seed(0)
    model = Detaching("fine" if fixed else mode)
    if fixed:
        del model.unused
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return Setup(_plain_step(model, opt), model, opt, _batches())


def nonfinite(fixed: bool) -> Setup:
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    eps = 1e-6 if fixed else 0.0

    def loss_fn(logits, y):  # a "distance" term whose sqrt has an infinite slope at 0
        return F.cross_entropy(logits, y) + 1e-3 * (logits * 0 + eps).sqrt().sum()

    return Setup(_plain_step(model, opt, loss_fn), model, opt, _batches())


def not_cleared(fixed: bool) -> Setup:
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    return Setup(_plain_step(model, opt, zero_grad=fixed), model, opt, _batches())


def data_write(fixed: bool) -> Setup:
    return amp_bf16(clamp_data=not fixed)


def eval_mode(fixed: bool) -> Setup:
    model = _mlp(dropout=True, bn=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model.eval()  # left over from validation
    return Setup(_plain_step(model, opt, before=model.train if fixed else None), model, opt, _batches())


def lr_zero(fixed: bool) -> Setup:
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1 if fixed else 0.0)
    return Setup(_plain_step(model, opt), model, opt, _batches())


def wrong_optimizer(fixed: bool) -> Setup:
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    other = torch.optim.SGD(_mlp(seed=5).parameters(), lr=0.1)  # built for a model that was replaced
    stepped = opt if fixed else other

    def step(batch):
        x, y = batch
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        stepped.step()
        return loss

    return Setup(step, model, opt, _batches())


def cleared_before_step(fixed: bool) -> Setup:
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(batch):
        x, y = batch
        if fixed:
            opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if not fixed:
            opt.zero_grad()  # the bug: clears the gradients it just computed
        opt.step()
        return loss

    return Setup(step, model, opt, _batches())


def lr_huge(fixed: bool) -> Setup:
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1 if fixed else 20.0)
    return Setup(_plain_step(model, opt), model, opt, _batches())


def lr_tiny(fixed: bool) -> Setup:
    model = _mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3 if fixed else 1e-8)
    return Setup(_plain_step(model, opt), model, opt, _batches())


def amp_nan(fixed: bool, where: str = "every") -> Setup:
    """Every batch, or only batch 3, carries a NaN input: the scaler skips those steps."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu")
    batches = _batches()
    if not fixed:
        for i, (x, _) in enumerate(batches):
            if where == "every" or i == 2:
                x[0, 0] = float("nan")

    def step(batch):
        x, y = batch
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    return Setup(step, model, opt, batches, scaler)


def clamp_bound(fixed: bool) -> Setup:
    """A constraint written correctly under no_grad, with a bound that is 0 by integer division when broken."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    bound = 0.4 if fixed else 4 // 10

    def constrain():
        with torch.no_grad():
            model[2].weight.clamp_(-bound, bound)

    return Setup(_plain_step(model, opt, after_step=constrain), model, opt, _batches())


def clip_order(fixed: bool) -> Setup:
    return amp_bf16(clip_first=not fixed)


def raising(fixed: bool) -> Setup:
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(batch):
        x, y = batch
        opt.zero_grad()
        logits = model(x if fixed else x.T)  # the bug: a transposed batch
        loss = F.cross_entropy(logits, y)
        loss.backward()
        opt.step()
        return loss

    return Setup(step, model, opt, _batches())


# code -> (make(fixed: bool) -> Setup, severity of the broken case, text expected in `where`)
PAIRS = {
    "param-not-in-optimizer (Python list)": ("param-not-in-optimizer", not_in_optimizer_list, "error", "scales[0]"),
    "param-not-in-optimizer (partial optimizer)": (
        "param-not-in-optimizer",
        not_in_optimizer_partial,
        "error",
        "2.weight",
    ),
    "frozen-param-in-optimizer": ("frozen-param-in-optimizer", frozen_in_optimizer, "warning", "body.0.weight"),
    "missing-grad (detach)": ("missing-grad", missing_grad, "error", "first.weight"),
    "missing-grad (no_grad)": ("missing-grad", lambda fixed: missing_grad(fixed, "no_grad"), "error", "first.weight"),
    "nonfinite-grad": ("nonfinite-grad", nonfinite, "error", "2.weight"),
    "grad-not-cleared": ("grad-not-cleared", not_cleared, "error", "0.weight"),
    "data-bypass": ("data-bypass", data_write, "warning", "0.weight"),
    "eval-mode-in-training": ("eval-mode-in-training", eval_mode, "warning", "1 (BatchNorm1d)"),
    "no-update (lr 0)": ("no-update", lr_zero, "error", "0.weight"),
    "no-update (wrong optimizer)": ("no-update", wrong_optimizer, "error", "optimizer.step()"),
    "no-update (zero_grad before step)": ("no-update", cleared_before_step, "error", "0.weight"),
    "update-undone": ("update-undone", clamp_bound, "error", "2.weight"),
    "update-ratio-high": ("update-ratio-high", lr_huge, "warning", "weight"),
    "update-ratio-low": ("update-ratio-low", lr_tiny, "warning", "weight"),
    "amp-step-skipped (every step)": ("amp-step-skipped", amp_nan, "error", "scaler.step()"),
    "amp-step-skipped (one step)": (
        "amp-step-skipped",
        lambda fixed: amp_nan(fixed, "one"),
        "warning",
        "scaler.step()",
    ),
    "clip-before-unscale": ("clip-before-unscale", clip_order, "error", "clip_grad_norm_(model.parameters(), 1.0)"),
    "step-raised": ("step-raised", raising, "error", "logits = model(x if fixed else x.T)"),
}


def test_every_documented_code_has_a_broken_step():
    assert {code for code, *_ in PAIRS.values()} == set(CODES)


@pytest.mark.parametrize("case", PAIRS)
def test_broken_step_triggers_its_code(case):
    code, make, severity, where = PAIRS[case]
    report = make(False).diagnose()
    found = report[code]
    assert found, f"{code} not found:\n{report}"
    assert any(f.severity == severity and where in f.where for f in found), report


@pytest.mark.parametrize("case", PAIRS)
def test_corrected_step_is_silent(case):
    code, make, *_ = PAIRS[case]
    report = make(True).diagnose()
    assert code not in report.codes, report
    assert report.ok, report


# ---------------------------------------------------------------------------- details


def test_missing_grad_names_the_cause():
    assert "path to the loss was cut" in missing_grad(False).diagnose()["missing-grad"][0].message
    assert "gradients disabled" in missing_grad(False, "no_grad").diagnose()["missing-grad"][0].message
    unused = [f for f in missing_grad(False).diagnose()["missing-grad"] if "unused.weight" in f.where]
    assert unused and "never ran" in unused[0].message


def test_python_list_parameter_is_named_where_it_hides():
    finding = not_in_optimizer_list(False).diagnose()["param-not-in-optimizer"][0]
    assert finding.where == "scales[0], scales[1]" or "Python list" in finding.message


def test_plain_tensor_leaf_is_a_warning_not_an_error():
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    shift = torch.zeros(6, requires_grad=True)  # an input we optimise on purpose

    def step(batch):
        x, y = batch
        opt.zero_grad()
        loss = F.cross_entropy(model(x + shift), y)
        loss.backward()
        opt.step()
        return loss

    report = diagnose(step, model, opt, _batches())
    assert [f.severity for f in report["param-not-in-optimizer"]] == ["warning"]
    assert not report.errors


def test_frozen_backbone_in_eval_mode_is_only_info():
    report = frozen_backbone().diagnose()
    assert [f.severity for f in report["eval-mode-in-training"]] == ["info"]


def test_skips_only_while_the_scale_calibrates_are_info():
    model = _mlp(out=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**127)  # far too large: the first steps overflow
    x, y = _batches(regression=True)[0]
    batch = (x, y * 10)

    def step(b):
        x, y = b
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(model(x).float(), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    report = diagnose(step, model, opt, [batch] * 10, scaler=scaler)
    findings = report["amp-step-skipped"]
    assert [f.severity for f in findings] == ["info"], report
    assert report.ok


def test_step_raised_stops_and_quotes_the_line():
    report = raising(False).diagnose()
    assert report.steps == 1
    assert "RuntimeError" in report["step-raised"][0].message


def test_bad_arguments_get_clear_errors():
    setup = plain_sgd()
    with pytest.raises(TypeError, match="torch.optim.Optimizer"):
        diagnose(setup.step, setup.model, "sgd", setup.batches)
    with pytest.raises(TypeError, match="nn.Module"):
        diagnose(setup.step, [setup.model], setup.optimizer, setup.batches)
    with pytest.raises(ValueError, match="batches is empty"):
        diagnose(setup.step, setup.model, setup.optimizer, [])
    with pytest.raises(TypeError, match="single tensor"):
        diagnose(setup.step, setup.model, setup.optimizer, torch.zeros(3))


def test_a_no_grad_validation_pass_inside_the_step_is_not_eval_mode_training():
    model = _mlp(dropout=True, bn=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    val_x = _batches(seed=3)[0][0]

    def step(batch):
        model.eval()
        with torch.no_grad():
            model(val_x)
        model.train()
        return _plain_step(model, opt)(batch)

    assert "eval-mode-in-training" not in diagnose(step, model, opt, _batches()).codes


# ---------------------------------------------------------------------------- issue 11: fixed blind spots


def _returns(model, opt, kind):
    def step(batch):
        x, y = batch
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return {"loss": loss, "detach": loss.detach(), "item": loss.item(), "none": None}[kind]

    return step


class ListOfTensors(nn.Module):
    """Scales kept in a Python list, as nn.Parameters or as plain tensors that require grad."""

    def __init__(self, parameter: bool):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(6, 16), nn.Linear(16, 2)])
        make = nn.Parameter if parameter else (lambda t: t.requires_grad_())
        self.scales = [make(torch.ones(16)), make(torch.ones(2))]

    def forward(self, x):
        return self.layers[1](torch.relu(self.layers[0](x) * self.scales[0])) * self.scales[1]


@pytest.mark.parametrize("returned", ["detach", "item", "none"])
@pytest.mark.parametrize("parameter", [True, False], ids=["nn.Parameter", "plain tensor"])
def test_a_leaf_hidden_in_a_python_list_is_found_whatever_the_step_returns(parameter, returned):
    """The leaves come from the graphs backward runs on, not only from the returned loss (which a step that
    logs safely returns detached or as a number); a tensor found in the model is an error, not a warning."""
    torch.manual_seed(0)
    model = ListOfTensors(parameter)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    findings = diagnose(_returns(model, opt, returned), model, opt, _batches())["param-not-in-optimizer"]
    assert [(f.where, f.severity) for f in findings] == [("scales[0]", "error"), ("scales[1]", "error")]
    assert findings[0].message.startswith("an nn.Parameter") == parameter and "Python list" in findings[0].message


def test_a_leaf_behind_a_scaled_backward_is_found():
    torch.manual_seed(0)
    model = ListOfTensors(parameter=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")

    def step(batch):
        x, y = batch
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss.item()

    report = diagnose(step, model, opt, _batches(), scaler=scaler)
    assert [f.where for f in report["param-not-in-optimizer"]] == ["scales[0]", "scales[1]"]


def test_update_undone_needs_the_undo_in_most_steps_and_ignores_partial_constraints():
    """The wrong bound is found in every step after the first (step 1 starts from the initial weights); a
    constraint that pins only some elements (amp_bf16's clamp at 0.2) is silent (it is in CORRECT)."""
    report = clamp_bound(False).diagnose()
    finding = report["update-undone"][0]
    assert "steps 2, 3, 4" in finding.message and finding.where == "2.weight"
    assert "update-undone" not in amp_bf16().diagnose().codes
    assert (
        "update-undone"
        not in diagnose(
            clamp_bound(False).step, clamp_bound(False).model, clamp_bound(False).optimizer, _batches()[:1]
        ).codes
    )


def test_a_reset_to_the_old_weights_after_the_step_is_update_undone():
    model = _mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    saved = {k: v.clone() for k, v in model.state_dict().items()}

    def step(batch):
        loss = _plain_step(model, opt)(batch)
        model.load_state_dict(saved)  # "restore the best checkpoint" in the wrong place
        return loss

    report = diagnose(step, model, opt, _batches())
    assert "0.weight" in report["update-undone"][0].where


def _clip_setup(n: int, optimizer_class, bug: bool, lr: float = 1e-3):
    torch.manual_seed(0)
    model = nn.Linear(n, n, bias=False)
    opt = optimizer_class(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler("cpu")
    gen = torch.Generator().manual_seed(1)
    batch = (torch.randn(32, n, generator=gen), torch.randn(32, n, generator=gen))
    seen = {}

    def step(b):
        x, y = b
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(model(x).float(), y)
        scaler.scale(loss).backward()
        if bug:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.unscale_(opt)
        if not bug:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        seen["grad"] = model.weight.grad.clone()
        scaler.step(opt)
        scaler.update()
        return loss

    return model, opt, scaler, batch, step, seen


def _first_update(n, optimizer_class, bug):
    model, opt, scaler, batch, step, seen = _clip_setup(n, optimizer_class, bug)
    before = model.weight.detach().clone()
    report = diagnose(step, model, opt, [batch], scaler=scaler) if bug else step(batch)
    return (model.weight.detach() - before).norm().item(), seen["grad"], report


def test_clip_before_unscale_names_the_sgd_factor_measured_on_the_gradients():
    _, wrong_grad, report = _first_update(100, torch.optim.SGD, bug=True)
    _, right_grad, _ = _first_update(100, torch.optim.SGD, bug=False)
    message = report["clip-before-unscale"][0].message
    factor = float(re.search(r"which is ([0-9.e+-]+)× the right one", message).group(1))
    assert factor == pytest.approx((wrong_grad.norm() / right_grad.norm()).item(), rel=0.05)
    assert "SGD" in message and "Adam" not in message


@pytest.mark.parametrize("n", [100, 1000])  # 1e4 and 1e6 weights
def test_clip_before_unscale_estimates_adams_first_update(n):
    """Adam mostly cancels the factor; the doctor's estimate matches the measured first update, and the damage
    grows with the model (issue 11: about 0.87 at 1e4 and 0.52 at 1e6 weights)."""
    wrong, _, report = _first_update(n, torch.optim.Adam, bug=True)
    right, _, _ = _first_update(n, torch.optim.Adam, bug=False)
    message = report["clip-before-unscale"][0].message
    estimate = float(re.search(r"first update about ([0-9.]+)× the right one", message).group(1))
    assert estimate == pytest.approx(wrong / right, abs=0.02)
    assert "Adam divides by √v + eps" in message
    assert {100: 0.87, 1000: 0.51}[n] == pytest.approx(estimate, abs=0.03)


# ---------------------------------------------------------------------------- GradScaler calibration (errata 09.1, issue 24)


def fp16_scaler_run(init_scale: float, n_batches: int, growth_interval: int = 5, nan_backward: bool = False) -> Any:
    """Chapter 08's scaler set-up (the cpu-small MLP and data, fp16 autocast, SGD 0.05); ``nan_backward`` adds a
    term whose value is 0 but whose backward is inf · 0 = NaN (sqrt at 0): the loss stays finite."""
    from autogradlab.models.experiments.common import mlp

    model = mlp([32, 32, 32], torch.device("cpu"), seed=0)
    gen = torch.Generator().manual_seed(1)
    batch = (torch.randn(32, 32, generator=gen), torch.randn(32, 32, generator=gen))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)

    def step(b):
        x, y = b
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.float16):
            out = model(x).float()
        loss = F.mse_loss(out, y)
        if nan_backward:
            loss = loss + 0.0 * (out - out.detach()).pow(2).sum().sqrt()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    return diagnose(step, model, opt, [batch] * n_batches, scaler=scaler)


@pytest.mark.parametrize("init_scale, n_batches", [(2.0**24, 3), (2.0**40, 6)])
def test_a_scaler_that_starts_high_is_still_calibrating_not_an_error(init_scale, n_batches):
    """Chapter 08's own set-up over the 3 batches the chapters recommend: every step skipped, the loss finite."""
    report = fp16_scaler_run(init_scale, n_batches)
    (finding,) = report["amp-step-skipped"]
    assert report.ok and finding.severity == "info" and "still calibrating" in finding.message
    assert all(math.isfinite(loss) for loss in report.losses)


def test_skips_after_the_scale_grew_are_calibration_too():
    report = fp16_scaler_run(2.0**24, 12)  # backs off over 4 steps, grows after 5 clean ones, probes, backs off
    assert [f.severity for f in report["amp-step-skipped"]] == ["info"] and report.ok


def test_skips_that_go_on_below_the_floor_with_a_finite_loss_are_an_error():
    """A backward that makes NaN itself: calibrating while the scale is high, an error once it falls below the floor."""
    from autogradlab.models.doctor.findings import SCALE_FLOOR

    early = fp16_scaler_run(SCALE_FLOOR * 4, 3, nan_backward=True)
    assert [f.severity for f in early["amp-step-skipped"]] == ["info"]  # the documented blind spot
    late = fp16_scaler_run(SCALE_FLOOR * 4, 6, nan_backward=True)
    (finding,) = late["amp-step-skipped"]
    assert finding.severity == "error" and "below" in finding.message and "not from an overflow" in finding.message
    assert all(math.isfinite(loss) for loss in late.losses)


def test_every_step_skipped_with_a_nan_loss_is_an_error_at_once():
    (finding,) = amp_nan(False).diagnose()["amp-step-skipped"]
    assert finding.severity == "error" and "loss itself" in finding.message
