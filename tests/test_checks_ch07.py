"""Chapter 07 checkers: correct alternatives pass, each plausible wrong answer is rejected with the mistake it makes.

Tests read the ExerciseError's fields (kind, mistake, hint), never its text.
"""

import re

import pytest
import torch
import torch.nn.functional as F

from autogradlab.checks import ch07
from autogradlab.checks.ch07 import (
    check_accumulation_loop,
    check_amp_accumulation_step,
    check_rank_window_losses,
    check_token_mean_window,
)
from autogradlab.checks.core import ExerciseError
from autogradlab.models import token_accumulation


def rejects(checker, answer, mistake, kind=None):
    """The checker rejects ``answer``, naming ``mistake`` (and ``kind``) with a hint."""
    with pytest.raises(ExerciseError) as info:
        checker(answer)
    error = info.value
    assert (error.mistake, error.kind if kind else None) == (mistake, kind), str(error)
    assert error.hint is not None or error.kind == "not-implemented", str(error)


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
    "no divide": ("no_divide", "no-divide"),
    "divide by the whole list": ("divide_total", "divide-total"),
    "last window divided by K": ("partial_by_k", "partial-by-k"),
    "last window dropped": ("partial_dropped", "last-window-dropped"),
    "step each micro-batch": ("step_each", "step-each"),
    "zero each micro-batch": ("zero_each", "zero-each"),
    "never zero": ("never_zero", "never-zero"),
    "stale gradients kept": ("stale_kept", "stale-kept"),
    "one backward per window": ("window_backward", "one-backward-per-window"),
    "all forwards first": ("forwards_first", "forwards-first"),
    "gradients left at the end": ("grads_left", "grads-left"),
    "inputs mutated": ("mutate", "micro-batches-changed"),
    "autograd.grad instead of backward": ("autograd_grad", "no-backward"),
}


@pytest.mark.parametrize("name", WRONG_LOOPS)
def test_loop_mistakes_are_named(name):
    kind, mistake = WRONG_LOOPS[name]
    rejects(check_accumulation_loop, loop_variant(kind), mistake)


def test_not_implemented_is_named():
    for checker in (
        check_accumulation_loop,
        check_token_mean_window,
        check_amp_accumulation_step,
        check_rank_window_losses,
    ):
        rejects(checker, not_implemented, None, kind="not-implemented")


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


def window_divide_after(model, micro_batches):
    """No look-ahead: backpropagate raw token sums, then divide .grad by the window's count."""
    model.zero_grad(set_to_none=True)
    total, n = 0.0, 0
    for features, targets, mask in micro_batches:
        loss = (token_losses(model, features, targets) * mask).sum()
        loss.backward()
        total, n = total + loss.item(), n + int(mask.sum())
    for p in model.parameters():
        p.grad /= n
    return total / n


@pytest.mark.parametrize("answer", [window_multiply, window_index_skip_empty, window_ignore_index, window_divide_after])
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
            elif kind == "default_mean_k":  # cross_entropy's default: the mean over every position, then ÷K
                loss = F.cross_entropy(model(features).flatten(0, 1), targets.flatten()) / k
            elif kind == "mask_ignored":
                loss = token_losses(model, features, targets).sum() / sum(m.numel() for _, _, m in micro_batches)
            else:
                losses = token_losses(model, features, targets)
                count = int(mask.sum())
                seen += count
                kept = (losses * mask).sum()
                if kind == "course_helper":
                    batch = token_accumulation.TokenBatch(features, targets, mask)
                    loss = token_accumulation.micro_batch_loss(model, batch, "token-mean", k, n)
                else:
                    loss = {
                        "own_mean_k": kept / max(count, 1) / k,
                        "own_mean": kept / max(count, 1),
                        "padding": losses.sum() / n,
                        "positions": kept / sum(m.numel() for _, _, m in micro_batches),
                        "running": kept / max(seen, 1),
                    }.get(kind, kept / n)
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
    "own mean / K": ("own_mean_k", "own-mean-k"),
    "own mean": ("own_mean", "own-mean"),
    "cross_entropy's default mean / K": ("default_mean_k", "default-mean-k"),
    "padding counted": ("padding", "padding"),
    "mask ignored": ("mask_ignored", "mask-ignored"),
    "positions": ("positions", "positions"),
    "running count": ("running", "running"),
    "cross_entropy mean on an empty micro-batch": ("ignore_index_mean", "empty-micro-batch-nan"),
    "stale gradients kept": ("stale_kept", "stale-kept"),
    "one backward for the window": ("window_backward", "one-backward-per-window"),
    "all forwards first": ("forwards_first", "forwards-first"),
    "caller's targets changed": ("mutate", "micro-batches-changed"),
    "logged mean of means": ("logged_mean", "logged-mean"),
    "autograd.grad instead of backward": ("autograd_grad", "no-backward"),
}


