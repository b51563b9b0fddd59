"""Checkers for chapter 07 (gradient accumulation).

The accumulation loop and the AMP step are run on small models and compared with
a reference; the token-mean losses are compared as functions (values and
gradients) on batches with unequal sequence lengths, where the wrong reductions
give measurably different answers.
"""

from __future__ import annotations

from typing import Callable

import torch

from autogradlab.checks.core import Case, ExerciseError, call_learner, check_function, compare, passed, seeded

# --------------------------------------------------------------------------- exercise: the accumulation loop


def _loop_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).double()


def _micro_batches(seed: int, count: int, size: int = 3):
    gen = seeded(200 + seed)
    return [(torch.randn(size, 5, generator=gen, dtype=torch.float64), torch.randn(size, 2, generator=gen, dtype=torch.float64))
            for _ in range(count)]


def _reference_loop(model, optimizer, loss_fn, micro_batches, accum_steps):
    for i, (x, y) in enumerate(micro_batches):
        (loss_fn(model(x), y) / accum_steps).backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)


def _loop_variant(kind: str):
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

    return loop


LOOP_MISTAKES = {
    "the loss was not divided by accum_steps: the accumulated gradient is accum_steps× the window's mean gradient, "
    "which acts like an accum_steps× larger learning rate.": _loop_variant("no_divide"),
    "the loss was divided by the number of micro-batches in the whole list, not by accum_steps (the window size).":
        _loop_variant("divide_total"),
    "optimizer.step() ran after every micro-batch: step (and zero_grad) once per window, when (i + 1) % accum_steps == 0.":
        _loop_variant("step_each"),
    "the gradients were cleared before every micro-batch, so only the window's last micro-batch counted: "
    "zero_grad once per window, after optimizer.step().": _loop_variant("zero_each"),
    "the gradients were never cleared after a step, so each window added to the previous window's gradients: "
    "call optimizer.zero_grad(set_to_none=True) after optimizer.step().": _loop_variant("never_zero"),
}


def _run_loop(fn, seed: int, count: int, accum_steps: int, call=None):
    model = _loop_model(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3)
    steps = []
    original = optimizer.step

    def counting_step(*args, **kwargs):
        steps.append(1)
        return original(*args, **kwargs)

    optimizer.step = counting_step
    start = _flat(model)
    args = (model, optimizer, torch.nn.MSELoss(), _micro_batches(seed, count), accum_steps)
    call(fn, args) if call else fn(*args)
    return _flat(model) - start, len(steps), model  # the update: scale mistakes show as factors


def _flat(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


def check_accumulation_loop(accumulation_loop: Callable) -> None:
    """Check ``accumulation_loop(model, optimizer, loss_fn, micro_batches, accum_steps)`` against the reference loop.

    >>> check_accumulation_loop(_reference_loop)
    ✓ accumulation_loop steps once per window with the window's mean gradient (3 set-ups)
    """
    for seed, count, k in ((0, 8, 4), (1, 6, 3), (2, 6, 2)):
        label = f"{count} micro-batches of 3 samples, accum_steps={k} (MSE mean loss, SGD, float64)"
        got, steps, model = _run_loop(
            accumulation_loop, seed, count, k, call=lambda fn, args: call_learner(fn, args, "accumulation_loop", label)
        )
        if steps != count // k:
            raise ExerciseError(
                f"`accumulation_loop` called optimizer.step() {steps} times for {label}; expected {count // k}: "
                "one step per window of accum_steps micro-batches."
            )
        expected, _, _ = _run_loop(_reference_loop, seed, count, k)
        wrong = {hint: _run_loop(fn, seed, count, k)[0] for hint, fn in LOOP_MISTAKES.items()}
        compare(got, expected, what="the total parameter update of the loop", label=label,
                context={"accum_steps": k}, mistakes=wrong)
        if any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters()):
            raise ExerciseError(
                f"after `accumulation_loop` the gradients of the last window are still there for {label}: "
                "zero them after each optimizer.step()."
            )
    passed("accumulation_loop steps once per window with the window's mean gradient (3 set-ups)")


