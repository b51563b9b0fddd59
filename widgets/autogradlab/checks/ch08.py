"""Checkers for chapter 08 (mixed precision): the loss scale, one scaler with two optimizers, Adam and the clip bug.

Every reference is PyTorch itself: a real ``torch.amp.GradScaler('cpu')``, real
``clip_grad_norm_``, real fp16 and bf16 autocast on the CPU, a real
``torch.optim.Adam`` (tiny sizes, so it is fast).
"""

from __future__ import annotations

import contextlib
import importlib
import math
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

from autogradlab.checks.core import Case, ExerciseError, call_learner, check_function, passed, seeded

# ---------------------------------------------------------------------------------------------
# Tools the learner must not use for a given exercise
# ---------------------------------------------------------------------------------------------


class _Forbidden(RuntimeError):
    """Raised when the learner's function reaches for a tool the exercise rules out."""


@contextlib.contextmanager
def _forbid(targets: list[tuple[object, str]], message: str) -> Iterator[None]:
    """Replace each ``owner.attr`` by a function that raises ``message`` for the duration."""

    def refuse(*args, **kwargs):
        raise _Forbidden(message)

    saved = [(owner, attr, getattr(owner, attr)) for owner, attr in targets]
    try:
        for owner, attr, _ in saved:
            setattr(owner, attr, refuse)
        yield
    finally:
        for owner, attr, original in saved:
            setattr(owner, attr, original)


def _call_forbidding(fn: Callable, args: tuple, name: str, label: str, targets, message: str):
    """call_learner with ``targets`` out of reach."""
    with _forbid(targets, message):
        return call_learner(fn, args, name, label)


# ---------------------------------------------------------------------------------------------
# Exercise 1: the loss scale after a sequence of overflow / ok steps
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


def _scale_helpers() -> list[tuple[object, str]]:
    """GradScaler and the course's own simulation: either would replay the rule for the learner."""
    from autogradlab.models import loss_scale

    return [(torch.amp.GradScaler, "__init__"), (torch.amp.GradScaler, "update"), (loss_scale, "update_scale")]


def check_loss_scale_after(loss_scale_after) -> None:
    """Check ``loss_scale_after(overflows, init_scale, growth_interval, growth_factor, backoff_factor)`` against a
    real ``torch.amp.GradScaler('cpu')`` driven by the same sequence (``overflows[i]`` True = step i had inf/NaN).

    The learner writes the rule: a GradScaler or ``autogradlab.models.loss_scale`` inside the function is refused.

    >>> def rule(overflows, scale, interval, growth=2.0, backoff=0.5):
    ...     good = 0
    ...     for overflow in overflows:
    ...         good = 0 if overflow else good + 1
    ...         scale *= backoff if overflow else (growth if good == interval else 1.0)
    ...         good = 0 if good == interval else good
    ...     return scale
    >>> check_loss_scale_after(rule)
    ✓ loss_scale_after matches torch.amp.GradScaler on 6 sequences
    """
    name = "loss_scale_after"
    for pattern, init_scale, interval, growth, backoff in _SCALE_CASES:
        overflows = [c == "x" for c in pattern]
        label = (f"overflows = {pattern!r} (x = overflow), init_scale={init_scale:g}, growth_interval={interval}, "
                 f"growth_factor={growth:g}, backoff_factor={backoff:g}")
        expected = _gradscaler_scale_after(overflows, init_scale, interval, growth, backoff)
        got = _call_forbidding(loss_scale_after, (list(overflows), init_scale, interval, growth, backoff), name, label,
                               _scale_helpers(), "this exercise asks you to write the rule yourself: a GradScaler "
                               "(or autogradlab.models.loss_scale) would replay it for you. Use a loop and two numbers.")
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


# ---------------------------------------------------------------------------------------------
# Exercise 2: one scaler, two optimizers, fp16 or bf16 as named
# ---------------------------------------------------------------------------------------------


def _params_of(optimizer) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]


def reference_two_optimizer_step(model, optimizers, max_norms, scaler, x, y, dtype):
    """One step: autocast forward, (scaled) backward outside autocast, per optimizer unscale_ + clip, steps, one update."""
    for optimizer in optimizers:
        optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type=x.device.type, dtype=dtype):
        loss = F.mse_loss(model(x), y)
    (loss if scaler is None else scaler.scale(loss)).backward()
    for optimizer, max_norm in zip(optimizers, max_norms):
        if scaler is not None:
            scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(_params_of(optimizer), max_norm)
    for optimizer in optimizers:
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)  # each optimizer skips on its own inf/NaN
    if scaler is not None:
        scaler.update()  # once per iteration: it reads what every unscale_ found
    return loss.item()