@pytest.mark.parametrize("name", WRONG_WINDOWS)
def test_token_window_mistakes_are_named(name):
    kind, mistake = WRONG_WINDOWS[name]
    rejects(check_token_mean_window, window_variant(kind), mistake)


def test_the_course_helpers_are_off_limits_and_work_again_after_a_check():
    with pytest.raises(ExerciseError) as info:
        check_token_mean_window(window_variant("course_helper"))
    assert info.value.kind == "off-limits" and info.value.mistake.startswith("autogradlab.models.token_accumulation.")
    batch = token_accumulation.token_batch(n_seqs=4)
    assert token_accumulation.accumulation_error(batch, 2, "token-mean").relative_error < 1e-12


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
    "clip before unscale": ("clip_first", "clip-first"),
    "no divide": ("no_divide", "no-divide"),
    "no clip": ("no_clip", "no-clip"),
    "backward unscaled": ("backward_unscaled", "no-scale"),
    "never scaled": ("no_scale_at_all", "scaler_never_scaled"),
    "unscale each micro-batch": ("unscale_each", "scaler_unscaled_twice"),
    "step each micro-batch": ("step_each", "scaler-step-each"),
    "optimizer.step": ("optimizer_step", "optimizer-step"),
    "no update": ("no_update", "update-count"),
    "update before step": ("update_first", "update-before-step"),
    "no zero_grad": ("no_zero", "grads-left"),
    "bf16 instead of fp16": ("bf16", "bf16"),
    "no autocast": ("no_autocast", "no-autocast"),
    "backward inside autocast": ("backward_in_autocast", "backward-in-autocast"),
    "one backward for the window": ("window_backward", "one-backward-per-window"),
}


@pytest.mark.parametrize("name", WRONG_AMP)
def test_amp_mistakes_are_named(name):
    kind, mistake = WRONG_AMP[name]
    rejects(check_amp_accumulation_step, amp_variant(kind), mistake)


def amp_draft(model, optimizer, scaler, micro_batches, max_norm):
    """The draft chapter 07 asks the learner to repair (four slips)."""
    for inputs, targets in micro_batches:
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.mse_loss(model(inputs), targets)
            scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.unscale_(optimizer)
    optimizer.step()
    scaler.update()
    optimizer.zero_grad(set_to_none=True)


def test_the_chapters_draft_is_rejected_for_each_slip_in_turn():
    rejects(check_amp_accumulation_step, amp_draft, "backward-in-autocast")


# --------------------------------------------------------------------------- exercise 4: DDP × accumulation


def rank_reference(micro_batches, world_size, all_reduce):
    count = torch.zeros((), dtype=torch.float64)
    for _, mask in micro_batches:
        count += mask.sum()
    all_reduce(count)
    return [(losses * mask).sum() * world_size / count for losses, mask in micro_batches]


def rank_indexed_int_count(micro_batches, world_size, all_reduce):
    count = torch.stack([mask.sum() for _, mask in micro_batches]).sum()  # int64, as all_reduce leaves it
    all_reduce(count)
    share = count / world_size
    return [losses[mask].sum() / share for losses, mask in micro_batches]


