"""Chapter 09 checkers: each correct answer passes in several forms; each plausible wrong one is rejected
with a hint that names its mistake (through the doctor's finding where the doctor sees it)."""

import collections
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from autogradlab.checks.ch09 import (
    CLIP_NORM,
    HEAD_LIMIT,
    TinyConvNet,
    check_amp_step,
    check_repaired_convnet,
    check_untrained_leaves,
    course_calls,
    reference_amp_step,
)
from autogradlab.checks.core import ExerciseError
from autogradlab.models.doctor import graph_leaves

# ---------------------------------------------------------------------------- exercise 1


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
    "body, hint",
    [
        (_logged_view, "detach() is not a copy"),
        (_logged_with_graph, "requires grad"),
        (_logged_normalised, "before the normalisation"),
        (_no_log, "self.logged"),
        (_super_forward, "TinyConvNet.forward is the course's version"),
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


def _amp(
    clip="after",
    clamp="no_grad",
    zero_grad=True,
    stepper="scaler",
    autocast=torch.float16,
    ret="detach",
    bound=HEAD_LIMIT,
    count="scale",
):
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
        scale, before = scaler.get_scale(), model.head.weight.detach().clone()
        if stepper == "scaler":
            scaler.step(optimizer)
        else:
            optimizer.step()
        scaler.update()
        if count == "scale" and scaler.get_scale() >= scale:
            counter["updates"] += 1
        elif count == "moved" and not torch.equal(before, model.head.weight):
            counter["updates"] += 1
        elif count == "always" or (count == "finite loss" and torch.isfinite(loss)):
            counter["updates"] += 1
        if clamp == "no_grad":
            with torch.no_grad():
                model.head.weight.clamp_(-bound, bound)
                torch.clamp_(model.head.bias, -bound, bound)
        elif clamp == "data":
            for p in model.head.parameters():
                p.data.clamp_(-bound, bound)
        return loss.item() if ret == "item" else loss.detach()

    return step


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
    return loss


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


@pytest.mark.parametrize("step", [reference_amp_step, _amp(ret="item"), _amp(), _amp(count="moved")])
def test_correct_amp_steps_pass(step, capsys):
    check_amp_step(step)
    assert capsys.readouterr().out.startswith("✓ amp_step")


@pytest.mark.parametrize(
    "step, hint",
    [
        (_amp(clip="before"), "call scaler.unscale_(optimizer) before clip_grad_norm_"),
        (_amp(clamp="data"), "not through p.data"),
        (_amp(bound=4 // 10), "4 // 10 is integer division"),
        (_amp(zero_grad=False), "zero_grad() at the start"),
        (_amp(clip="none"), "the gradients are not clipped"),
        (_amp_rescaling, "only shrinks gradients whose norm is above the threshold"),
        (_amp(clamp="none"), "the head is not kept in"),
        (_amp(autocast=None), "the forward runs in float32"),
        (_amp(autocast=torch.bfloat16), "the forward runs in bf16"),
        (_amp_zero_grad_at_end, "already in .grad when it started"),
        (_amp(stepper="optimizer"), "calls optimizer.step() itself"),
        (_amp_without_scaler, "does not use the GradScaler"),
        (_amp_calls_reference, "reference_amp_step is the checker's answer"),
        (_amp_mutates_batch, "changed the batch it was given in place"),
        (_amp(count="always"), "it counts steps the GradScaler skipped"),
        (_amp(count="finite loss"), "even with a finite loss"),
        (_amp(count="never"), "count exactly the updates the optimizer applied"),
        (
            lambda model, optimizer, scaler, batch, counter: (_ for _ in ()).throw(NotImplementedError()),
            "NotImplementedError",
        ),
    ],
)
def test_broken_amp_steps_are_rejected_with_their_hint(step, hint):
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_amp_step(step)


def _clamp_everything(model, optimizer, scaler, batch, counter):
    loss = _amp()(model, optimizer, scaler, batch, counter)
    with torch.no_grad():
        for p in model.parameters():
            p.clamp_(-HEAD_LIMIT, HEAD_LIMIT)
    return loss


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


@pytest.mark.parametrize(
    "step, hint",
    [
        (_amp_unscaled_backward, "scaler.scale(loss).backward()"),
        (_amp_no_scaler_step, "step with scaler.step(optimizer)"),
    ],
)
def test_steps_that_raise_inside_the_scaler_get_a_hint(step, hint):
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_amp_step(step)


def test_clamping_every_parameter_is_named():
    with pytest.raises(ExerciseError, match="only the head is constrained"):
        check_amp_step(_clamp_everything)


def test_the_clip_threshold_is_both_above_and_below_the_checkers_gradient_norms():
    """Otherwise a step that always rescales to CLIP_NORM would pass (the rejection above needs this)."""
    from autogradlab.checks.ch09 import CONV_LR, CONV_MOMENTUM, batches_of, stripes

    data = batches_of(*stripes(384, seed=3), 32)
    norms = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = TinyConvNet()
        opt = torch.optim.SGD(model.parameters(), lr=CONV_LR, momentum=CONV_MOMENTUM)
        scaler = torch.amp.GradScaler("cpu")
        original = torch.nn.utils.clip_grad_norm_
        torch.nn.utils.clip_grad_norm_ = lambda *a, **k: norms.append(float(original(*a, **k))) or norms[-1]
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
    "answer, hint",
    [
        (_recursive, "walk with a stack"),
        (_all_leaves, "in model.parameters()"),
        (_no_seen_set, "more than once"),
        (_scan_attributes, "walk the graph from loss.grad_fn"),
        (_backward_and_grad, "`backward()`"),
        (_doctor_walk, "the doctor's graph walk and capture() are the course's answer"),
        (_crashes_on_none, "skip those entries"),
        (_value_membership, "compare identities"),
        (_names, "return the tensors"),
        (_only_parameters, "wherever it lives"),
        (lambda model, loss: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    ],
)
def test_wrong_graph_walks_are_rejected_with_their_hint(answer, hint):
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_untrained_leaves(answer)


def test_course_calls_records_only_calls_from_outside_the_package_and_torch():
    model = TinyConvNet()
    with course_calls() as seen:
        model(torch.zeros(1, 1, 12, 12))  # torch calls TinyConvNet.forward: not the learner's call
    assert seen == []
    with course_calls() as seen:
        TinyConvNet.forward(model, torch.zeros(1, 1, 12, 12))
    assert seen == ["autogradlab.checks.ch09.TinyConvNet.forward"]
