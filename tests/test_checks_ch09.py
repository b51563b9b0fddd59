"""Chapter 09 checkers: each correct answer passes in several forms; each plausible wrong one is rejected with
the mistake it makes (``ExerciseError.mistake``, through the doctor's code where the doctor sees it) and a hint."""

import collections
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from autogradlab.checks.ch09 import check_amp_step, check_case_1, check_repaired_convnet, check_untrained_leaves
from autogradlab.checks.core import ExerciseError
from autogradlab.models.debug_cases import (
    CLIP_NORM,
    HEAD_LIMIT,
    TinyConvNet,
    batches_of,
    conv_setup,
    reference_amp_step,
    stripes,
)
from autogradlab.models.doctor import Report, graph_leaves


def rejected(check, answer, *args) -> ExerciseError:
    with pytest.raises(ExerciseError) as info:
        check(answer, *args)
    return info.value


# ---------------------------------------------------------------------------- exercise 1: case 1 by hand


class LoggedConvNet(TinyConvNet):
    def forward(self, x):
        features = self.features(x)
        self.logged = features = features.detach()
        features /= features.norm(dim=1, keepdim=True)
        return self.head(features).squeeze(1)


def case_1(seed=0, model_class=LoggedConvNet, bound=4 // 10):
    """The chapter's case 1: its model, optimizer and step."""
    model, optimizer = conv_setup(seed, model_class)

    def step(batch):
        x, y = batch
        optimizer.zero_grad()
        loss = F.binary_cross_entropy_with_logits(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
        optimizer.step()
        for p in model.head.parameters():
            p.data.clamp_(-bound, bound)
        return loss.item()

    return step, model, optimizer


NO_GRAD, OVERWRITTEN = ["features.0.weight", "features.0.bias"], ("head.weight", "head.bias")
HYPOTHESIS = "the conv layer gets no gradient and the head is reset after every step"


def test_measurements_that_match_pass_and_show_the_doctor(capsys):
    report = check_case_1(case_1, HYPOTHESIS, NO_GRAD, OVERWRITTEN)
    assert capsys.readouterr().out.startswith("✓ your measurements match")
    assert isinstance(report, Report) and {"missing-grad", "update-undone", "data-bypass"} <= report.codes


@pytest.mark.parametrize(
    "hypothesis, no_grad, overwritten, mistake",
    [
        ("", NO_GRAD, OVERWRITTEN, "no-hypothesis"),
        ("no idea", NO_GRAD, OVERWRITTEN, "no-hypothesis"),
        (HYPOTHESIS, [], OVERWRITTEN, "no_grad_1-wrong"),
        (HYPOTHESIS, NO_GRAD + ["head.weight"], OVERWRITTEN, "no_grad_1-wrong"),
        (HYPOTHESIS, NO_GRAD, ["head.weight"], "overwritten_1-wrong"),  # the bias is reset too
        (HYPOTHESIS, NO_GRAD, [], "overwritten_1-wrong"),
    ],
)
def test_a_guess_that_the_measurement_contradicts_is_rejected_without_the_answer(
    hypothesis, no_grad, overwritten, mistake
):
    error = rejected(check_case_1, case_1, hypothesis, no_grad, overwritten)
    assert error.mistake == mistake
    assert error.hint is None or "features" not in error.hint and "head" not in error.hint


def test_names_must_be_a_list_of_strings_and_the_case_must_still_be_broken():
    assert rejected(check_case_1, case_1, HYPOTHESIS, "features.0.weight", OVERWRITTEN).kind == "type"
    fixed = lambda seed=0: case_1(seed, TinyConvNet, bound=100.0)  # noqa: E731
    assert rejected(check_case_1, fixed, HYPOTHESIS, [], []).kind == "contract"


# ---------------------------------------------------------------------------- exercise 1: the repaired forward


def _convnet(body):
    return type("Candidate", (TinyConvNet,), {"forward": body})


def _fixed_clone(self, x):
    f = self.features(x)
    self.logged = f.detach().clone()
    f = f / f.norm(dim=1, keepdim=True)
    return self.head(f).squeeze(1)


def _fixed_eps_clone_detach(self, x):
    f = self.features(x)
    self.logged = f.clone().detach()
    return self.head(f / (f.norm(dim=1, keepdim=True) + 1e-6)).squeeze(-1)


def _fixed_normalize(self, x):
    f = self.features(x)
    self.logged = torch.empty_like(f).copy_(f.detach())
    return self.head(F.normalize(f, dim=1))[:, 0]


def _logged_view(self, x):
    f = self.features(x)
    self.logged = f.detach()  # the chapter's bug: a view, not a snapshot
    return self.head(F.normalize(f, dim=1)).squeeze(1)


def _logged_with_graph(self, x):
    f = self.features(x)
    self.logged = f.clone()
    return self.head(F.normalize(f, dim=1)).squeeze(1)


def _logged_normalised(self, x):
    f = F.normalize(self.features(x), dim=1)
    self.logged = f.detach().clone()
    return self.head(f).squeeze(1)


def _no_log(self, x):
    return self.head(F.normalize(self.features(x), dim=1)).squeeze(1)


def _super_forward(self, x):
    self.logged = self.features(x).detach().clone()
    return super(type(self), self).forward(x)


def _detached(self, x):
    f = self.features(x).detach()
    self.logged = f.clone()
    f /= f.norm(dim=1, keepdim=True)
    return self.head(f).squeeze(1)


def _in_place(self, x):
    f = self.features(x)
    self.logged = f.detach().clone()
    f /= f.norm(dim=1, keepdim=True)
    return self.head(f).squeeze(1)


def _through_data(self, x):
    f = self.features(x)
    self.logged = f.detach().clone()
    f.data /= f.data.norm(dim=1, keepdim=True)  # no error: the normalisation is hidden from autograd
    return self.head(f).squeeze(1)


def _wrong_dim(self, x):
    f = self.features(x)
    self.logged = f.detach().clone()
    return self.head(f / (f.norm(dim=0, keepdim=True) + 1e-6)).squeeze(1)


def _not_normalised(self, x):
    f = self.features(x)
    self.logged = f.detach().clone()
    return self.head(f).squeeze(1)


def _no_squeeze(self, x):
    f = self.features(x)
    self.logged = f.detach().clone()
    return self.head(F.normalize(f, dim=1))


def _not_implemented(self, x):
    raise NotImplementedError()


@pytest.mark.parametrize("body", [_fixed_clone, _fixed_eps_clone_detach, _fixed_normalize])
def test_repaired_convnets_pass(body, capsys):
    check_repaired_convnet(_convnet(body))
    assert capsys.readouterr().out.startswith("✓ RepairedConvNet")


@pytest.mark.parametrize(
    "body, kind, mistake",
    [
        (_logged_view, "contract", "log-is-a-view"),
        (_logged_with_graph, "contract", "log-with-graph"),
        (_logged_normalised, "value", "log-normalised"),
        (_no_log, "contract", "no-log"),
        (_super_forward, "off-limits", "autogradlab.models.debug_cases.TinyConvNet.forward"),
        (_detached, "contract", "no-gradient"),
        (_in_place, "raised", "stale"),
        (_through_data, "value", "data-write"),
        (_wrong_dim, "value", "wrong-dim"),
        (_not_normalised, "value", "not-normalised"),
        (_no_squeeze, "shape", "no-squeeze"),
        (_not_implemented, "not-implemented", None),
    ],
)
def test_broken_convnets_are_rejected_with_their_mistake(body, kind, mistake):
    error = rejected(check_repaired_convnet, _convnet(body))
    assert (error.kind, error.mistake) == (kind, mistake)
    assert error.hint or kind == "not-implemented"


def test_a_class_that_is_not_a_tinyconvnet_is_rejected():
    assert rejected(check_repaired_convnet, nn.ReLU).kind == "type"


# ---------------------------------------------------------------------------- exercise 2: the AMP step


def _amp(clip="after", clamp="no_grad", zero_grad=True, stepper="scaler", autocast=torch.float16, ret="detach",
         bound=HEAD_LIMIT, count="scale"):  # fmt: skip
    def step(model, optimizer, scaler, batch, counter):
        x, y = batch
        if zero_grad:
            optimizer.zero_grad(set_to_none=False)
        with torch.autocast("cpu", dtype=autocast or torch.float16, enabled=autocast is not None):
            logits = model(x)
            loss = F.binary_cross_entropy_with_logits(logits.float(), y)
        scaler.scale(loss).backward()
        if clip == "before":
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
        scaler.unscale_(optimizer)
        if clip == "after":
            torch.nn.utils.clip_grad_norm_(list(model.parameters()), max_norm=CLIP_NORM)
        scale, before, stepped = scaler.get_scale(), model.head.weight.detach().clone(), []
        handle = optimizer.register_step_post_hook(lambda *args: stepped.append(1))
        if stepper == "scaler":
            scaler.step(optimizer)
        else:
            optimizer.step()
        handle.remove()
        scaler.update()
        if count == "scale" and scaler.get_scale() >= scale:
            counter["updates"] += 1
        elif count == "equal" and scaler.get_scale() == scale:  # errata 09 §5a: misses the steps where it grows
            counter["updates"] += 1
        elif count == "moved" and not torch.equal(before, model.head.weight):
            counter["updates"] += 1
        elif count == "hook":
            counter["updates"] += len(stepped)
        elif count == "always" or (count == "finite loss" and torch.isfinite(loss)):
            counter["updates"] += 1
        if clamp == "no_grad":
            with torch.no_grad():
                model.head.weight.clamp_(-bound, bound)
                torch.clamp_(model.head.bias, -bound, bound)
        elif clamp == "data":
            for p in model.head.parameters():
                p.data.clamp_(-bound, bound)
        return {"item": lambda: loss.item(), "graph": lambda: loss}.get(ret, loss.detach)()

    return step


def amp_step_draft(model, optimizer, scaler, batch, counter):
    """The chapter's draft: two AMP bugs (the clip before unscale_, optimizer.step()) and a counter bug."""
    x, y = batch
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.binary_cross_entropy_with_logits(model(x).float(), y)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
    scaler.unscale_(optimizer)
    optimizer.step()
    scale = scaler.get_scale()
    scaler.update()
    if scaler.get_scale() == scale:
        counter["updates"] += 1
    with torch.no_grad():
        for p in model.head.parameters():
            p.clamp_(-HEAD_LIMIT, HEAD_LIMIT)
    return loss.detach()


def _amp_zero_grad_at_end(model, optimizer, scaler, batch, counter):
    loss = _amp(zero_grad=False)(model, optimizer, scaler, batch, counter)
    optimizer.zero_grad(set_to_none=True)
    return loss


def _amp_without_scaler(model, optimizer, scaler, batch, counter):
    x, y = batch
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.binary_cross_entropy_with_logits(model(x).float(), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
    optimizer.step()
    counter["updates"] += 1
    with torch.no_grad():
        for p in model.head.parameters():
            p.clamp_(-HEAD_LIMIT, HEAD_LIMIT)
    return loss.detach()


def _amp_rescaling(model, optimizer, scaler, batch, counter):
    x, y = batch
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.binary_cross_entropy_with_logits(model(x).float(), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    grads = [p.grad for p in model.parameters()]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    for g in grads:
        g.mul_(CLIP_NORM / norm)  # the bug: normalises every gradient, also the small ones
    scale = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    counter["updates"] += scaler.get_scale() >= scale
    with torch.no_grad():
        for p in model.head.parameters():
            p.clamp_(-HEAD_LIMIT, HEAD_LIMIT)
    return loss.detach()


def _amp_calls_reference(model, optimizer, scaler, batch, counter):
    return reference_amp_step(model, optimizer, scaler, batch, counter)


def _amp_mutates_batch(model, optimizer, scaler, batch, counter):
    x, y = batch
    x -= x.mean()  # "centre the images", in place on the caller's tensor
    return _amp()(model, optimizer, scaler, (x, y), counter)


def _amp_unscaled_backward(model, optimizer, scaler, batch, counter):
    x, y = batch
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.binary_cross_entropy_with_logits(model(x).float(), y)
    loss.backward()  # the bug: the loss is not scaled
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def _amp_no_scaler_step(model, optimizer, scaler, batch, counter):
    x, y = batch
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.binary_cross_entropy_with_logits(model(x).float(), y)
    scaler.scale(loss).backward()
    optimizer.step()  # the bug: scaled gradients, and no inf check before update()
    scaler.update()
    return loss.detach()


def _clamp_everything(model, optimizer, scaler, batch, counter):
    loss = _amp()(model, optimizer, scaler, batch, counter)
    with torch.no_grad():
        for p in model.parameters():
            p.clamp_(-HEAD_LIMIT, HEAD_LIMIT)
    return loss


@pytest.mark.parametrize(
    "step", [reference_amp_step, _amp(ret="item"), _amp(), _amp(count="moved"), _amp(count="hook")]
)
def test_correct_amp_steps_pass(step, capsys):
    check_amp_step(step)
    assert capsys.readouterr().out.startswith("✓ amp_step")


@pytest.mark.parametrize(
    "step, mistake",
    [
        (amp_step_draft, "clip-before-unscale"),  # the chapter's draft: the doctor sees this one of its three bugs
        (_amp(clip="before"), "clip-before-unscale"),
        (_amp(clamp="data"), "data-bypass"),
        (_amp(bound=4 // 10), "update-undone"),
        (_amp(zero_grad=False), "grad-not-cleared"),
        (_amp(clip="none"), "no-clip"),
        (_amp_rescaling, "always-rescale"),
        (_amp(clamp="none"), "no-clamp"),
        (_clamp_everything, "clamp-all"),
        (_amp(autocast=None), "fp32"),
        (_amp(autocast=torch.bfloat16), "bf16"),
        (_amp_zero_grad_at_end, "stale-grads"),
        (_amp(stepper="optimizer"), "optimizer-step"),
        (_amp_without_scaler, "no-scaler"),
        (_amp_calls_reference, "autogradlab.models.debug_cases.reference_amp_step"),
        (_amp_mutates_batch, "batch-changed"),
        (_amp(ret="graph"), "loss-with-graph"),
        (_amp(count="always"), "counts-skipped"),
        (_amp(count="finite loss"), "counts-skipped"),
        (_amp(count="equal"), "misses-updates"),
        (_amp(count="never"), "misses-updates"),
        (_amp_unscaled_backward, "scaler_never_scaled"),
        (_amp_no_scaler_step, "scaler_no_inf_checks"),
    ],
)
def test_broken_amp_steps_are_rejected_with_their_mistake(step, mistake):
    error = rejected(check_amp_step, step)
    assert error.mistake == mistake and error.hint


def test_amp_step_not_implemented():
    def todo(model, optimizer, scaler, batch, counter):
        raise NotImplementedError()

    assert rejected(check_amp_step, todo).kind == "not-implemented"


def test_the_drafts_other_bugs_are_found_once_the_doctor_is_silent():
    """Fix only the clip order: the optimizer.step() bug is next; fix that too: the counter."""

    def clip_fixed(model, optimizer, scaler, batch, counter):
        return _amp(stepper="optimizer", count="equal")(model, optimizer, scaler, batch, counter)

    assert rejected(check_amp_step, clip_fixed).mistake == "optimizer-step"
    assert rejected(check_amp_step, _amp(count="equal")).mistake == "misses-updates"


def test_the_clip_threshold_is_both_above_and_below_the_checkers_gradient_norms():
    """Otherwise a step that always rescales to CLIP_NORM would pass (the rejection above needs this)."""
    data = batches_of(*stripes(384, seed=3), 32)
    norms = []
    original = torch.nn.utils.clip_grad_norm_

    def recorded(*args, **kwargs):
        norms.append(float(original(*args, **kwargs)))
        return norms[-1]

    for seed in (0, 1):
        model, opt = conv_setup(seed)
        scaler = torch.amp.GradScaler("cpu")
        torch.nn.utils.clip_grad_norm_ = recorded
        try:
            for batch in data[:6]:
                reference_amp_step(model, opt, scaler, batch, {"updates": 0})
        finally:
            torch.nn.utils.clip_grad_norm_ = original
    assert min(norms) < CLIP_NORM < max(norms)


# ---------------------------------------------------------------------------- exercise 3


def _stack_walk(model, loss):
    registered = {id(p) for p in model.parameters()}
    found, seen, stack = [], set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        leaf = getattr(node, "variable", None)
        if leaf is not None and id(leaf) not in registered:
            found.append(leaf)
        stack.extend(nxt for nxt, _ in node.next_functions)
    return found


def _bfs_set(model, loss):
    registered = {id(p) for p in model.parameters()}
    queue, seen, leaves = collections.deque([loss.grad_fn]), set(), {}
    while queue:
        node = queue.popleft()
        if node in seen:
            continue
        seen.add(node)
        if type(node).__name__ == "AccumulateGrad" and id(node.variable) not in registered:
            leaves[id(node.variable)] = node.variable
        queue.extend(nxt for nxt, _ in node.next_functions if nxt is not None)
    return set(leaves.values())


def _recursive(model, loss):
    registered = {id(p) for p in model.parameters()}
    found, seen = [], set()

    def visit(node):
        if node is None or node in seen:
            return
        seen.add(node)
        if hasattr(node, "variable") and id(node.variable) not in registered:
            found.append(node.variable)
        for nxt, _ in node.next_functions:
            visit(nxt)

    visit(loss.grad_fn)
    return found


def _all_leaves(model, loss):
    found, seen, stack = [], set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if hasattr(node, "variable"):
            found.append(node.variable)
        stack.extend(nxt for nxt, _ in node.next_functions)
    return found


def _no_seen_set(model, loss):
    registered = {id(p) for p in model.parameters()}
    found, stack, steps = [], [loss.grad_fn], 0
    while stack and steps < 100_000:
        steps += 1
        node = stack.pop()
        if node is None:
            continue
        if hasattr(node, "variable") and id(node.variable) not in registered:
            found.append(node.variable)
        stack.extend(nxt for nxt, _ in node.next_functions)
    return found


def _no_seen_set_dedup(model, loss):
    """Errata 09 §5a: right on small graphs (leaves deduplicated), exponential on shared sub-paths."""
    registered = {id(p) for p in model.parameters()}
    found, stack = {}, [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None:
            continue
        leaf = getattr(node, "variable", None)
        if leaf is not None and id(leaf) not in registered:
            found[id(leaf)] = leaf
        stack.extend(nxt for nxt, _ in node.next_functions)
    return list(found.values())


def _scan_attributes(model, loss):
    registered = {id(p) for p in model.parameters()}
    found = []
    for module in model.modules():
        for value in vars(module).values():
            items = (
                value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
            )
            for item in items:
                if isinstance(item, torch.Tensor) and item.requires_grad and id(item) not in registered:
                    found.append(item)
    return found


def _backward_and_grad(model, loss):
    loss.backward(retain_graph=True)
    return [t for t in _scan_attributes(model, loss) if t.grad is not None]


def _doctor_walk(model, loss):
    registered = {id(p) for p in model.parameters()}
    return [t for t in graph_leaves(loss) if id(t) not in registered]


def _crashes_on_none(model, loss):
    registered = {id(p) for p in model.parameters()}
    found, seen, stack = [], set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if hasattr(node, "variable") and id(node.variable) not in registered:
            found.append(node.variable)
        stack.extend(nxt for nxt, _ in node.next_functions)
    return found


def _value_membership(model, loss):
    params = list(model.parameters())
    found, seen, stack = [], set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if hasattr(node, "variable") and node.variable not in params:
            found.append(node.variable)
        stack.extend(nxt for nxt, _ in node.next_functions)
    return found


def _names(model, loss):
    return [f"leaf{i}" for i, _ in enumerate(_stack_walk(model, loss))]


def _only_parameters(model, loss):
    return [t for t in _stack_walk(model, loss) if isinstance(t, nn.Parameter)]


@pytest.mark.parametrize("answer", [_stack_walk, _bfs_set])
def test_graph_walks_pass(answer, capsys):
    check_untrained_leaves(answer)
    assert capsys.readouterr().out.startswith("✓ untrained_leaves")


@pytest.mark.parametrize(
    "answer, kind, mistake",
    [
        (_recursive, "raised", "recursion"),
        (_all_leaves, "value", "registered"),
        (_no_seen_set, "contract", "duplicates"),
        (_no_seen_set_dedup, "contract", "no-visited-set"),
        (_scan_attributes, "value", "not-in-graph"),
        (_backward_and_grad, "off-limits", "`backward()`"),
        (_doctor_walk, "off-limits", "autogradlab.models.doctor.observe.graph_leaves"),
        (_crashes_on_none, "raised", "none_value"),
        (_names, "type", "names"),
        (_only_parameters, "value", "missed"),
    ],
)
def test_wrong_graph_walks_are_rejected_with_their_mistake(answer, kind, mistake):
    error = rejected(check_untrained_leaves, answer)
    assert (error.kind, error.mistake) == (kind, mistake) and error.hint


def test_comparing_tensors_by_value_is_named():
    error = rejected(check_untrained_leaves, _value_membership)
    assert error.mistake in ("ambiguous_bool", "size_mismatch") and "identities" in error.hint


def test_untrained_leaves_not_implemented():
    def todo(model, loss):
        raise NotImplementedError()

    assert rejected(check_untrained_leaves, todo).kind == "not-implemented"


def test_a_rejected_measurement_speaks_chinese_when_asked(monkeypatch):
    """Under AUTOGRADLAB_LANG=zh the checker's summary and hint are Chinese; kind and mistake stay."""
    monkeypatch.setenv("AUTOGRADLAB_LANG", "zh")
    error, chinese = rejected(check_case_1, case_1, HYPOTHESIS, [], OVERWRITTEN), re.compile("[\u4e00-\u9fff]")
    assert (error.kind, error.mistake) == ("value", "no_grad_1-wrong"), str(error)
    assert chinese.search(error.summary) and chinese.search(str(error).splitlines()[-1]), str(error)  # the hint line