def rank_where(micro_batches, world_size, all_reduce):
    tokens = torch.tensor([float(sum(m.sum() for _, m in micro_batches))])
    all_reduce(tokens)
    return [torch.where(mask, losses, 0.0).sum() * (world_size / tokens[0]) for losses, mask in micro_batches]


@pytest.mark.parametrize("answer", [rank_reference, rank_indexed_int_count, rank_where])
def test_rank_window_correct_alternatives_pass(answer, capsys):
    check_rank_window_losses(answer)
    assert capsys.readouterr().out.startswith("✓ rank_window_losses")


def rank_wrong(kind):
    def answer(micro_batches, world_size, all_reduce):
        count = sum(mask.sum() for _, mask in micro_batches).double()
        if kind == "skip_empty_rank" and count == 0:
            return [losses.sum() * 0 for losses, _ in micro_batches]
        if kind == "returned_value":
            count = all_reduce(count)
        else:
            all_reduce(count)
        if kind == "in_place":
            for losses, mask in micro_batches:
                losses[~mask] = 0
        out = []
        for losses, mask in micro_batches:
            total = (losses * mask).sum()
            if kind == "own_mean":
                out.append(losses[mask].mean() / len(micro_batches))
            elif kind == "mean_of_nothing":
                out.append(total * world_size / count if mask.any() else losses[mask].mean())
            elif kind == "item":
                out.append((total * world_size / count).item())
            elif kind == "per_token":
                out.append(losses * mask * world_size / count)
            else:
                out.append(total * world_size / count)
        return sum(out) if kind == "one_loss" else out

    return answer


WRONG_RANKS = {
    "this rank's count": (ch07._rank_variant("rank-count"), "rank-count"),
    "a count per micro-batch": (ch07._rank_variant("micro-count"), "micro-count"),
    "no × world_size": (ch07._rank_variant("no-world"), "no-world"),
    "÷ world_size": (ch07._rank_variant("over-world"), "over-world"),
    "÷ K on top": (ch07._rank_variant("divide-by-k"), "divide-by-k"),
    "padding counted": (ch07._rank_variant("rank-padding"), "rank-padding"),
    "an empty rank skips the all_reduce": (rank_wrong("skip_empty_rank"), "all-reduce-skipped"),
    "own token mean ÷ K": (rank_wrong("own_mean"), "rank-own-mean"),
    "an empty micro-batch's mean: 0/0": (rank_wrong("mean_of_nothing"), "empty-nan"),
    "a Python number": (rank_wrong("item"), "no-graph"),
    "a constant zero": (lambda micro, w, all_reduce: [torch.zeros(()) for _ in micro], "no-graph"),
    "per-token losses": (rank_wrong("per_token"), "not-a-scalar"),
    "one loss for the window": (rank_wrong("one_loss"), "not-one-loss-per-micro-batch"),
    "losses changed in place": (rank_wrong("in_place"), "micro-batches-changed"),
    "all_reduce's return value used": (rank_wrong("returned_value"), "none_value"),
}


@pytest.mark.parametrize("name", WRONG_RANKS)
def test_rank_window_mistakes_are_named(name):
    rejects(check_rank_window_losses, *WRONG_RANKS[name])


@pytest.mark.parametrize("name", ["per-token losses", "no × world_size"])
def test_a_rejected_answer_speaks_chinese_when_asked(name, monkeypatch):
    """Under AUTOGRADLAB_LANG=zh the checker's own summary and hint are Chinese; the fields stay the same."""
    monkeypatch.setenv("AUTOGRADLAB_LANG", "zh")
    answer, mistake = WRONG_RANKS[name]
    with pytest.raises(ExerciseError) as info:
        check_rank_window_losses(answer)
    error, chinese = info.value, re.compile("[\u4e00-\u9fff]")
    assert error.mistake == mistake and error.hint in ch07.HINTS.values(), str(
        error
    )  # the table's hint, shown translated
    assert chinese.search(error.summary) and chinese.search(str(error).splitlines()[-1]), str(error)
