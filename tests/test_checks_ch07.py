"""Chapter 07 checkers: correct alternatives pass, each plausible wrong answer gets its own hint."""

import re

import pytest
import torch
import torch.nn.functional as F

from autogradlab.checks.ch07 import (
    check_accumulation_loop,
    check_amp_accumulation_step,
    check_rank_token_loss,
    check_token_mean_window,
)
from autogradlab.checks.core import ExerciseError
from autogradlab.models import token_accumulation


def rejects(checker, answer, hint):
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        checker(answer)


def not_implemented(*args):
    raise NotImplementedError()


# --------------------------------------------------------------------------- exercise 1: accumulation loop


def loop_windows(model, optimizer, loss_fn, micro_batches, accum_steps):
    for start in range(0, len(micro_batches), accum_steps):
        window = micro_batches[start : start + accum_steps]
        optimizer.zero_grad(set_to_none=True)
        for x, y in window:
            (loss_fn(model(x), y) / len(window)).backward()
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def loop_modulo(model, optimizer, loss_fn, micro_batches, accum_steps):
    optimizer.zero_grad()
    n = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        start = i - i % accum_steps
        size = min(accum_steps, n - start)
        loss = loss_fn(model(x), y)
        (loss * (1.0 / size)).backward()
        if i + 1 == start + size:
            optimizer.step()
            optimizer.zero_grad(set_to_none=False)  # zeros, not None: also "cleared"


@pytest.mark.parametrize("answer", [loop_windows, loop_modulo])
def test_loop_correct_alternatives_pass(answer, capsys):
    check_accumulation_loop(answer)
    assert capsys.readouterr().out.startswith("✓ accumulation_loop")


def loop_variant(kind):
    def loop(model, optimizer, loss_fn, micro_batches, accum_steps):
        if kind != "stale_kept":
            optimizer.zero_grad()
        n = len(micro_batches)
        if kind == "window_backward":
            for start in range(0, n, accum_steps):
                window = micro_batches[start : start + accum_steps]
                (sum(loss_fn(model(x), y) for x, y in window) / len(window)).backward()
                optimizer.step()
                optimizer.zero_grad()
            return
        if kind == "forwards_first":
            for start in range(0, n, accum_steps):
                window = micro_batches[start : start + accum_steps]
                losses = [loss_fn(model(x), y) / len(window) for x, y in window]
                for loss in losses:
                    loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            return
        for i, (x, y) in enumerate(micro_batches):
            start = i - i % accum_steps
            size = min(accum_steps, n - start)
            divide = {"no_divide": 1, "divide_total": n, "partial_by_k": accum_steps}.get(kind, size)
            if kind == "zero_each" or (kind == "grads_left" and i == start):
                optimizer.zero_grad()  # grads_left: cleared at the start of each window, never after the last step
            if kind == "mutate":
                x -= x.mean()  # "standardise" the inputs in place
            loss = loss_fn(model(x), y) / divide
            if kind == "autograd_grad":
                grads = torch.autograd.grad(loss, list(model.parameters()))
                for p, g in zip(model.parameters(), grads):
                    p.grad = g if p.grad is None else p.grad + g
            else:
                loss.backward()
            last = (i + 1) % accum_steps == 0 or (i + 1 == n and kind != "partial_dropped")
            if kind == "step_each" or last:
                optimizer.step()
                if kind not in ("never_zero", "grads_left"):
                    optimizer.zero_grad()

    return loop


WRONG_LOOPS = {
    "no divide": ("no_divide", "not divided by the window size"),
    "divide by the whole list": ("divide_total", "whole list"),
    "last window divided by K": ("partial_by_k", "the last, shorter window was divided by accum_steps"),
    "last window dropped": ("partial_dropped", "never stepped"),
    "step each micro-batch": ("step_each", "stepped after every micro-batch"),
    "zero each micro-batch": ("zero_each", "only the window's last micro-batch counted"),
    "never zero": ("never_zero", "never cleared after a step"),
    "stale gradients kept": ("stale_kept", "stale gradients"),
    "one backward per window": ("window_backward", "calling backward once for the window"),
    "all forwards first": ("forwards_first", "all forward passes first"),
    "gradients left at the end": ("grads_left", "still in .grad"),
    "inputs mutated": ("mutate", "changed the caller's micro-batches in place"),
    "autograd.grad instead of backward": ("autograd_grad", "no backward pass that wrote .grad"),
}


