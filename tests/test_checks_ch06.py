"""Chapter 06 checkers: correct alternatives pass, each typical wrong answer gets its own hint."""

import copy
import io
import re

import pytest
import torch

from autogradlab.checks.ch06 import (
    check_evaluate,
    check_optimizer_coverage,
    check_resume,
    check_sgd_update,
    check_train_step,
)
from autogradlab.checks.core import ExerciseError


def rejects(checker, answer, hint, *more):
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        checker(answer, *more)


# --------------------------------------------------------------------------- train_step


def good_step(model, batch, optimizer, loss_fn, max_norm):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(batch[0]), batch[1])
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.detach()


def good_step_zeros_and_manual_clip(model, batch, optimizer, loss_fn, max_norm):
    model.train()
    inputs, targets = batch[0].to("cpu"), batch[1].to("cpu")
    for p in model.parameters():
        p.grad = None
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    total = torch.sqrt(sum((p.grad**2).sum() for p in model.parameters()))
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for p in model.parameters():
        p.grad.mul_(scale)
    optimizer.step()
    return loss.detach().clone()


@pytest.mark.parametrize("answer", [good_step, good_step_zeros_and_manual_clip])
def test_train_step_correct_alternatives_pass(answer, capsys):
    check_train_step(answer)
    assert capsys.readouterr().out.startswith("✓ train_step")


def make_step(**changes):
    def step(model, batch, optimizer, loss_fn, max_norm):
        if changes.get("train", True):
            model.train()
        if changes.get("zero", "before") == "before":
            optimizer.zero_grad()
        if changes.get("clip") == "before_backward":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if changes.get("step_first"):
            optimizer.step()
        loss = loss_fn(model(batch[0]), batch[1])
        loss.backward()
        if changes.get("zero") == "after":
            optimizer.zero_grad()
        if changes.get("clip", "between") == "between":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if not changes.get("step_first"):
            optimizer.step()
        if changes.get("clip") == "after_step":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        returned = changes.get("returned", "detach")
        return {"detach": loss.detach(), "raw": loss, "item": loss.item(), "none": None}[returned]
    return step


WRONG_STEPS = {
    "no train()": (make_step(train=False), "still in eval mode"),
    "no zero_grad": (make_step(zero="never"), "gradients accumulated across steps"),
    "zero_grad after backward": (make_step(zero="after"), "zero_grad ran after backward"),
    "no clip": (make_step(clip="never"), "the update used unclipped gradients"),
    "clip before backward": (make_step(clip="before_backward"), "before backward there is nothing to clip"),
    "clip after step": (make_step(clip="after_step"), "after step it is too late"),
    "step before backward": (make_step(step_first=True), "step ran before backward"),
    "raw loss": (make_step(returned="raw"), "returned the raw loss"),
    "item": (make_step(returned="item"), "returned a Python number"),
    "no return": (make_step(returned="none"), "should return the loss tensor"),
}


@pytest.mark.parametrize("name", WRONG_STEPS)
def test_train_step_mistakes_are_named(name):
    rejects(check_train_step, *WRONG_STEPS[name])


def test_train_step_not_implemented():
    def stub(model, batch, optimizer, loss_fn, max_norm):
        raise NotImplementedError()
    rejects(check_train_step, stub, "NotImplementedError")


# --------------------------------------------------------------------------- optimizer coverage


def coverage_ids(model, optimizer):
    covered = {id(p) for g in optimizer.param_groups for p in g["params"]}
    missing = [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in covered]
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad and id(p) in covered]
    return missing, frozen


def coverage_is(model, optimizer):
    params = [p for g in optimizer.param_groups for p in g["params"]]
    inside = lambda p: any(p is q for q in params)  # noqa: E731
    return ({n for n, p in model.named_parameters() if p.requires_grad and not inside(p)},
            tuple(n for n, p in model.named_parameters() if not p.requires_grad and inside(p)))


@pytest.mark.parametrize("answer", [coverage_ids, coverage_is])
def test_coverage_correct_alternatives_pass(answer, capsys):
    check_optimizer_coverage(answer)
    assert capsys.readouterr().out.startswith("✓ optimizer_coverage")


def coverage_no_requires_grad_filter(model, optimizer):
    covered = {id(p) for g in optimizer.param_groups for p in g["params"]}
    missing = [n for n, p in model.named_parameters() if id(p) not in covered]
    return missing, coverage_ids(model, optimizer)[1]


def coverage_frozen_all(model, optimizer):
    return coverage_ids(model, optimizer)[0], [n for n, p in model.named_parameters() if not p.requires_grad]