# --------------------------------------------------------------------------- exercises: token-mean losses


def _token_cases(seed: int, extra: bool = False) -> list[Case]:
    gen = seeded(seed)
    cases = []
    shapes = [((3, 7), 40), ((2, 5), 17), ((1, 9), 25), ((4, 1), 9)]  # (B, T) of a micro-batch; tokens in the window
    for (batch, length), window in shapes:
        losses = torch.rand(batch, length, generator=gen, dtype=torch.float64) * 3
        lengths = torch.randint(1, length + 1, (batch,), generator=gen)
        lengths[0] = max(1, length - 1)  # some padding in every case with T > 1
        mask = torch.arange(length)[None, :] < lengths[:, None]
        window = max(window, int(mask.sum()) + 3)  # the other micro-batches of the window hold more tokens
        where = "on all ranks" if extra else "in the window"
        label = f"token_losses of shape ({batch}, {length}), {int(mask.sum())} tokens here, {window} {where}"
        args = (losses, mask, window) + ((2 if batch % 2 else 3,) if extra else ())
        cases.append(Case(args, label, context={"num_tokens": window}))
    return cases


def _window_loss_reference(token_losses, mask, window_tokens):
    return (token_losses * mask).sum() / window_tokens


WINDOW_MISTAKES = {
    "that is this micro-batch's own token mean: each micro-batch must divide by the token count of the WHOLE "
    "window (window_tokens), so that the summed gradients equal the window's token mean.":
        lambda l, m, n: (l * m).sum() / m.sum(),
    "padding tokens were counted: multiply by the mask (or index with it) before summing.":
        lambda l, m, n: l.sum() / n,
    "a plain .mean() counts the padding and divides by B·T positions, not by tokens.":
        lambda l, m, n: l.mean(),
    "dividing by mask.numel() counts padding positions as tokens: divide by window_tokens.":
        lambda l, m, n: (l * m).sum() / m.numel(),
    "a mean of per-sequence means weights a short sequence like a long one: sum all tokens, divide by window_tokens.":
        lambda l, m, n: ((l * m).sum(dim=1) / m.sum(dim=1).clamp_min(1)).mean(),
}


def _check_scalar(fn, cases, name):
    got = call_learner(fn, cases[0].args, name, cases[0].label)
    if isinstance(got, torch.Tensor) and got.dim() > 0:
        raise ExerciseError(
            f"`{name}` returned a tensor of shape {tuple(got.shape)} for {cases[0].label}: a loss is a single number "
            "(0-dim tensor), the SUM of the masked token losses divided by the token count."
        )


def _check_gradient(fn, cases, name, reference):
    """The loss must stay differentiable: d(loss)/d(token_losses) is compared with the reference's."""
    for case in cases:
        losses = case.args[0].detach().clone().requires_grad_(True)
        got = call_learner(fn, (losses, *case.args[1:]), name, case.label)
        if not isinstance(got, torch.Tensor) or not got.requires_grad:
            raise ExerciseError(
                f"`{name}` returned a value without a graph for {case.label}: the loss must stay a tensor connected "
                "to token_losses (no .item(), no .detach(), no torch.tensor(...)), or backward cannot run."
            )
        (grad,) = torch.autograd.grad(got, losses)
        ref_losses = case.args[0].detach().clone().requires_grad_(True)
        (expected,) = torch.autograd.grad(reference(ref_losses, *case.args[1:]), ref_losses)
        compare(grad, expected, what=f"the gradient of `{name}` with respect to token_losses", label=case.label)


def check_window_token_loss(micro_batch_loss: Callable) -> None:
    """Check ``micro_batch_loss(token_losses, mask, window_tokens)``: the micro-batch's share of the window's token mean.

    >>> check_window_token_loss(lambda l, m, n: (l * m).sum() / n)
    ✓ micro_batch_loss matches the reference on 4 inputs
    ✓ micro_batch_loss is differentiable with the right gradient
    """
    cases = _token_cases(0)
    _check_scalar(micro_batch_loss, cases, "micro_batch_loss")
    check_function(micro_batch_loss, _window_loss_reference, cases, name="micro_batch_loss", mistakes=WINDOW_MISTAKES)
    _check_gradient(micro_batch_loss, cases, "micro_batch_loss", _window_loss_reference)
    passed("micro_batch_loss is differentiable with the right gradient")