@pytest.mark.parametrize("name", WRONG_LOOPS)
def test_loop_mistakes_are_named(name):
    kind, hint = WRONG_LOOPS[name]
    rejects(check_accumulation_loop, loop_variant(kind), hint)


def test_loop_not_implemented_is_named():
    rejects(check_accumulation_loop, not_implemented, "NotImplementedError")


# --------------------------------------------------------------------------- exercise 2: the window's token mean


def token_losses(model, features, targets):
    logits = model(features)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view_as(targets)


def window_multiply(model, micro_batches):
    model.zero_grad(set_to_none=True)
    n = sum(int(mask.sum()) for _, _, mask in micro_batches)
    total = 0.0
    for features, targets, mask in micro_batches:
        loss = (token_losses(model, features, targets) * mask).sum() / n
        loss.backward()
        total += loss.item()
    return total


def window_index_skip_empty(model, micro_batches):
    for p in model.parameters():
        p.grad = None
    n = torch.stack([mask.sum() for _, _, mask in micro_batches]).sum()
    logged = torch.zeros((), dtype=torch.float64)
    for features, targets, mask in micro_batches:
        if not mask.any():
            continue  # weight 0: nothing to backpropagate
        loss = token_losses(model, features, targets)[mask].sum() / n
        loss.backward()
        logged += loss.detach()
    return logged  # a 0-dim tensor converts to float


def window_ignore_index(model, micro_batches):
    model.zero_grad()
    n = sum(m.sum().item() for _, _, m in micro_batches)
    total = 0.0
    for features, targets, mask in micro_batches:
        labels = torch.where(mask, targets, -100)  # a new tensor: the caller's targets stay as they are
        logits = model(features)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum") / n
        loss.backward()
        total += loss.item()
    return total


@pytest.mark.parametrize("answer", [window_multiply, window_index_skip_empty, window_ignore_index])
def test_token_window_correct_alternatives_pass(answer, capsys):
    check_token_mean_window(answer)
    assert capsys.readouterr().out.startswith("✓ accumulate_token_mean")


def window_variant(kind):
    def answer(model, micro_batches):
        if kind != "stale_kept":
            model.zero_grad(set_to_none=True)
        k = len(micro_batches)
        n = sum(int(mask.sum()) for _, _, mask in micro_batches)
        if kind == "window_backward":
            loss = sum((token_losses(model, f, t) * m).sum() for f, t, m in micro_batches) / n
            loss.backward()
            return loss.item()
        if kind == "forwards_first":
            losses = [(token_losses(model, f, t) * m).sum() / n for f, t, m in micro_batches]
            for loss in losses:
                loss.backward()
            return sum(loss.item() for loss in losses)
        logged, seen = [], 0
        for features, targets, mask in micro_batches:
            if kind == "mutate":
                targets[~mask] = -100
                loss = F.cross_entropy(model(features).flatten(0, 1), targets.flatten(), reduction="sum") / n
            elif kind == "ignore_index_mean":  # cross_entropy's own mean, rescaled: 0/0 on an empty micro-batch
                labels = torch.where(mask, targets, -100)
                loss = F.cross_entropy(model(features).flatten(0, 1), labels.flatten()) * int(mask.sum()) / n
            else:
                losses = token_losses(model, features, targets)
                count = int(mask.sum())
                seen += count
                loss = {
                    "own_mean_k": lambda: (losses * mask).sum() / max(count, 1) / k,
                    "own_mean": lambda: (losses * mask).sum() / max(count, 1),
                    "padding": lambda: losses.sum() / n,
                    "positions": lambda: (losses * mask).sum() / sum(m.numel() for _, _, m in micro_batches),
                    "running": lambda: (losses * mask).sum() / max(seen, 1),
                    "course_helper": lambda: token_accumulation.micro_batch_loss(
                        model, token_accumulation.TokenBatch(features, targets, mask), "token-mean", k, n
                    ),
                }.get(kind, lambda: (losses * mask).sum() / n)()
            if kind == "autograd_grad":
                for p, g in zip(model.parameters(), torch.autograd.grad(loss, list(model.parameters()))):
                    p.grad = g if p.grad is None else p.grad + g
            else:
                loss.backward()
            if kind == "logged_mean":
                logged.append((losses.detach() * mask).sum().item() / max(int(mask.sum()), 1))
            else:
                logged.append(loss.item())
        return sum(logged) / (k if kind == "logged_mean" else 1)

    return answer


