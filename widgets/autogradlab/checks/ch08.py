"""Checkers for chapter 08 (mixed precision): the AMP step's order, the clip-before-unscale bug, the loss scale.

Every reference is PyTorch itself: a real ``torch.amp.GradScaler('cpu')``, real
``clip_grad_norm_``, real fp16 autocast on the CPU (tiny sizes, so it is fast).
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F

from autogradlab.checks.core import Case, ExerciseError, call_learner, check_function, passed, seeded

# ---------------------------------------------------------------------------------------------
# Exercise 1: the AMP training step, in order
# ---------------------------------------------------------------------------------------------


def reference_amp_train_step(model, optimizer, scaler, x, y, max_norm):
    """The canonical fp16 step: zero_grad → autocast forward → scale → backward → unscale_ → clip → step → update."""
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type=x.device.type, dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def _forward_loss(model, x, y):
    with torch.autocast(device_type=x.device.type, dtype=torch.float16):
        return F.mse_loss(model(x), y)


def _clip_before_unscale(model, optimizer, scaler, x, y, max_norm):
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(_forward_loss(model, x, y)).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()


def _zero_grad_after_backward(model, optimizer, scaler, x, y, max_norm):
    scaler.scale(_forward_loss(model, x, y)).backward()
    optimizer.zero_grad(set_to_none=False)
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()


def _no_clip(model, optimizer, scaler, x, y, max_norm):
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(_forward_loss(model, x, y)).backward()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()


def _optimizer_step(model, optimizer, scaler, x, y, max_norm):
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(_forward_loss(model, x, y)).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scaler.update()


def _no_update(model, optimizer, scaler, x, y, max_norm):
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(_forward_loss(model, x, y)).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)


def _update_before_step(model, optimizer, scaler, x, y, max_norm):
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(_forward_loss(model, x, y)).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.update()
    scaler.step(optimizer)


def _no_zero_grad(model, optimizer, scaler, x, y, max_norm):
    scaler.scale(_forward_loss(model, x, y)).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()


AMP_STEP_MISTAKES: dict[str, Callable] = {
    "clip_grad_norm_ ran on the *scaled* gradients (before scaler.unscale_, or with no unscale_ at all): their norm "
    "is S·‖g‖, so the clip shrinks them S times too much and the update almost vanishes. Call "
    "scaler.unscale_(optimizer) right before clip_grad_norm_: scale → backward → unscale_ → clip → step → update.":
        _clip_before_unscale,
    "the gradients were not clipped: call torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) after "
    "scaler.unscale_(optimizer) and before scaler.step(optimizer).": _no_clip,
    "optimizer.step() applies inf/NaN gradients on an overflow step: call scaler.step(optimizer), which skips the "
    "step when the unscaled gradients contain inf or NaN.": _optimizer_step,
    "scaler.update() was never called: the scale never changes, so it cannot back off after an overflow or grow. "
    "Call scaler.update() once per step, after scaler.step(optimizer).": _no_update,
    "scaler.update() ran before scaler.step(optimizer): update resets the scaler's record of unscale_, so step "
    "unscales the gradients a second time. update comes last.": _update_before_step,
    "gradients accumulate across steps: call optimizer.zero_grad() at the start of every step.": _no_zero_grad,
    "zero_grad ran between backward and step, erasing the gradients just computed: call it at the start of the step.":
        _zero_grad_after_backward,
}


def _amp_setup(seed: int, init_scale: float, growth_interval: int):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
    return model, optimizer, scaler


def _amp_batches(seed: int, steps: int, nan_at: int | None):
    gen = seeded(seed)
    batches = []
    for i in range(steps):
        x = torch.randn(4, 3, generator=gen)
        y = torch.randn(4, 2, generator=gen)
        if i == nan_at:
            y[1, 0] = float("nan")  # a bad target: the loss and every gradient become NaN
        batches.append((x, y))
    return batches


_AMP_CASES = [
    # (label, seed, steps, nan_at, max_norm, init_scale, growth_interval)
    ("1 step, batch 4, clipping active", 0, 1, None, 0.05, 2.0**12, 1),
    ("3 steps with a NaN target on step 2", 1, 3, 1, 0.05, 2.0**10, 2),
    ("4 steps, max_norm large (clip inactive)", 2, 4, None, 1e3, 2.0**8, 3),
]


def _run_amp(fn: Callable, case, *, learner: bool, name: str = "amp_train_step"):
    label, seed, steps, nan_at, max_norm, init_scale, growth_interval = case
    model, optimizer, scaler = _amp_setup(seed, init_scale, growth_interval)
    autocast_seen: list[bool] = []
    model.register_forward_hook(lambda *_: autocast_seen.append(torch.is_autocast_enabled("cpu")))
    start = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
    scales = []
    for x, y in _amp_batches(seed, steps, nan_at):
        if learner:
            call_learner(fn, (model, optimizer, scaler, x, y, max_norm), name, label)
        else:
            fn(model, optimizer, scaler, x, y, max_norm)
        scales.append(scaler.get_scale())
    end = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return {"update": (end - start).double(), "scales": scales, "autocast": autocast_seen}


def _same_update(a: torch.Tensor, b: torch.Tensor) -> bool:
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        return False
    return float((a - b).norm()) <= 1e-2 * float(b.norm()) + 1e-9


def check_amp_train_step(amp_train_step) -> None:
    """Check ``amp_train_step(model, optimizer, scaler, x, y, max_norm)`` against the canonical fp16 step.

    Runs it with a real ``GradScaler('cpu')`` over several steps (one with a NaN
    target, which must be skipped) and compares the parameter updates and the
    scale after every step with the reference's.

    >>> check_amp_train_step(reference_amp_train_step)
    ✓ amp_train_step matches the canonical AMP step on 3 runs (8 steps, one with NaN gradients)
    """
    name = "amp_train_step"
    for case in _AMP_CASES:
        label = case[0]
        ref = _run_amp(reference_amp_train_step, case, learner=False)
        got = _run_amp(amp_train_step, case, learner=True)
        if not got["autocast"]:
            raise ExerciseError(f"`{name}` never called the model for {label}: run `model(x)` inside the step.")
        if not all(got["autocast"]):
            raise ExerciseError(
                f"`{name}` ran the forward pass outside autocast for {label}.\n"
                "Hint: wrap the forward pass and the loss in `with torch.autocast(device_type=x.device.type, dtype=torch.float16):`."
            )
        ok_scales = got["scales"] == ref["scales"]
        ok_update = _same_update(got["update"], ref["update"])
        if ok_scales and ok_update:
            continue
        hint = None
        for mistake, wrong in AMP_STEP_MISTAKES.items():
            try:
                variant = _run_amp(wrong, case, learner=False)
            except Exception:  # noqa: BLE001  some mistakes make PyTorch raise on this case: not the learner's
                continue
            same_update = _same_update(got["update"], variant["update"]) or (
                not torch.isfinite(got["update"]).all() and not torch.isfinite(variant["update"]).all()
            )
            if variant["scales"] == got["scales"] and same_update:
                hint = mistake
                break
        measured = (
            f"scale after each step: got {got['scales']}, expected {ref['scales']}; "
            f"‖update − expected‖ / ‖expected‖ = {float((got['update'] - ref['update']).norm() / ref['update'].norm()):.3g}"
        )
        if hint is None:
            if not torch.isfinite(got["update"]).all():
                hint = "the parameters became inf/NaN: a step with NaN gradients was applied instead of skipped (scaler.step skips it)."
            elif not ok_scales:
                hint = "the scale evolves differently: scaler.update() belongs once per step, after scaler.step(optimizer)."
            else:
                hint = "compare your order with: zero_grad → autocast forward + loss → scaler.scale(loss).backward() → scaler.unscale_ → clip_grad_norm_ → scaler.step → scaler.update."
        raise ExerciseError(f"`{name}` is wrong for {label}.\nmeasured: {measured}\nHint: {hint}")
    passed(f"{name} matches the canonical AMP step on {len(_AMP_CASES)} runs (8 steps, one with NaN gradients)")


# ---------------------------------------------------------------------------------------------
# Exercise 2: what the clip-before-unscale bug hands to the optimizer
# ---------------------------------------------------------------------------------------------


def _grad_after_bug_reference(grad: torch.Tensor, scale: float, max_norm: float) -> torch.Tensor:
    # the buggy loop, run for real: gradients are S·g, clip them, then scaler.step divides by S
    p = torch.nn.Parameter(torch.zeros_like(grad))
    p.grad = grad * scale
    torch.nn.utils.clip_grad_norm_([p], max_norm)
    return p.grad / scale


def _clip_cases() -> list[Case]:
    gen = seeded(8)
    cases = []
    # (shape, dtype, scale, max_norm as a multiple of ‖g‖, what). ‖g‖ < max_norm < S·‖g‖ is the typical bug: the right
    # order would not clip at all, the bug clips hard.
    specs = [
        ((7,), torch.float64, 2.0**16, 3.0, "right order would not clip, the bug does"),
        ((3, 4), torch.float64, 1024.0, 1.5, "right order would not clip, the bug does"),
        ((2, 3, 5), torch.float32, 2.0**12, 2.0, "right order would not clip, the bug does"),
        ((5,), torch.float64, 256.0, 0.25, "both orders clip"),
        ((6,), torch.float64, 4.0, 10.0, "no clipping at all (norm below max_norm even scaled)"),
        ((4, 1), torch.float64, 1.0, 0.5, "scale 1 (no scaler)"),
    ]
    for shape, dtype, scale, ratio, what in specs:
        # large enough that clip_grad_norm_'s 1e-6 in max_norm / (norm + 1e-6) is below the float64 tolerance
        g = 100 * torch.randn(*shape, generator=gen, dtype=dtype)
        max_norm = round(ratio * float(g.norm()), 1)
        cases.append(Case((g, scale, max_norm), f"grad of shape {shape} ({dtype}), scale {scale:g}, max_norm {max_norm:g}: {what}"))
    return cases


def _agrees(out, wrong) -> bool:
    return (isinstance(out, torch.Tensor) and isinstance(wrong, torch.Tensor) and out.shape == wrong.shape
            and torch.allclose(out.detach().double(), wrong.double(), rtol=1e-6, atol=1e-12))


def _right_order(grad, scale, max_norm):
    return grad * min(1.0, max_norm / (float(grad.norm()) + 1e-6))


CLIP_MISTAKES = {
    "that is the right order's result (clip after unscale_). The bug clips the *scaled* gradient S·g, whose norm is "
    "S·‖g‖, and only then divides by S.": _right_order,
    "the optimizer never sees the scaled gradient: scaler.step divides by S after the clip, so divide by the scale.":
        lambda g, s, m: g * s * min(1.0, m / (s * float(g.norm()) + 1e-6)),
    "divided by the scale twice: the clip factor min(1, max_norm/(S·‖g‖)) already contains the S once; the gradient "
    "itself is divided by S once, by scaler.step.": lambda g, s, m: g * min(1.0, m / (s * float(g.norm()) + 1e-6)) / s,
    "clip_grad_norm_ only ever shrinks: the factor is min(1, max_norm / norm), never above 1.":
        lambda g, s, m: g * m / (s * float(g.norm()) + 1e-6),
    "the gradient was returned unclipped: with the bug, clip_grad_norm_ sees S·‖g‖, which exceeds max_norm.":
        lambda g, s, m: g.clone(),
}


def check_grad_after_clip_bug(grad_after_clip_bug) -> None:
    """Check ``grad_after_clip_bug(grad, scale, max_norm)``: the gradient optimizer.step receives when
    ``clip_grad_norm_`` runs on the scaled gradients, before unscaling (compared with running the bug for real).

    >>> check_grad_after_clip_bug(lambda g, s, m: g * min(1.0, m / (s * float(g.norm()) + 1e-6)))
    ✓ grad_after_clip_bug matches the reference on 6 inputs
    """
    cases = _clip_cases()
    # several mistakes coincide on some inputs: name the one that agrees with the answer on every input
    outputs = []
    for case in cases:
        try:
            outputs.append(grad_after_clip_bug(*(a.clone() if isinstance(a, torch.Tensor) else a for a in case.args)))
        except Exception:  # noqa: BLE001  reported properly by check_function below
            outputs.append(None)
    consistent = {hint: wrong for hint, wrong in CLIP_MISTAKES.items()
                  if all(_agrees(out, wrong(*case.args)) for out, case in zip(outputs, cases))}
    check_function(grad_after_clip_bug, _grad_after_bug_reference, cases, name="grad_after_clip_bug",
                   mistakes=consistent or CLIP_MISTAKES)


# ---------------------------------------------------------------------------------------------
# Exercise 3: the loss scale after a sequence of overflow / ok steps
# ---------------------------------------------------------------------------------------------


def _gradscaler_scale_after(overflows, init_scale, growth_interval, growth_factor=2.0, backoff_factor=0.5) -> float:
    """The oracle: a real GradScaler('cpu') driven through the sequence."""
    param = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([param], lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_factor=growth_factor,
                                  backoff_factor=backoff_factor, growth_interval=growth_interval)
    scaler.scale(torch.ones(()))
    for overflow in overflows:
        param.grad = torch.full((2,), math.inf if overflow else 1.0)
        scaler.step(opt)
        scaler.update()
    return scaler.get_scale()


def _variant(overflows, init_scale, growth_interval, growth_factor=2.0, backoff_factor=0.5, *, kind: str) -> float:
    scale, good = float(init_scale), 0
    for i, overflow in enumerate(overflows):
        if overflow:
            scale *= 0.5 if kind == "fixed_half" else backoff_factor
            if kind != "no_reset_on_overflow":
                good = 0
            continue
        good += 1
        if kind == "off_by_one":
            if good > growth_interval:
                scale, good = scale * growth_factor, 0
        elif kind == "count_all_steps":
            if (i + 1) % growth_interval == 0:
                scale *= growth_factor
        elif kind == "no_reset_after_growth":
            if good >= growth_interval:
                scale *= growth_factor
        elif good == growth_interval:
            scale, good = scale * growth_factor, 0
    return scale


SCALE_MISTAKES = {
    "an overflow must reset the count of good steps to 0: growth needs growth_interval good steps *in a row*.":
        "no_reset_on_overflow",
    "off by one: the scale grows on the growth_interval-th good step in a row, not the one after.": "off_by_one",
    "the count is of good steps in a row since the last change, not of all steps: every overflow restarts it.":
        "count_all_steps",
    "after growing, the count restarts from 0: the next growth needs another growth_interval good steps.":
        "no_reset_after_growth",
    "on an overflow the scale is multiplied by backoff_factor (which is not always 0.5).": "fixed_half",
}

_SCALE_CASES = [
    # (overflows as a string of x = overflow / . = ok, init_scale, growth_interval, growth_factor, backoff_factor)
    ("...", 1024.0, 3, 2.0, 0.5),
    ("x..x...", 2.0**16, 3, 2.0, 0.5),
    ("..x..x....x", 256.0, 2, 2.0, 0.5),
    ("......", 8.0, 2, 2.0, 0.5),
    ("xx....x.....", 2.0**10, 4, 2.0, 0.25),
    ("..x....x..x....", 64.0, 4, 4.0, 0.5),
]


def check_loss_scale_after(loss_scale_after) -> None:
    """Check ``loss_scale_after(overflows, init_scale, growth_interval, growth_factor, backoff_factor)`` against a
    real ``torch.amp.GradScaler('cpu')`` driven by the same sequence (``overflows[i]`` True = step i had inf/NaN).

    >>> from autogradlab.models.loss_scale import scale_trace
    >>> check_loss_scale_after(lambda o, s, n, g, b: scale_trace(o, init_scale=s, growth_interval=n,
    ...                                                             growth_factor=g, backoff_factor=b).final_scale)
    ✓ loss_scale_after matches torch.amp.GradScaler on 6 sequences
    """
    name = "loss_scale_after"
    for pattern, init_scale, interval, growth, backoff in _SCALE_CASES:
        overflows = [c == "x" for c in pattern]
        label = (f"overflows = {pattern!r} (x = overflow), init_scale={init_scale:g}, growth_interval={interval}, "
                 f"growth_factor={growth:g}, backoff_factor={backoff:g}")
        expected = _gradscaler_scale_after(overflows, init_scale, interval, growth, backoff)
        got = call_learner(loss_scale_after, (list(overflows), init_scale, interval, growth, backoff), name, label)
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            raise ExerciseError(f"`{name}` should return a number (the scale), got a {type(got).__name__} for {label}.")
        if math.isclose(float(got), expected, rel_tol=1e-6):
            continue
        hint = next(
            (h for h, kind in SCALE_MISTAKES.items()
             if math.isclose(float(got), _variant(overflows, init_scale, interval, growth, backoff, kind=kind), rel_tol=1e-6)),
            "replay the rule step by step: overflow → scale × backoff_factor and count = 0; ok → count + 1, and when the "
            "count reaches growth_interval → scale × growth_factor and count = 0.",
        )
        raise ExerciseError(f"`{name}` is wrong for {label}.\nmeasured: got {float(got):g}, GradScaler gives {expected:g}.\nHint: {hint}")
    passed(f"{name} matches torch.amp.GradScaler on {len(_SCALE_CASES)} sequences")


__all__ = ["check_amp_train_step", "check_grad_after_clip_bug", "check_loss_scale_after", "reference_amp_train_step"]