def _wrong_step(*, clip_first=False, update_each=False, optimizer_step=False, no_zero_grad=False, one_clip=False,
                unscale_first_only=False, backward_in_autocast=False, fp16_always=False, scaled_loss=False):
    """A plausible wrong version of the reference, one mistake switched on."""

    def step(model, optimizers, max_norms, scaler, x, y, dtype):
        if not no_zero_grad:
            for optimizer in optimizers:
                optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=x.device.type, dtype=torch.float16 if fp16_always else dtype):
            loss = F.mse_loss(model(x), y)
            if backward_in_autocast:
                (loss if scaler is None else scaler.scale(loss)).backward()
        if not backward_in_autocast:
            (loss if scaler is None else scaler.scale(loss)).backward()
        if one_clip:
            if scaler is not None:
                for optimizer in optimizers:
                    scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(list(model.parameters()), max_norms[0])
        else:
            for i, (optimizer, max_norm) in enumerate(zip(optimizers, max_norms)):
                unscale = scaler is not None and not (unscale_first_only and i > 0)
                if unscale and not clip_first:
                    scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(_params_of(optimizer), max_norm)
                if unscale and clip_first:
                    scaler.unscale_(optimizer)
        for optimizer in optimizers:
            if scaler is None or optimizer_step:
                optimizer.step()
            else:
                scaler.step(optimizer)
                if update_each:
                    scaler.update()
        if scaler is not None and not update_each:
            scaler.update()
        return scaler.scale(loss).item() if scaled_loss and scaler is not None else loss.item()

    return step


TWO_OPTIMIZER_MISTAKES: dict[str, Callable] = {
    "clip_grad_norm_ ran on the *scaled* gradients: their norm is S·‖g‖, so the clip shrinks them far too much. "
    "Call scaler.unscale_(optimizer) for an optimizer before clipping its parameters.": _wrong_step(clip_first=True),
    "only the first optimizer was unscaled before clipping: each optimizer has its own gradients, so each needs its "
    "own scaler.unscale_(optimizer) before its clip.": _wrong_step(unscale_first_only=True),
    "scaler.update() ran after every scaler.step(optimizer): the scale then moves once per optimizer, and the second "
    "update no longer sees what the first optimizer's unscale_ found. Call update() once, after all the steps.":
        _wrong_step(update_each=True),
    "optimizer.step() applies inf/NaN gradients on an overflow: step each optimizer with scaler.step(optimizer), which "
    "skips only the optimizer whose gradients overflowed.": _wrong_step(optimizer_step=True),
    "one clip over all parameters with one threshold: each optimizer's parameters are clipped separately, to their "
    "own max_norms[i] (the norm of one part's gradient, not of the whole model's).": _wrong_step(one_clip=True),
    "the step started from stale gradients: zero every optimizer's gradients (or the model's) at the start, because "
    "backward adds into .grad.": _wrong_step(no_zero_grad=True),
    "you returned the *scaled* loss (scaler.scale(loss)): log the loss itself, the scale is only for backward.":
        _wrong_step(scaled_loss=True),
}


def _two_optimizer_setup(seed: int, fp16: bool, init_scale: float, growth_interval: int):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3))
    optimizers = [torch.optim.SGD(model[0].parameters(), lr=0.1, momentum=0.9), torch.optim.SGD(model[2].parameters(), lr=0.05)]
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval) if fp16 else None
    return model, optimizers, scaler


def _two_optimizer_batches(seed: int, steps: int):
    gen = seeded(seed)
    return [(torch.randn(5, 4, generator=gen), torch.randn(5, 3, generator=gen)) for _ in range(steps)]


def _part_norms(seed: int, batch) -> tuple[float, float]:
    """‖g‖ of each part at the starting weights for the first batch (fp32): the clip thresholds are set from them."""
    model, _, _ = _two_optimizer_setup(seed, False, 1.0, 1)
    F.mse_loss(model(batch[0]), batch[1]).backward()
    return tuple(float(torch.cat([p.grad.reshape(-1) for p in model[i].parameters()]).norm()) for i in (0, 2))