WRONG_WINDOWS = {
    "own mean / K": ("own_mean_k", "each micro-batch's own token mean divided by K"),
    "own mean": ("own_mean", "not divided by anything"),
    "padding counted": ("padding", "padding and prompt tokens were counted"),
    "positions": ("positions", "number of positions"),
    "running count": ("running", "tokens seen SO FAR"),
    "cross_entropy mean on an empty micro-batch": ("ignore_index_mean", "0/0 = NaN"),
    "stale gradients kept": ("stale_kept", "before the call are still in the result"),
    "one backward for the window": ("window_backward", "calling backward once for the window"),
    "all forwards first": ("forwards_first", "all forward passes first"),
    "caller's targets changed": ("mutate", "targets[~mask] = -100"),
    "logged mean of means": ("logged_mean", "the mean of the micro-batch means"),
    "course helper": ("course_helper", "off limits"),
    "autograd.grad instead of backward": ("autograd_grad", "no backward pass that wrote .grad"),
}


@pytest.mark.parametrize("name", WRONG_WINDOWS)
def test_token_window_mistakes_are_named(name):
    kind, hint = WRONG_WINDOWS[name]
    rejects(check_token_mean_window, window_variant(kind), hint)


def test_course_helpers_work_again_after_a_check():
    with pytest.raises(ExerciseError):
        check_token_mean_window(window_variant("course_helper"))
    batch = token_accumulation.token_batch(n_seqs=4)
    assert token_accumulation.accumulation_error(batch, 2, "token-mean").relative_error < 1e-12


# --------------------------------------------------------------------------- exercise 4: rank token mean


CORRECT_RANK = {
    "sum times world": lambda l, m, n, w: (l * m).sum() * w / n,
    "index": lambda l, m, n, w: l[m].sum() / (n / w),
    "where": lambda l, m, n, w: torch.where(m, l, 0.0).sum() * (w / float(n)),
}


@pytest.mark.parametrize("name", CORRECT_RANK)
def test_rank_loss_correct_alternatives_pass(name, capsys):
    check_rank_token_loss(CORRECT_RANK[name])
    assert capsys.readouterr().out.count("✓ rank_loss") == 2


def skip_empty_rank(l, m, n, w):
    if not m.any():
        return torch.zeros((), dtype=l.dtype)
    return (l * m).sum() * w / n


def zero_padding_in_place(l, m, n, w):
    l[~m] = 0
    return l.sum() * w / n


WRONG_RANK = {
    "no world size": (lambda l, m, n, w: (l * m).sum() / n, "multiply the loss by world_size"),
    "local mean": (lambda l, m, n, w: (l * m).sum() / m.sum(), "0/0 = NaN"),
    "local mean, clamped": (lambda l, m, n, w: (l * m).sum() / m.sum().clamp_min(1), "this rank's own token mean"),
    "local mean / w": (lambda l, m, n, w: (l * m).sum() / m.sum().clamp_min(1) / w, "still a per-rank mean"),
    "local mean * w": (lambda l, m, n, w: (l * m).sum() / m.sum().clamp_min(1) * w, "scales a per-rank mean"),
    "padding": (lambda l, m, n, w: l.sum() * w / n, "padding tokens were counted"),
    "mean times count": (lambda l, m, n, w: l[m].mean() * m.sum() * w / n, "0/0 = NaN"),
    "empty rank skipped": (skip_empty_rank, "DDP's all-reduce waits for every rank"),
    "in place": (zero_padding_in_place, "changed its input in place"),
    "item": (lambda l, m, n, w: ((l * m).sum() * w / n).item(), "Python number"),
    "per token": (lambda l, m, n, w: l * m * w / n, "a loss is a single number"),
}


@pytest.mark.parametrize("name", WRONG_RANK)
def test_rank_loss_mistakes_are_named(name):
    rejects(check_rank_token_loss, *WRONG_RANK[name])


# --------------------------------------------------------------------------- exercise 3: AMP step


def amp_step(model, optimizer, scaler, micro_batches, max_norm):
    k = len(micro_batches)
    for x, y in micro_batches:
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.mse_loss(model(x), y)
        scaler.scale(loss / k).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)