def _rank_loss_reference(token_losses, mask, global_tokens, world_size):
    return (token_losses * mask).sum() * world_size / global_tokens


RANK_MISTAKES = {
    "DDP divides the summed gradients by world_size (it averages): multiply the loss by world_size so that the "
    "average of the ranks' gradients is the gradient of the global token mean.":
        lambda l, m, n, w: (l * m).sum() / n,
    "that is this rank's own token mean: ranks with fewer tokens then weigh as much as ranks with many. "
    "Divide by the global token count (all_reduce it before the backward pass) and multiply by world_size.":
        lambda l, m, n, w: (l * m).sum() / m.sum(),
    "this rank's token mean divided by world_size is still a per-rank mean (and DDP already averages): "
    "use sum · world_size / global_tokens.":
        lambda l, m, n, w: (l * m).sum() / m.sum() / w,
    "multiplying the rank's token mean by world_size scales a per-rank mean: divide the token SUM by global_tokens.":
        lambda l, m, n, w: (l * m).sum() / m.sum() * w,
    "padding tokens were counted: multiply by the mask before summing.":
        lambda l, m, n, w: l.sum() * w / n,
}


def check_rank_token_loss(rank_loss: Callable) -> None:
    """Check ``rank_loss(token_losses, mask, global_tokens, world_size)``: what one DDP rank backpropagates.

    >>> check_rank_token_loss(_rank_loss_reference)
    ✓ rank_loss matches the reference on 4 inputs
    ✓ rank_loss is differentiable with the right gradient
    """
    cases = _token_cases(1, extra=True)
    _check_scalar(rank_loss, cases, "rank_loss")
    check_function(rank_loss, _rank_loss_reference, cases, name="rank_loss", mistakes=RANK_MISTAKES)
    _check_gradient(rank_loss, cases, "rank_loss", _rank_loss_reference)
    passed("rank_loss is differentiable with the right gradient")


# --------------------------------------------------------------------------- exercise: AMP with accumulation

MAX_NORM = 0.5
INIT_SCALE = 2.0**12