_TWO_OPTIMIZER_CASES = [
    # (label, seed, dtype, steps, (max_norm / ‖g‖ for body, head), init_scale, growth_interval, head overflows on step)
    ("fp16, 3 steps, the body clipped (max_norm below its ‖g‖), the head not (max_norm above its ‖g‖)",
     0, torch.float16, 3, (0.3, 3.0), 2.0**10, 1, None),
    ("fp16, 3 steps, the head's gradient overflows on step 2 (inf) and only there",
     1, torch.float16, 3, (0.3, 3.0), 2.0**8, 1, 1),
    ("bf16 (scaler=None), 3 steps, the head clipped, the body not", 2, torch.bfloat16, 3, (3.0, 0.3), None, None, None),
    ("fp16, 4 steps, the head clipped, the body not, growth_interval 2", 3, torch.float16, 4, (3.0, 0.3), 2.0**12, 2, None),
]


def _run_two(fn: Callable, case, *, learner: bool, name: str = "two_optimizer_step") -> dict:
    """Run ``fn`` over the case's steps on a fresh setup; record what happened inside and after every step."""
    label, seed, dtype, steps, ratios, init_scale, growth_interval, overflow_at = case
    fp16 = dtype == torch.float16
    model, optimizers, scaler = _two_optimizer_setup(seed, fp16, init_scale or 1.0, growth_interval or 1)
    batches = _two_optimizer_batches(seed, steps)
    norms = _part_norms(seed, batches[0])
    max_norms = [ratio * norm for ratio, norm in zip(ratios, norms)]
    device = "cpu"
    record = {"forward": [], "backward_in_autocast": False, "scales": [], "params": [], "losses": [],
              "steps": [[0, 0]], "problems": []}
    model.register_forward_pre_hook(
        lambda *_: record["forward"].append((torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))))
    inject = {"now": False}

    def backward_hook(grad):
        if torch.is_autocast_enabled(device):
            record["backward_in_autocast"] = True
        return grad

    for p in model.parameters():
        p.register_hook(backward_hook)
    model[2].weight.register_hook(lambda g: torch.full_like(g, math.inf) if inject["now"] else g)
    for i, optimizer in enumerate(optimizers):
        optimizer.register_step_post_hook(lambda *_, i=i: record["steps"][-1].__setitem__(i, record["steps"][-1][i] + 1))
    hyper = [{k: v for k, v in g.items() if k != "params"} for o in optimizers for g in o.param_groups]
    for step, (x, y) in enumerate(batches):
        inject["now"] = step == overflow_at
        for p in model.parameters():  # stale gradients from an earlier step
            p.grad = torch.full_like(p, 0.5)
        args_before = (x.clone(), y.clone(), list(max_norms), list(optimizers))
        args = (model, optimizers, max_norms, scaler, x, y, dtype)
        loss = call_learner(fn, args, name, label) if learner else fn(*args)
        if not (torch.equal(x, args_before[0]) and torch.equal(y, args_before[1])):
            record["problems"].append("it changed the caller's x or y in place")
        if max_norms != args_before[2] or [id(o) for o in optimizers] != [id(o) for o in args_before[3]]:
            record["problems"].append("it changed the caller's list of max_norms or optimizers")
        if [{k: v for k, v in g.items() if k != "params"} for o in optimizers for g in o.param_groups] != hyper:
            record["problems"].append("it changed an optimizer's settings (lr, momentum, ...)")
        if any(p.dtype != torch.float32 for p in model.parameters()) or not model.training:
            record["problems"].append("it changed the model itself (its parameters' dtype, or train/eval mode): "
                                      "mixed precision keeps fp32 weights, autocast only casts copies")
        record["losses"].append(loss)
        record["scales"].append(None if scaler is None else scaler.get_scale())
        record["params"].append(torch.cat([p.detach().reshape(-1).double() for p in model.parameters()]))
        record["steps"].append([0, 0])
    record["steps"] = record["steps"][:-1]
    return record


def _same_params(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.isfinite(x).all() and torch.isfinite(y).all() and float((x - y).norm()) <= 1e-4 * float(y.norm())
               for x, y in zip(a, b))


def _same_losses(a: list, b: list) -> bool:
    return all(isinstance(x, float) and (math.isclose(x, y, rel_tol=1e-3, abs_tol=1e-6) or (math.isnan(x) and math.isnan(y)))
               for x, y in zip(a, b))