def amp_step_loss_outside(model, optimizer, scaler, micro_batches, max_norm):
    optimizer.zero_grad()
    for x, y in micro_batches:
        with torch.autocast(device_type="cpu", dtype=torch.float16):
            out = model(x)
        loss = F.mse_loss(out.float(), y) * (1 / len(micro_batches))
        scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_norm)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()


def amp_step_manual_skip(model, optimizer, scaler, micro_batches, max_norm):
    """No scaler.step: checks the unscaled gradients itself, then lets update() adjust the scale."""
    for x, y in micro_batches:
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.mse_loss(model(x), y)
        scaler.scale(loss / len(micro_batches)).backward()
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if torch.isfinite(norm):
        optimizer.step()
    scaler.update()
    optimizer.zero_grad()


@pytest.mark.parametrize("answer", [amp_step, amp_step_loss_outside, amp_step_manual_skip])
def test_amp_correct_alternatives_pass(answer, capsys):
    check_amp_accumulation_step(answer)
    assert capsys.readouterr().out.startswith("✓ amp_accumulation_step")


def amp_variant(kind):
    def step(model, optimizer, scaler, micro_batches, max_norm):
        k = 1 if kind == "no_divide" else len(micro_batches)
        dtype = torch.bfloat16 if kind == "bf16" else torch.float16
        if kind == "window_backward":
            total = 0
            for x, y in micro_batches:
                with torch.autocast("cpu", dtype=dtype):
                    total = total + F.mse_loss(model(x), y) / k
            scaler.scale(total).backward()
        for x, y in micro_batches if kind != "window_backward" else []:
            with torch.autocast("cpu", dtype=dtype, enabled=kind != "no_autocast"):
                loss = F.mse_loss(model(x), y) / k
                if kind == "backward_in_autocast":
                    scaler.scale(loss).backward()
            if kind == "no_scale_at_all":
                loss.backward()
            elif kind == "backward_unscaled":
                scaler.scale(loss)
                loss.backward()
            elif kind != "backward_in_autocast":
                scaler.scale(loss).backward()
            if kind == "unscale_each":
                scaler.unscale_(optimizer)
            if kind == "step_each":
                scaler.unscale_(optimizer)
                scaler.step(optimizer)
                scaler.update()
        if kind == "step_each":
            optimizer.zero_grad()
            return
        if kind == "clip_first":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.unscale_(optimizer)
        elif kind != "unscale_each":
            scaler.unscale_(optimizer)
            if kind != "no_clip":
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if kind == "update_first":
            scaler.update()
        if kind == "optimizer_step":
            optimizer.step()
        else:
            scaler.step(optimizer)
        if kind not in ("no_update", "update_first"):
            scaler.update()
        if kind != "no_zero":
            optimizer.zero_grad()

    return step


WRONG_AMP = {
    "clip before unscale": ("clip_first", "clipping ran on the SCALED gradients"),
    "no divide": ("no_divide", "not divided by the number of micro-batches"),
    "no clip": ("no_clip", "the gradients were not clipped"),
    "backward unscaled": ("backward_unscaled", "backward ran on the unscaled loss"),
    "never scaled": ("no_scale_at_all", "scaler.scale(loss).backward()"),
    "unscale each micro-batch": ("unscale_each", "unscale once per optimizer step"),
    "step each micro-batch": ("step_each", "called scaler.step(optimizer) 3 times"),
    "optimizer.step": ("optimizer_step", "skips the update when unscale_ found inf/NaN"),
    "no update": ("no_update", "call scaler.update() once per optimizer step"),
    "update before step": ("update_first", "before scaler.step"),
    "no zero_grad": ("no_zero", "end with optimizer.zero_grad"),
    "bf16 instead of fp16": ("bf16", "the exercise names float16"),
    "no autocast": ("no_autocast", "not under fp16 autocast"),
    "backward inside autocast": ("backward_in_autocast", "called backward inside the autocast region"),
    "one backward for the window": ("window_backward", "calling backward once for the window"),
}


@pytest.mark.parametrize("name", WRONG_AMP)
def test_amp_mistakes_are_named(name):
    kind, hint = WRONG_AMP[name]
    rejects(check_amp_accumulation_step, amp_variant(kind), hint)
