"""Chapter 07 checkers: correct alternatives pass, each typical wrong answer gets its own hint."""

import re

import pytest
import torch

from autogradlab.checks.ch07 import (
    check_accumulation_loop,
    check_amp_accumulation_step,
    check_rank_token_loss,
    check_window_token_loss,
)
from autogradlab.checks.core import ExerciseError


def rejects(checker, answer, hint):
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        checker(answer)


# --------------------------------------------------------------------------- accumulation loop


def loop_modulo(model, optimizer, loss_fn, micro_batches, accum_steps):
    for i, (x, y) in enumerate(micro_batches):
        (loss_fn(model(x), y) / accum_steps).backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)


def loop_windows(model, optimizer, loss_fn, micro_batches, accum_steps):
    for start in range(0, len(micro_batches), accum_steps):
        optimizer.zero_grad()
        for x, y in micro_batches[start:start + accum_steps]:
            loss = loss_fn(model(x), y)
            (loss * (1.0 / accum_steps)).backward()
        optimizer.step()
    optimizer.zero_grad()


@pytest.mark.parametrize("answer", [loop_modulo, loop_windows])
def test_loop_correct_alternatives_pass(answer, capsys):
    check_accumulation_loop(answer)
    assert capsys.readouterr().out.startswith("✓ accumulation_loop")


def loop_variant(kind):
    def loop(model, optimizer, loss_fn, micro_batches, accum_steps):
        divide = {"no_divide": 1, "divide_total": len(micro_batches)}.get(kind, accum_steps)
        for i, (x, y) in enumerate(micro_batches):
            if kind == "zero_each":
                optimizer.zero_grad()
            (loss_fn(model(x), y) / divide).backward()
            if kind == "step_each" or (i + 1) % accum_steps == 0:
                optimizer.step()
                if kind != "never_zero":
                    optimizer.zero_grad()
        if kind == "leave_grads":
            loss_fn(model(micro_batches[0][0]), micro_batches[0][1]).backward()
    return loop


WRONG_LOOPS = {
    "no divide": (loop_variant("no_divide"), "not divided by accum_steps"),
    "divide total": (loop_variant("divide_total"), "whole list"),
    "step each": (loop_variant("step_each"), "expected 2: one step per window"),
    "zero each": (loop_variant("zero_each"), "only the window's last micro-batch counted"),
    "never zero": (loop_variant("never_zero"), "never cleared after a step"),
    "grads left": (loop_variant("leave_grads"), "still there"),
    "not implemented": (lambda *a: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
}


@pytest.mark.parametrize("name", WRONG_LOOPS)
def test_loop_mistakes_are_named(name):
    rejects(check_accumulation_loop, *WRONG_LOOPS[name])


# --------------------------------------------------------------------------- window token mean


CORRECT_WINDOW = {
    "multiply": lambda l, m, n: (l * m).sum() / n,
    "index": lambda l, m, n: l[m].sum() / n,
    "where": lambda l, m, n: torch.where(m, l, torch.zeros_like(l)).sum() / n,
}


@pytest.mark.parametrize("name", CORRECT_WINDOW)
def test_window_loss_correct_alternatives_pass(name, capsys):
    check_window_token_loss(CORRECT_WINDOW[name])
    assert capsys.readouterr().out.count("✓ micro_batch_loss") == 2


WRONG_WINDOW = {
    "own mean": (lambda l, m, n: (l * m).sum() / m.sum(), "own token mean"),
    "padding": (lambda l, m, n: l.sum() / n, "padding tokens were counted"),
    "plain mean": (lambda l, m, n: l.mean(), "a plain .mean()"),
    "numel": (lambda l, m, n: (l * m).sum() / m.numel(), "mask.numel()"),
    "sequence means": (lambda l, m, n: ((l * m).sum(1) / m.sum(1)).mean(), "per-sequence means"),
    "sum": (lambda l, m, n: (l * m).sum(), "a sum over tokens where the token mean was meant"),
    "item": (lambda l, m, n: ((l * m).sum() / n).item(), "Python number"),
    "detached": (lambda l, m, n: ((l * m).sum() / n).detach(), "without a graph"),
    "per token": (lambda l, m, n: l * m / n, "a loss is a single number"),
}


@pytest.mark.parametrize("name", WRONG_WINDOW)
def test_window_loss_mistakes_are_named(name):
    rejects(check_window_token_loss, *WRONG_WINDOW[name])


# --------------------------------------------------------------------------- rank token mean


CORRECT_RANK = {
    "sum times world": lambda l, m, n, w: (l * m).sum() * w / n,
    "index": lambda l, m, n, w: l[m].sum() / (n / w),
}


@pytest.mark.parametrize("name", CORRECT_RANK)
def test_rank_loss_correct_alternatives_pass(name, capsys):
    check_rank_token_loss(CORRECT_RANK[name])
    assert capsys.readouterr().out.count("✓ rank_loss") == 2


WRONG_RANK = {
    "no world size": (lambda l, m, n, w: (l * m).sum() / n, "multiply the loss by world_size"),
    "local mean": (lambda l, m, n, w: (l * m).sum() / m.sum(), "this rank's own token mean"),
    "local mean / w": (lambda l, m, n, w: (l * m).sum() / m.sum() / w, "still a per-rank mean"),
    "local mean * w": (lambda l, m, n, w: (l * m).sum() / m.sum() * w, "scales a per-rank mean"),
    "padding": (lambda l, m, n, w: l.sum() * w / n, "padding tokens were counted"),
}


@pytest.mark.parametrize("name", WRONG_RANK)
def test_rank_loss_mistakes_are_named(name):
    rejects(check_rank_token_loss, *WRONG_RANK[name])


# --------------------------------------------------------------------------- AMP step


def amp_step(model, optimizer, scaler, loss_fn, micro_batches, max_norm):
    k = len(micro_batches)
    for x, y in micro_batches:
        scaler.scale(loss_fn(model, x, y) / k).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)