def _same_run(got: dict, ref: dict) -> bool:
    losses_ok = _same_losses(got["losses"], ref["losses"])
    return got["scales"] == ref["scales"] and got["steps"] == ref["steps"] and _same_params(got["params"], ref["params"]) \
        and losses_ok


def check_two_optimizer_step(two_optimizer_step) -> None:
    """Check ``two_optimizer_step(model, optimizers, max_norms, scaler, x, y, dtype)`` against the reference step.

    Runs it on a real model split between two SGD optimizers, several steps per case, with stale gradients in
    ``.grad`` before every step, clip thresholds above and below each part's gradient norm, fp16 with a
    ``GradScaler('cpu')`` and bf16 with none, and one step where only the second optimizer's gradients overflow.
    Compares the parameters, the scale, which optimizer stepped and the returned loss after every step; watches
    that the forward pass runs under autocast with the named dtype, that backward runs outside it, and that
    nothing the caller passed is changed beyond the update.

    >>> check_two_optimizer_step(reference_two_optimizer_step)
    ✓ two_optimizer_step matches the reference on 4 runs (13 steps: fp16 and bf16, one optimizer overflowing alone)
    """
    name = "two_optimizer_step"
    for case in _TWO_OPTIMIZER_CASES:
        label, dtype = case[0], case[2]
        ref = _run_two(reference_two_optimizer_step, case, learner=False)
        got = _run_two(two_optimizer_step, case, learner=True)
        if not got["forward"]:
            raise ExerciseError(f"`{name}` never called the model for {label}: run `model(x)` inside the step.")
        if not all(enabled for enabled, _ in got["forward"]):
            raise ExerciseError(f"`{name}` ran the forward pass outside autocast for {label}.\nHint: wrap the forward pass "
                                "and the loss in `with torch.autocast(device_type=x.device.type, dtype=dtype):`.")
        used = {d for _, d in got["forward"]}
        if used != {dtype}:
            raise ExerciseError(f"`{name}` ran autocast in {sorted(map(str, used))} for {label}, but the step asked for "
                                f"{dtype}.\nHint: pass `dtype=dtype` to torch.autocast: fp16 and bf16 are different formats.")
        if got["backward_in_autocast"]:
            raise ExerciseError(f"`{name}` ran backward inside the autocast region for {label}.\nHint: leave the `with "
                                "torch.autocast(...)` block before calling backward: autocast is for the forward pass and "
                                "the loss; backward already runs each op in the dtype its forward used.")
        if got["problems"]:
            raise ExerciseError(f"`{name}` has a side effect for {label}: {got['problems'][0]}.\nHint: change only the "
                                "parameters (through the optimizers) and the scaler.")
        if any(not isinstance(loss, float) for loss in got["losses"]):
            kinds = sorted({type(loss).__name__ for loss in got["losses"]})
            raise ExerciseError(f"`{name}` should return the loss as a Python float, got {', '.join(kinds)} for {label}.")
        if _same_run(got, ref):
            continue
        hint = None
        for mistake, wrong in TWO_OPTIMIZER_MISTAKES.items():
            try:
                variant = _run_two(wrong, case, learner=False)
            except Exception:  # noqa: BLE001  some mistakes make PyTorch raise on this case: not the learner's
                continue
            same_params = _same_params(got["params"], variant["params"]) or (
                not all(torch.isfinite(p).all() for p in got["params"]) and not all(torch.isfinite(p).all() for p in variant["params"]))
            if variant["scales"] == got["scales"] and variant["steps"] == got["steps"] and same_params \
                    and _same_losses(got["losses"], variant["losses"]):
                hint = mistake
                break
        last = len(ref["params"]) - 1
        relative = float((got["params"][last] - ref["params"][last]).norm() / ref["params"][last].norm())
        measured = (f"scale after each step: got {got['scales']}, expected {ref['scales']}; optimizer steps per step "
                    f"(first, second): got {got['steps']}, expected {ref['steps']}; ‖θ − expected‖ / ‖expected‖ after the "
                    f"last step = {relative:.3g}; loss: got {got['losses']}, expected {[round(v, 6) for v in ref['losses']]}")
        if hint is None:
            if not all(torch.isfinite(p).all() for p in got["params"]):
                hint = "the parameters became inf/NaN: a step with inf gradients was applied instead of skipped."
            elif got["steps"] != ref["steps"]:
                hint = ("a different set of optimizer steps ran: each optimizer steps once per call (through the scaler for "
                        "fp16, which skips only the optimizer whose own gradients hold inf/NaN).")
            elif got["scales"] != ref["scales"]:
                hint = "the scale evolves differently: scaler.update() belongs once per call, after every scaler.step."
            else:
                hint = ("compare with: zero the gradients → autocast forward + loss → (scaled) backward outside autocast → "
                        "for each optimizer: unscale_, clip its own parameters → step each → update once.")
        raise ExerciseError(f"`{name}` is wrong for {label}.\nmeasured: {measured}\nHint: {hint}")
    total = sum(case[3] for case in _TWO_OPTIMIZER_CASES)
    passed(f"{name} matches the reference on {len(_TWO_OPTIMIZER_CASES)} runs ({total} steps: fp16 and bf16, "
           "one optimizer overflowing alone)")