def coverage_by_value(model, optimizer):
    params = [p for g in optimizer.param_groups for p in g["params"]]
    inside = lambda p: any(p.shape == q.shape and torch.equal(p, q) for q in params)  # noqa: E731
    return ([n for n, p in model.named_parameters() if p.requires_grad and not inside(p)],
            [n for n, p in model.named_parameters() if not p.requires_grad and inside(p)])


def coverage_in_list(model, optimizer):
    params = [p for g in optimizer.param_groups for p in g["params"]]
    return [n for n, p in model.named_parameters() if p.requires_grad and p not in params], []


def coverage_first_group_only(model, optimizer):
    covered = {id(p) for p in optimizer.param_groups[0]["params"]}
    return ([n for n, p in model.named_parameters() if p.requires_grad and id(p) not in covered],
            [n for n, p in model.named_parameters() if not p.requires_grad and id(p) in covered])


WRONG_COVERAGE = {
    "swapped": (lambda m, o: coverage_ids(m, o)[::-1], "swapped"),
    "no requires_grad filter": (coverage_no_requires_grad_filter, "only trainable"),
    "frozen outside listed": (coverage_frozen_all, "frozen ones left out are correct"),
    "by value": (coverage_by_value, "compare identities with id(p)"),
    "p in list": (coverage_in_list, "compares tensors by value"),
    "first group only": (coverage_first_group_only, "every param group"),
    "tensors not names": (lambda m, o: ([p for p in m.parameters()], []), "names"),
    "single list": (lambda m, o: [], "a pair (missing, frozen_inside)"),
}


@pytest.mark.parametrize("name", WRONG_COVERAGE)
def test_coverage_mistakes_are_named(name):
    rejects(check_optimizer_coverage, *WRONG_COVERAGE[name])


# --------------------------------------------------------------------------- manual SGD update


def sgd_no_grad(params, lr, weight_decay):
    with torch.no_grad():
        for p in params:
            if p.grad is None:
                continue
            p.sub_(lr * p.grad + lr * weight_decay * p)


def sgd_foreach(params, lr, weight_decay):
    with torch.no_grad():
        ps = [p for p in params if p.grad is not None]
        torch._foreach_mul_(ps, 1 - lr * weight_decay)
        torch._foreach_add_(ps, [p.grad for p in ps], alpha=-lr)


@pytest.mark.parametrize("answer", [sgd_no_grad, sgd_foreach])
def test_sgd_correct_alternatives_pass(answer, capsys):
    check_sgd_update(answer)
    assert capsys.readouterr().out.startswith("✓ sgd_update_")


def sgd_rebind(params, lr, weight_decay):
    for p in params:
        if p.grad is not None:
            p = p - lr * (p.grad + weight_decay * p)  # noqa: F841


def sgd_without_no_grad(params, lr, weight_decay):
    for p in params:
        if p.grad is not None:
            p -= lr * (p.grad + weight_decay * p)


def sgd_data(params, lr, weight_decay):
    for p in params:
        if p.grad is not None:
            p.data -= lr * (p.grad + weight_decay * p.data)


def sgd_no_skip(params, lr, weight_decay):
    with torch.no_grad():
        for p in params:
            p -= lr * (p.grad + weight_decay * p)


def sgd_variant(kind):
    def update(params, lr, weight_decay):
        with torch.no_grad():
            for p in params:
                g = p.grad if p.grad is not None else torch.zeros_like(p)
                if kind == "ascent":
                    p += lr * (g + weight_decay * p)
                elif kind == "no_decay":
                    p -= lr * g
                elif kind == "decay_unscaled":
                    p -= lr * g + weight_decay * p
                elif kind == "decay_on_all":
                    p -= lr * (g + weight_decay * p)
    return update


WRONG_SGD = {
    "rebind": (sgd_rebind, "binds a new tensor"),
    "no no_grad": (sgd_without_no_grad, "inside `with torch.no_grad():`"),
    ".data": (sgd_data, "that is what `.data` does"),
    "None grad": (sgd_no_skip, "skip it"),
    "ascent": (sgd_variant("ascent"), "the sign is flipped"),
    "no decay": (sgd_variant("no_decay"), "weight decay is missing"),
    "decay unscaled": (sgd_variant("decay_unscaled"), "not multiplied by lr"),
    "decay without grad": (sgd_variant("decay_on_all"), "skip parameters without a gradient"),
}


@pytest.mark.parametrize("name", WRONG_SGD)
def test_sgd_mistakes_are_named(name):
    rejects(check_sgd_update, *WRONG_SGD[name])


# --------------------------------------------------------------------------- evaluate