def amp_step_zero_first(model, optimizer, scaler, loss_fn, micro_batches, max_norm):
    optimizer.zero_grad()
    losses = [loss_fn(model, x, y) for x, y in micro_batches]
    for loss in losses:
        scaler.scale(loss * (1 / len(losses))).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_norm)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()


@pytest.mark.parametrize("answer", [amp_step, amp_step_zero_first])
def test_amp_correct_alternatives_pass(answer, capsys):
    check_amp_accumulation_step(answer)
    assert capsys.readouterr().out.startswith("✓ amp_accumulation_step")


def amp_variant(kind):
    def step(model, optimizer, scaler, loss_fn, micro_batches, max_norm):
        k = 1 if kind == "no_divide" else len(micro_batches)
        for x, y in micro_batches:
            loss = loss_fn(model, x, y) / k
            if kind == "no_scale_at_all":
                loss.backward()
            elif kind == "backward_unscaled":
                scaler.scale(loss)
                loss.backward()
            else:
                scaler.scale(loss).backward()
            if kind == "unscale_each":
                scaler.unscale_(optimizer)
            if kind == "step_each":
                scaler.unscale_(optimizer)
                scaler.step(optimizer)
                scaler.update()
        if kind in ("step_each",):
            optimizer.zero_grad()
            return
        if kind == "clip_first":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.unscale_(optimizer)
        elif kind != "unscale_each":
            scaler.unscale_(optimizer)
            if kind != "no_clip":
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if kind == "optimizer_step":
            optimizer.step()
        else:
            scaler.step(optimizer)
        if kind != "no_update":
            scaler.update()
        if kind != "no_zero":
            optimizer.zero_grad()
    return step


WRONG_AMP = {
    "clip before unscale": (amp_variant("clip_first"), "clipping ran on the SCALED gradients"),
    "no divide": (amp_variant("no_divide"), "not divided by the number of micro-batches"),
    "no clip": (amp_variant("no_clip"), "the gradients were not clipped"),
    "backward unscaled": (amp_variant("backward_unscaled"), "backward ran on the unscaled loss"),
    "never scaled": (amp_variant("no_scale_at_all"), "scaler.scale(loss).backward()"),
    "unscale each micro-batch": (amp_variant("unscale_each"), "unscale once per optimizer step"),
    "step each micro-batch": (amp_variant("step_each"), "ran 3 times"),
    "optimizer.step": (amp_variant("optimizer_step"), "skips the update when unscale_ found inf/NaN"),
    "no update": (amp_variant("no_update"), "call scaler.update() once per optimizer step"),
    "no zero_grad": (amp_variant("no_zero"), "end with optimizer.zero_grad"),
}


@pytest.mark.parametrize("name", WRONG_AMP)
def test_amp_mistakes_are_named(name):
    rejects(check_amp_accumulation_step, *WRONG_AMP[name])