# ---------------------------------------------------------------------------------------------
# Exercise 3: Adam's first update, clipping after unscale_ or before it (the bug)
# ---------------------------------------------------------------------------------------------


def _adam_first_update_reference(grad, scale, max_norm, lr, eps, clip_before_unscale):
    """The real thing: a GradScaler-style scaled gradient, clip_grad_norm_, division by S, torch.optim.Adam."""
    p = torch.nn.Parameter(torch.zeros_like(grad))
    p.grad = grad * scale if clip_before_unscale else grad.clone()
    torch.nn.utils.clip_grad_norm_([p], max_norm)
    if clip_before_unscale:
        p.grad = p.grad / scale  # what scaler.step does after the (buggy) clip
    torch.optim.Adam([p], lr=lr, eps=eps).step()
    return p.detach().clone()


def _clip_factor(grad, max_norm, scaled_by=1.0):
    return min(1.0, max_norm / (scaled_by * float(grad.double().norm()) + 1e-6))


def _used(grad, scale, max_norm, clip_before_unscale):
    """The gradient the optimizer receives in either order."""
    return grad * _clip_factor(grad, max_norm, scale if clip_before_unscale else 1.0)


def _adam_like(g, lr, eps):
    return -lr * g / (g.abs() + eps)


ADAM_MISTAKES: dict[str, Callable] = {
    "that is an SGD update (−lr·g): Adam divides each element by its own running size, √v̂ + ε.":
        lambda g, s, m, lr, eps, bug: -lr * _used(g, s, m, bug),
    "you ignored clip_before_unscale: with the bug the clip sees the scaled gradient S·g, whose norm is S·‖g‖, and "
    "scaler.step divides by S only afterwards.": lambda g, s, m, lr, eps, bug: _adam_like(_used(g, s, m, False), lr, eps),
    "the bias corrections are missing: on the first step m̂ = m₁/(1 − β₁) = g and v̂ = v₁/(1 − β₂) = g².":
        lambda g, s, m, lr, eps, bug: -lr * 0.1 * _used(g, s, m, bug) / ((0.001 * _used(g, s, m, bug) ** 2).sqrt() + eps),
    "ε is added after the square root, to √v̂, not inside it.":
        lambda g, s, m, lr, eps, bug: -lr * _used(g, s, m, bug) / (_used(g, s, m, bug) ** 2 + eps).sqrt(),
    "the sign is flipped: a step moves the parameters *against* the gradient.":
        lambda g, s, m, lr, eps, bug: -_adam_like(_used(g, s, m, bug), lr, eps),
    "ε is missing: without it the first Adam step is −lr·sign(g) whatever the gradient's size, and the bug would be "
    "invisible. ε is what the shrunk gradient is compared with.": lambda g, s, m, lr, eps, bug: -lr * torch.sign(g),
    "the bug's gradient is not simply g/S: clip_grad_norm_ first rescales S·g to norm max_norm (when S·‖g‖ is above "
    "it), and only then does scaler.step divide by S.":
        lambda g, s, m, lr, eps, bug: _adam_like(g / s if bug else _used(g, s, m, False), lr, eps),
    "the scaled gradient was never divided by S: scaler.step unscales after the buggy clip.":
        lambda g, s, m, lr, eps, bug: _adam_like(_used(g, s, m, bug) * (s if bug else 1.0), lr, eps),
}