def evaluate_no_grad(model, batches, loss_fn):
    was_training = model.training
    model.eval()
    total, n = 0.0, 0
    with torch.no_grad():
        for x, y in batches:
            total += loss_fn(model(x), y).item() * x.shape[0]
            n += x.shape[0]
    model.train(was_training)
    return total / n


def evaluate_inference_mode(model, batches, loss_fn):
    mode = model.training
    model.eval()
    with torch.inference_mode():
        losses = torch.stack([loss_fn(model(x), y) * len(x) for x, y in batches])
        result = float(losses.sum() / sum(len(x) for x, _ in batches))
    model.train(mode)
    return result


@pytest.mark.parametrize("answer", [evaluate_no_grad, evaluate_inference_mode])
def test_evaluate_correct_alternatives_pass(answer, capsys):
    check_evaluate(answer)
    assert capsys.readouterr().out.startswith("✓ evaluate")


def eval_variant(eval_mode=True, no_grad=True, restore=True, weighted=True, item=True):
    def evaluate(model, batches, loss_fn):
        was = model.training
        if eval_mode:
            model.eval()
        total, n = 0.0, 0
        with torch.set_grad_enabled(not no_grad):
            for x, y in batches:
                loss = loss_fn(model(x), y)
                total = total + (loss if not item else loss.item()) * (len(x) if weighted else 1)
                n += len(x) if weighted else 1
        if restore:
            model.train(was)
        return total / n
    return evaluate


WRONG_EVALUATE = {
    "no eval": (eval_variant(eval_mode=False), "BatchNorm's running statistics"),
    "no no_grad": (eval_variant(no_grad=False), "built autograd graphs"),
    "not restored": (eval_variant(restore=False), "remember `was_training = model.training`"),
    "mean of means": (eval_variant(weighted=False), "mean of the three batch means"),
    "tensor": (eval_variant(item=False), "return a Python float"),
}


@pytest.mark.parametrize("name", WRONG_EVALUATE)
def test_evaluate_mistakes_are_named(name):
    rejects(check_evaluate, *WRONG_EVALUATE[name])


# --------------------------------------------------------------------------- exact resume


def save_deepcopy(model, optimizer, scheduler):
    return copy.deepcopy({"m": model.state_dict(), "o": optimizer.state_dict(), "s": scheduler.state_dict(),
                          "rng": torch.get_rng_state()})


def load_deepcopy(state, model, optimizer, scheduler):
    model.load_state_dict(state["m"])
    optimizer.load_state_dict(state["o"])
    scheduler.load_state_dict(state["s"])
    torch.set_rng_state(state["rng"])


def save_buffer(model, optimizer, scheduler):
    buffer = io.BytesIO()
    torch.save({"m": model.state_dict(), "o": optimizer.state_dict(), "s": scheduler.state_dict(),
                "rng": torch.random.get_rng_state()}, buffer)
    return buffer.getvalue()


def load_buffer(state, model, optimizer, scheduler):
    loaded = torch.load(io.BytesIO(state), weights_only=True)
    model.load_state_dict(loaded["m"])
    optimizer.load_state_dict(loaded["o"])
    scheduler.load_state_dict(loaded["s"])
    torch.random.set_rng_state(loaded["rng"])


@pytest.mark.parametrize("pair", [(save_deepcopy, load_deepcopy), (save_buffer, load_buffer)])
def test_resume_correct_alternatives_pass(pair, capsys):
    check_resume(*pair)
    assert capsys.readouterr().out.startswith("✓ training resumed")


def save_without(skip):
    def save(model, optimizer, scheduler):
        state = {"m": model.state_dict(), "o": optimizer.state_dict(), "s": scheduler.state_dict(), "rng": torch.get_rng_state()}
        return state if skip == "copy" else copy.deepcopy({k: v for k, v in state.items() if k != skip})
    return save


def load_what_is_there(state, model, optimizer, scheduler):
    if "m" in state:
        model.load_state_dict(state["m"])
    if "o" in state:
        optimizer.load_state_dict(state["o"])
    if "s" in state:
        scheduler.load_state_dict(state["s"])
    if "rng" in state:
        torch.set_rng_state(state["rng"])


WRONG_RESUME = {
    "no copy": ("copy", "references to the live tensors"),
    "model": ("m", "load model.state_dict()"),
    "optimizer": ("o", "optimizer state was not restored"),
    "scheduler": ("s", "learning-rate schedule was not restored"),
    "rng": ("rng", "RNG state was not restored"),
}


@pytest.mark.parametrize("name", WRONG_RESUME)
def test_resume_mistakes_are_named(name):
    skip, hint = WRONG_RESUME[name]
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_resume(save_without(skip), load_what_is_there)