def _amp_loss(model, x, y):
    """The forward pass under bf16 autocast on the CPU, loss in float32."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
    return torch.nn.functional.mse_loss(out.float(), y)


def _amp_reference(model, optimizer, scaler, loss_fn, micro_batches, max_norm):
    accum_steps = len(micro_batches)
    for x, y in micro_batches:
        scaler.scale(loss_fn(model, x, y) / accum_steps).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)


def _amp_variant(kind: str):
    def step(model, optimizer, scaler, loss_fn, micro_batches, max_norm):
        k = 1 if kind == "no_divide" else len(micro_batches)
        for x, y in micro_batches:
            loss = loss_fn(model, x, y) / k
            scaled = scaler.scale(loss)
            (loss if kind == "no_scale" else scaled).backward()
        if kind == "no_clip":
            scaler.unscale_(optimizer)
        elif kind == "clip_first":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.unscale_(optimizer)
        else:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    return step


AMP_MISTAKES = {
    "clipping ran on the SCALED gradients (their norm is scale× too large, so clipping shrank them far too much): "
    "call scaler.unscale_(optimizer) first, then clip_grad_norm_.": _amp_variant("clip_first"),
    "the loss was not divided by the number of micro-batches (accum_steps).": _amp_variant("no_divide"),
    "the gradients were not clipped: call clip_grad_norm_ after scaler.unscale_(optimizer), before scaler.step.":
        _amp_variant("no_clip"),
    "backward ran on the unscaled loss, but unscale_ still divided by the scale: call backward on the scaled loss, "
    "scaler.scale(loss).backward().":
        _amp_variant("no_scale"),
}


def _amp_setup(seed: int, overflow: bool):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=INIT_SCALE, growth_interval=1)  # grows after every good step
    gen = seeded(300 + seed)
    micro = [(torch.randn(4, 6, generator=gen) * 3, torch.randn(4, 3, generator=gen)) for _ in range(3)]
    if overflow:
        micro[1][0][0, 0] = float("inf")  # one bad sample: the gradients of this window overflow
    return model, optimizer, scaler, micro


def _run_amp(fn, seed, overflow, call=None):
    model, optimizer, scaler, micro = _amp_setup(seed, overflow)
    calls = []
    original = optimizer.step

    def counting_step(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    optimizer.step = counting_step
    start = _flat(model)
    args = (model, optimizer, scaler, _amp_loss, micro, MAX_NORM)
    call(fn, args) if call else fn(*args)
    return _flat(model) - start, scaler, model, len(calls)  # the update (NaN if the parameters went NaN)


def _call_amp(fn, args, label):
    try:
        return call_learner(fn, args, "amp_accumulation_step", label)
    except ExerciseError as error:
        text = str(error)
        if "unscale_() has already been called" in text:
            text += ("\nHint: unscale once per optimizer step, at the boundary: after the LAST micro-batch's backward, "
                     "right before clipping.")
        elif "_scale is None" in text:
            text += "\nHint: backpropagate the scaled loss: scaler.scale(loss).backward()."
        elif "No inf checks were recorded" in text:
            text += "\nHint: scaler.update() needs scaler.step(optimizer) (or unscale_) first in the same step."
        raise ExerciseError(text) from None


def check_amp_accumulation_step(amp_accumulation_step: Callable) -> None:
    """Check ``amp_accumulation_step(model, optimizer, scaler, loss_fn, micro_batches, max_norm)``: one AMP step over a window.

    >>> check_amp_accumulation_step(_amp_reference)
    ✓ amp_accumulation_step: scale, backward ×K, unscale once, clip, scaler.step, update, zero_grad (2 seeds, with and without overflow)
    """
    for seed in (0, 1):
        label = f"3 micro-batches of 4 samples, bf16 autocast, GradScaler('cpu', init_scale={INIT_SCALE:g}), seed {seed}"
        got, scaler, model, steps = _run_amp(amp_accumulation_step, seed, False, lambda fn, args: _call_amp(fn, args, label))
        if steps != 1:
            raise ExerciseError(
                f"optimizer.step() ran {steps} times for {label}; expected once: one optimizer step per window, "
                "through scaler.step(optimizer)."
            )
        expected, ref_scaler, _, _ = _run_amp(_amp_reference, seed, False)
        wrong = {hint: _run_amp(fn, seed, False)[0] for hint, fn in AMP_MISTAKES.items()}
        compare(got, expected, what="the parameter update", label=label,
                context={"accum_steps": 3}, mistakes=wrong)
        if any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters()):
            raise ExerciseError("after the step the gradients are still there: end with optimizer.zero_grad(set_to_none=True).")
        if scaler.get_scale() != ref_scaler.get_scale():
            raise ExerciseError(
                f"the scale is {scaler.get_scale():g} after a good step, expected {ref_scaler.get_scale():g}: "
                "call scaler.update() once per optimizer step, after scaler.step(optimizer)."
            )

        label = label.replace("3 micro-batches", "3 micro-batches, one with an inf input (overflow)")
        got, scaler, _, _ = _run_amp(amp_accumulation_step, seed, True, lambda fn, args: _call_amp(fn, args, label))
        if not torch.isfinite(got).all() or got.abs().max() > 0:
            raise ExerciseError(
                f"the parameters changed although the gradients overflowed, for {label}: step through "
                "scaler.step(optimizer), which skips the update when unscale_ found inf/NaN (optimizer.step() does not)."
            )
        if scaler.get_scale() != INIT_SCALE / 2:
            raise ExerciseError(
                f"after an overflow the scale should halve ({INIT_SCALE:g} → {INIT_SCALE / 2:g}), got {scaler.get_scale():g}: "
                "call scaler.update() once per optimizer step, after scaler.step(optimizer)."
            )
    passed("amp_accumulation_step: scale, backward ×K, unscale once, clip, scaler.step, update, zero_grad "
           "(2 seeds, with and without overflow)")