def _adam_cases() -> list[Case]:
    gen = seeded(12)
    cases = []
    # (n, dtype, scale, max_norm as a multiple of ‖g‖, lr, eps, bug, what). The gradients' elements span six orders of
    # magnitude, so that with the bug some shrunk elements are far above ε, some near it and some far below.
    specs = [
        (200, torch.float64, 2.0**16, 0.5, 0.1, 1e-8, True, "the bug, both orders would clip"),
        (200, torch.float64, 2.0**16, 0.5, 0.1, 1e-8, False, "the right order, clip active"),
        (300, torch.float64, 2.0**16, 3.0, 0.01, 1e-8, True, "the bug, the right order would not clip"),
        (300, torch.float64, 2.0**16, 3.0, 0.01, 1e-8, False, "the right order, clip inactive"),
        (50, torch.float64, 1024.0, 0.2, 0.5, 1e-6, True, "the bug, a larger ε"),
        (64, torch.float32, 2.0**12, 0.5, 0.1, 1e-8, True, "the bug, float32"),
        (40, torch.float64, 4.0, 10.0, 0.1, 1e-8, True, "the bug with S·‖g‖ below max_norm: nothing is clipped"),
    ]
    for n, dtype, scale, ratio, lr, eps, bug, what in specs:
        g = torch.randn(n, generator=gen, dtype=torch.float64) * 10.0 ** (-6 * torch.rand(n, generator=gen, dtype=torch.float64))
        g = g.to(dtype)
        shape = (n // 4, 4) if n % 4 == 0 and dtype == torch.float32 else (n,)
        g = g.reshape(shape)
        max_norm = ratio * float(g.double().norm())
        label = (f"grad of shape {tuple(g.shape)} ({dtype}), scale {scale:g}, max_norm {max_norm:.3g} "
                 f"(‖g‖ = {float(g.double().norm()):.3g}), lr {lr:g}, eps {eps:g}, clip_before_unscale={bug}: {what}")
        cases.append(Case((g, scale, max_norm, lr, eps, bug), label))
    return cases


def _agrees(out, wrong) -> bool:
    return (isinstance(out, torch.Tensor) and isinstance(wrong, torch.Tensor) and out.shape == wrong.shape
            and torch.allclose(out.detach().double(), wrong.double(), rtol=1e-5, atol=1e-12))


def check_adam_first_update(adam_first_update) -> None:
    """Check ``adam_first_update(grad, scale, max_norm, lr, eps, clip_before_unscale)``: the change Adam's first step
    makes to the parameters when clipping runs after ``unscale_`` or before it, against a real ``torch.optim.Adam``.

    By hand: a ``torch.optim`` optimizer inside the function is refused.

    >>> check_adam_first_update(lambda g, s, m, lr, eps, bug: _adam_like(_used(g, s, m, bug), lr, eps))
    ✓ adam_first_update matches the reference on 7 inputs
    """
    name = "adam_first_update"
    cases = _adam_cases()
    message = ("this exercise asks for Adam's first step by hand: a torch.optim optimizer would do it for you. "
               "Write m̂ and v̂ for the first step and simplify.")
    adam_module = importlib.import_module("torch.optim.adam")  # torch.optim hides the submodule's name
    # the class, and the kernels the functional form looks up at call time (so an `adam` imported earlier is caught too)
    targets = [(torch.optim.Optimizer, "__init__")] + [
        (adam_module, f) for f in ("adam", "_single_tensor_adam", "_multi_tensor_adam", "_fused_adam") if hasattr(adam_module, f)]

    def learner(*args):
        with _forbid(targets, message):
            return adam_first_update(*args)

    # several mistakes coincide on some inputs: name the one that agrees with the answer on every input
    outputs = []
    for case in cases:
        try:
            with _forbid(targets, message):
                outputs.append(adam_first_update(*(a.clone() if isinstance(a, torch.Tensor) else a for a in case.args)))
        except Exception:  # noqa: BLE001  reported properly by check_function below
            outputs.append(None)
    consistent = {hint: wrong for hint, wrong in ADAM_MISTAKES.items()
                  if all(_agrees(out, wrong(*case.args)) for out, case in zip(outputs, cases))}
    check_function(learner, _adam_first_update_reference, cases, name=name, mistakes=consistent or ADAM_MISTAKES)


__all__ = ["check_adam_first_update", "check_loss_scale_after", "check_two_optimizer_step", "reference_two_optimizer_step"]
