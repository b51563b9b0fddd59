"""Checkers for chapter 08 (mixed precision): the loss scale, one scaler with two optimizers, Adam and the clip bug.

Every reference is PyTorch itself: a real ``torch.amp.GradScaler('cpu')``, real
``clip_grad_norm_``, real fp16 and bf16 autocast on the CPU, a real ``torch.optim.Adam``
(tiny sizes, so it is fast). Each exercise declares what it rules out (:class:`OffLimits`):
the rule of Exercise 1 and Adam's step of Exercise 3 are to be written by hand.
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector

from autogradlab.checks.core import (
    Case,
    ExerciseError,
    LearnerCall,
    OffLimits,
    Routine,
    check_function,
    clones,
    close,
    mistakes,
    passed,
    seeded,
)
from autogradlab.checks.stateful import run_variants, variants
from autogradlab.i18n import N_, _, said
from autogradlab.models import step_cases as cases

# fmt: off
SCALE_HINTS = {
    "no-reset-on-overflow": N_("an overflow resets the count of good steps to 0: growth needs growth_interval good steps *in a row*."),
    "off-by-one": N_("off by one: the scale grows on the growth_interval-th good step in a row, not the one after."),
    "count-all-steps": N_("the count is of good steps in a row since the last change, not of all steps: every overflow restarts it."),
    "no-reset-after-growth": N_("after growing, the count restarts from 0: the next growth needs another growth_interval good steps."),
    "fixed-half": N_("on an overflow the scale is multiplied by backoff_factor (which is not always 0.5)."),
    None: N_("replay the rule step by step: overflow → scale × backoff_factor and count = 0; ok → count + 1, and when the count reaches growth_interval → scale × growth_factor and count = 0."),
}
TWO_HINTS = {
    "clip-first": N_("clip_grad_norm_ ran on the *scaled* gradients: their norm is S·‖g‖, so the clip shrinks them far too much. Call scaler.unscale_(optimizer) for an optimizer before clipping its parameters."),
    "unscale-first-only": N_("only the first optimizer was unscaled before clipping: each optimizer has its own gradients, so each needs its own scaler.unscale_(optimizer) before its clip."),
    "update-each": N_("scaler.update() ran after every scaler.step(optimizer): the scale then moves once per optimizer, and the second update no longer sees what the first optimizer's unscale_ found. Call update() once, after all the steps."),
    "optimizer-step": N_("optimizer.step() applies inf/NaN gradients on an overflow: step each optimizer with scaler.step(optimizer), which skips only the optimizer whose gradients overflowed."),
    "one-clip": N_("one clip over all parameters with one threshold: each optimizer's parameters are clipped separately, to their own max_norms[i]."),
    "no-zero-grad": N_("the step started from stale gradients: zero every optimizer's gradients (or the model's) first, because backward adds into .grad."),
    "scaled-loss": N_("you returned the *scaled* loss (scaler.scale(loss)): log the loss itself, the scale is only for backward."),
    "backward-in-autocast": N_("leave the `with torch.autocast(...)` block before calling backward: autocast is for the forward pass and the loss; backward already runs each op in its forward's dtype."),
    "always-fp16": N_("pass `dtype=dtype` to torch.autocast: fp16 and bf16 are different formats."),
    "no-forward": N_("run `model(x)` inside the step."),
    "no-autocast": N_("wrap the forward pass and the loss in `with torch.autocast(device_type=x.device.type, dtype=dtype):`."),
    "changed-arguments": N_("change only the parameters (through the optimizers) and the scaler: the lists of max_norms and optimizers belong to the caller."),
    "changed-settings": N_("change only the parameters (through the optimizers) and the scaler: the optimizers' settings (lr, momentum, ...) belong to the caller."),
    "changed-model": N_("mixed precision keeps fp32 weights (autocast only casts copies) and the model's train/eval mode as it was."),
    "inf-applied": N_("the parameters became inf/NaN: a step with inf gradients was applied instead of skipped."),
    "steps-differ": N_("a different set of optimizer steps ran: each optimizer steps once per call (through the scaler for fp16, which skips only the optimizer whose own gradients hold inf/NaN)."),
    "scale-differs": N_("the scale evolves differently: scaler.update() belongs once per call, after every scaler.step."),
    None: N_("compare with: zero the gradients → autocast forward + loss → (scaled) backward outside autocast → for each optimizer: unscale_, clip its own parameters → step each → update once."),
}
ADAM_HINTS = {
    "sgd": N_("that is an SGD update (−lr·g): Adam divides each element by its own running size, √v̂ + ε."),
    "order-ignored": N_("you ignored clip_before_unscale: with the bug the clip sees the scaled gradient S·g, whose norm is S·‖g‖, and scaler.step divides by S only afterwards."),
    "no-bias-correction": N_("the bias corrections are missing: on the first step m̂ = m₁/(1 − β₁) = g and v̂ = v₁/(1 − β₂) = g²."),
    "eps-inside-sqrt": N_("ε is added after the square root, to √v̂, not inside it."),
    "sign": N_("the sign is flipped: a step moves the parameters *against* the gradient."),
    "no-eps": N_("ε is missing: without it the first Adam step is −lr·sign(g) whatever the gradient's size, and the bug would be invisible. ε is what the shrunk gradient is compared with."),
    "bug-is-g-over-s": N_("the bug's gradient is not simply g/S: clip_grad_norm_ first rescales S·g to norm max_norm (when S·‖g‖ is above it), and only then does scaler.step divide by S."),
    "never-unscaled": N_("the scaled gradient was never divided by S: scaler.step unscales after the buggy clip."),
}
SCALE_WHY = N_("write the rule yourself: a GradScaler (or autogradlab.models.loss_scale) would replay it for you. A loop and two numbers are enough.")
ADAM_WHY = N_("this exercise asks for Adam's first step by hand: write m̂ and v̂ for the first step and simplify.")
#: the checks' words, by key: what the learner's step did, the inputs, the ✓ lines
SAID = {
    "scale-label": N_("overflows = {pattern!r} (x = overflow), init_scale={init:g}, growth_interval={interval}, growth_factor={growth:g}, backoff_factor={backoff:g}"),
    "scale-type": N_("`loss_scale_after` returned a {type} for {label}; expected a number."),
    "scale-wrong": N_("`loss_scale_after` is wrong for {label}."),
    "scale-measured": N_("measured: got {got:g}, GradScaler gives {expected:g}."),
    "scale-passed": N_("loss_scale_after matches torch.amp.GradScaler on {n} sequences"),
    "fp16": N_("fp16, GradScaler(init_scale={init_scale:g}, growth_interval={growth_interval})"),
    "bf16": N_("bf16 (scaler=None)"),
    "body-clipped": N_("{precision}, {steps} steps, the body clipped (max_norm below its ‖g‖), the head not"),
    "head-clipped": N_("{precision}, {steps} steps, the head clipped, the body not"),
    "head-overflows": N_("{label}, the head's gradient overflows on step {step} (inf) and only there"),
    "two-head": N_("`two_optimizer_step` for {label}"),
    "no-forward": N_("{head} never called the model."),
    "no-autocast": N_("{head} ran the forward pass outside autocast."),
    "always-fp16": N_("{head} ran autocast in {used}, but the step asked for {dtype}."),
    "backward-in-autocast": N_("{head} ran backward inside the autocast region."),
    "changed": N_("{head} changed something the caller passed besides the update."),
    "loss-not-float": N_("{head} returned {kinds}; expected the loss as a Python float."),
    "two-wrong": N_("{head} is wrong."),
    "two-measured": N_("measured: scale after each step got {got[scales]}, expected {ref[scales]}; optimizer steps per step (first, second) got {got[steps]}, expected {ref[steps]}; ‖θ − expected‖ / ‖expected‖ after the last step = {error:.3g}; loss got {got[losses]}, expected {losses}"),
    "two-passed": N_("two_optimizer_step matches the reference on {runs} runs ({steps} steps: fp16 and bf16, one optimizer overflowing alone)"),
    "adam-label": N_("grad of shape {shape} ({dtype}), scale {scale:g}, max_norm {max_norm:.3g} (‖g‖ = {norm:.3g}), lr {lr:g}, eps {eps:g}, clip_before_unscale={bug}: {what}"),
}
# fmt: on


_said = functools.partial(said, SAID)


# --------------------------------------------------------------------------- exercise 1: the loss scale after a sequence


def _gradscaler_scale_after(overflows, init_scale, growth_interval, growth_factor=2.0, backoff_factor=0.5) -> float:
    """The oracle: a real GradScaler('cpu') driven through the sequence."""
    param = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([param], lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale, growth_factor, backoff_factor, growth_interval=growth_interval)
    scaler.scale(torch.ones(()))
    for overflow in overflows:
        param.grad = torch.full((2,), math.inf if overflow else 1.0)
        scaler.step(opt)
        scaler.update()
    return scaler.get_scale()


def _scale_variant(kind: str):
    """The rule with one typical slip (the right rule with ``kind="right"``)."""

    def rule(overflows, init_scale, growth_interval, growth_factor=2.0, backoff_factor=0.5) -> float:
        scale, good = float(init_scale), 0
        for i, overflow in enumerate(overflows):
            if overflow:
                scale *= 0.5 if kind == "fixed-half" else backoff_factor
                good = good if kind == "no-reset-on-overflow" else 0
                continue
            good += 1
            if kind == "count-all-steps":
                scale *= growth_factor if (i + 1) % growth_interval == 0 else 1.0
            elif good == growth_interval + (kind == "off-by-one") or (
                kind == "no-reset-after-growth" and good > growth_interval
            ):
                scale, good = scale * growth_factor, good if kind == "no-reset-after-growth" else 0
        return scale

    return rule


SCALE_MISTAKES = mistakes(SCALE_HINTS, {kind: _scale_variant(kind) for kind in SCALE_HINTS if kind})

SCALE_CASES = (  # (overflows: x = overflow, . = ok; init_scale, growth_interval, growth_factor, backoff_factor)
    ("...", 1024.0, 3, 2.0, 0.5),
    ("x..x...", 2.0**16, 3, 2.0, 0.5),
    ("..x..x....x", 256.0, 2, 2.0, 0.5),
    ("......", 8.0, 2, 2.0, 0.5),
    ("xx....x.....", 2.0**10, 4, 2.0, 0.25),
    ("..x....x..x....", 64.0, 4, 4.0, 0.5),
)

SCALE_OFF_LIMITS = OffLimits(
    routines=(
        Routine(torch.amp.GradScaler, "__init__", "torch.amp.GradScaler"),
        Routine(torch.amp.GradScaler, "update", "GradScaler.update"),
    ),
    course=("autogradlab.models.loss_scale",),
    why=SCALE_WHY,
)


def check_loss_scale_after(loss_scale_after) -> None:
    """Check ``loss_scale_after(overflows, init_scale, growth_interval, growth_factor, backoff_factor)`` against a
    real ``torch.amp.GradScaler('cpu')`` driven by the same sequence (``overflows[i]`` True = step i had inf/NaN).

    >>> check_loss_scale_after(_scale_variant("right"))
    ✓ loss_scale_after matches torch.amp.GradScaler on 6 sequences
    """
    learner = LearnerCall(loss_scale_after, "loss_scale_after", SCALE_OFF_LIMITS)
    for pattern, *settings in SCALE_CASES:
        overflows, (init, interval, growth, backoff) = [c == "x" for c in pattern], settings
        label = _said("scale-label", pattern=pattern, init=init, interval=interval, growth=growth, backoff=backoff)
        got = learner.on(label)(list(overflows), *settings)
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            raise ExerciseError("type", _said("scale-type", type=type(got).__name__, label=label))
        got, expected = float(got), _gradscaler_scale_after(overflows, *settings)
        if not math.isclose(got, expected, rel_tol=1e-6):
            slips = {m.id: m.compute(overflows, *settings) for m in SCALE_MISTAKES}
            slip = next((k for k, value in slips.items() if math.isclose(got, value, rel_tol=1e-6)), None)
            measured, summary = {"got": got, "expected": expected}, _said("scale-wrong", label=label)
            detail, hint = _said("scale-measured", **measured), SCALE_HINTS[slip]
            raise ExerciseError("value", summary, detail=detail, hint=hint, mistake=slip, measured=measured)
    passed(_said("scale-passed", n=len(SCALE_CASES)))


# --------------------------------------------------------------------------- exercise 2: one scaler, two optimizers


def _params_of(optimizer) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]


def _two_step(kind: str = "right"):
    """The reference step (``kind="right"``) or one with a typical slip."""

    def step(model, optimizers, max_norms, scaler, x, y, dtype):
        if kind != "no-zero-grad":
            for optimizer in optimizers:
                optimizer.zero_grad(set_to_none=True)
        backward = lambda loss: (loss if scaler is None else scaler.scale(loss)).backward()
        with torch.autocast(x.device.type, dtype=torch.float16 if kind == "always-fp16" else dtype):
            loss = F.mse_loss(model(x), y)
            if kind == "backward-in-autocast":
                backward(loss)
        if kind != "backward-in-autocast":
            backward(loss)
        parts = (
            [(optimizers, list(model.parameters()), max_norms[0])]
            if kind == "one-clip"
            else [([optimizer], _params_of(optimizer), max_norm) for optimizer, max_norm in zip(optimizers, max_norms)]
        )
        for i, (group, params, max_norm) in enumerate(parts):
            unscale = scaler is not None and not (kind == "unscale-first-only" and i > 0)
            if kind == "clip-first":
                torch.nn.utils.clip_grad_norm_(params, max_norm)
            for optimizer in group if unscale else []:
                scaler.unscale_(optimizer)
            if kind != "clip-first":
                torch.nn.utils.clip_grad_norm_(params, max_norm)
        for optimizer in optimizers:
            if scaler is None or kind == "optimizer-step":
                optimizer.step()
            else:
                scaler.step(optimizer)  # each optimizer skips on its own inf/NaN
                if kind == "update-each":
                    scaler.update()
        if scaler is not None and kind != "update-each":
            scaler.update()  # once per iteration: it reads what every unscale_ found
        return (scaler.scale(loss) if kind == "scaled-loss" and scaler else loss).item()

    return step


reference_two_optimizer_step = _two_step()

_SLIPS = "clip-first unscale-first-only update-each optimizer-step one-clip no-zero-grad scaled-loss"
TWO_VARIANTS = variants(_two_step, {k: TWO_HINTS[k] for k in _SLIPS.split()})

# (seed, dtype, steps, (max_norm / ‖g‖ of body, head), init_scale, growth_interval, the step on which the head overflows)
TWO_CASES = (
    (0, torch.float16, 3, (0.3, 3.0), 2.0**10, 1, None),
    (1, torch.float16, 3, (0.3, 3.0), 2.0**8, 1, 1),
    (2, torch.bfloat16, 3, (3.0, 0.3), None, None, None),
    (3, torch.float16, 4, (3.0, 0.3), 2.0**12, 2, None),
)


def _two_label(seed, dtype, steps, ratios, init_scale, growth_interval, overflow_at) -> str:
    precision = _said("fp16", init_scale=init_scale, growth_interval=growth_interval) if init_scale else _said("bf16")
    label = _said("body-clipped" if ratios[0] < 1 else "head-clipped", precision=precision, steps=steps)
    return _said("head-overflows", label=label, step=overflow_at + 1) if overflow_at else label


def _run_two(step: Callable, case) -> dict:
    """Run ``step`` over the case's steps on a fresh setup; record what happened inside and after every step."""
    seed, dtype, steps, ratios, init_scale, growth_interval, overflow_at = case
    scaler = None if init_scale is None else torch.amp.GradScaler("cpu", init_scale, growth_interval=growth_interval)
    model, optimizers, scaler = cases.two_optimizer_model(seed, scaler)
    batches = cases.regression_micro_batches(seed, steps, size=5, dims=(4, 3), dtype=torch.float32)
    F.mse_loss(model(batches[0][0]), batches[0][1]).backward()  # each part's ‖g‖ at the start sets its max_norm
    norm = lambda i: float(parameters_to_vector(p.grad for p in model[i].parameters()).norm())  # model[i]'s ‖g‖
    max_norms = [r * norm(i) for r, i in zip(ratios, (0, 2))]
    record = {key: [] for key in ("forward", "backward", "scales", "params", "losses", "steps", "problems")}
    model.register_forward_pre_hook(
        lambda *_: record["forward"].append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
    )
    inject = [False]
    for p in model.parameters():  # backward's autocast state, seen from each parameter's gradient
        p.register_hook(lambda grad: record["backward"].append(torch.is_autocast_enabled("cpu")))
    model[2].weight.register_hook(lambda grad: torch.full_like(grad, math.inf) if inject[0] else grad)
    for i, optimizer in enumerate(optimizers):
        optimizer.register_step_post_hook(
            lambda *_, i=i: record["steps"][-1].__setitem__(i, record["steps"][-1][i] + 1)
        )
    group_settings = lambda: [{k: v for k, v in g.items() if k != "params"} for o in optimizers for g in o.param_groups]
    settings = group_settings()
    for n, (x, y) in enumerate(batches):
        inject[0] = n == overflow_at
        for p in model.parameters():  # stale gradients from an earlier step
            p.grad = torch.full_like(p, 0.5)
        record["steps"].append([0, 0])
        given = (list(max_norms), list(optimizers))
        loss = step(model, optimizers, max_norms, scaler, x, y, dtype)
        if (max_norms, optimizers) != given:
            record["problems"].append("changed-arguments")
        if group_settings() != settings:
            record["problems"].append("changed-settings")
        if any(p.dtype != torch.float32 for p in model.parameters()) or not model.training:
            record["problems"].append("changed-model")
        record["losses"].append(loss)
        record["scales"].append(None if scaler is None else scaler.get_scale())
        record["params"].append(parameters_to_vector(model.parameters()).detach().clone())
    return record


def _same_run(got: dict, ref: dict) -> bool:
    """Same scales and steps, the same parameters after every step (inf/NaN in both counts as the same), same losses."""
    finite = [all(torch.isfinite(p).all() for p in r["params"]) for r in (got, ref)]
    return (
        got["scales"] == ref["scales"]
        and got["steps"] == ref["steps"]
        and (all(close(a, b, after_steps=True) for a, b in zip(got["params"], ref["params"])) or not any(finite))
        and all(
            isinstance(a, float) and (math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-6) or math.isnan(a) and math.isnan(b))
            for a, b in zip(got["losses"], ref["losses"])
        )
    )


def check_two_optimizer_step(two_optimizer_step) -> None:
    """Check ``two_optimizer_step(model, optimizers, max_norms, scaler, x, y, dtype)`` against the reference step.

    Runs it on a model split between two SGD optimizers, several steps per case, with stale gradients in ``.grad``
    before every step, clip thresholds above and below each part's gradient norm, fp16 with a ``GradScaler('cpu')``
    and bf16 with none, and one step where only the second optimizer's gradients overflow. Compares the parameters,
    the scale, which optimizer stepped and the returned loss after every step; watches that the forward runs under
    autocast with the named dtype, that backward runs outside it, and that nothing else the caller passed changes.

    >>> check_two_optimizer_step(reference_two_optimizer_step)
    ✓ two_optimizer_step matches the reference on 4 runs (13 steps: fp16 and bf16, one optimizer overflowing alone)
    """
    for case in TWO_CASES:
        label, dtype = _two_label(*case), case[1]
        learner = LearnerCall(two_optimizer_step, "two_optimizer_step", label=label)
        runs = run_variants(functools.partial(_run_two, case=case), learner, reference_two_optimizer_step, TWO_VARIANTS)
        ref, got, head = runs.reference, runs.learner, _said("two-head", label=label)
        used = {d if enabled else None for enabled, d in got["forward"]}  # None: a forward outside autocast
        contract = {  # mistake: whether the step made it (the first one made is named; its summary is SAID[mistake])
            "no-forward": not used,
            "no-autocast": len(used) > 1 or None in used,
            "always-fp16": used != {dtype},
            "backward-in-autocast": any(got["backward"]),
            **{p: True for p in got["problems"][:1]},
        }
        for mistake in (m for m, happened in contract.items() if happened):
            said = mistake if mistake in SAID else "changed"
            summary = _said(said, head=head, used=", ".join(map(str, used)), dtype=dtype)
            raise ExerciseError("contract", summary, hint=TWO_HINTS[mistake], mistake=mistake)
        if any(not isinstance(loss, float) for loss in got["losses"]):
            kinds = ", ".join(sorted({type(loss).__name__ for loss in got["losses"]}))
            raise ExerciseError("type", _said("loss-not-float", head=head, kinds=kinds), mistake="loss-not-float")
        if _same_run(got, ref):
            continue
        slip = runs.closest(_same_run)  # a variant that raises on this case is left out
        last = ref["params"][-1]
        measured = {"relative_param_error": float((got["params"][-1] - last).norm() / last.norm())}
        losses, error = [round(v, 6) for v in ref["losses"]], measured["relative_param_error"]
        detail = _said("two-measured", got=got, ref=ref, error=error, losses=losses)
        symptoms = {
            "inf-applied": not all(torch.isfinite(p).all() for p in got["params"]),
            "steps-differ": got["steps"] != ref["steps"],
            "scale-differs": got["scales"] != ref["scales"],
        }
        mistake = slip.name if slip else next((m for m, seen in symptoms.items() if seen), None)
        hint, summary = TWO_HINTS[mistake], _said("two-wrong", head=head)
        raise ExerciseError("value", summary, detail=detail, hint=hint, mistake=mistake, measured=measured)
    passed(_said("two-passed", runs=len(TWO_CASES), steps=sum(case[2] for case in TWO_CASES)))


# --------------------------------------------------------------------------- exercise 3: Adam's first update and the clip bug


def _adam_reference(grad, scale, max_norm, lr, eps, clip_before_unscale):
    """The real thing: a GradScaler-style scaled gradient, clip_grad_norm_, division by S, torch.optim.Adam."""
    p = torch.nn.Parameter(torch.zeros_like(grad))
    p.grad = grad * scale if clip_before_unscale else grad.clone()
    torch.nn.utils.clip_grad_norm_([p], max_norm)
    if clip_before_unscale:
        p.grad = p.grad / scale  # what scaler.step does after the (buggy) clip
    torch.optim.Adam([p], lr=lr, eps=eps).step()
    return p.detach().clone()


def _used(grad, scale, max_norm, clip_before_unscale):
    """The gradient the optimizer receives in either order."""
    norm = (scale if clip_before_unscale else 1.0) * float(grad.double().norm())
    return grad * min(1.0, max_norm / (norm + 1e-6))


def _adam_like(g, lr, eps):
    return -lr * g / (g.abs() + eps)


_ADAM_WRONG = {  # each slip's update, (grad, scale, max_norm, lr, eps, clip_before_unscale) like the reference's
    "sgd": lambda g, s, m, lr, eps, bug: -lr * _used(g, s, m, bug),
    "order-ignored": lambda g, s, m, lr, eps, bug: _adam_like(_used(g, s, m, False), lr, eps),
    "no-bias-correction": lambda g, s, m, lr, eps, bug: (
        -lr * 0.1 * _used(g, s, m, bug) / ((0.001 * _used(g, s, m, bug) ** 2).sqrt() + eps)
    ),
    "eps-inside-sqrt": lambda g, s, m, lr, eps, bug: (
        -lr * _used(g, s, m, bug) / (_used(g, s, m, bug) ** 2 + eps).sqrt()
    ),
    "sign": lambda g, s, m, lr, eps, bug: -_adam_like(_used(g, s, m, bug), lr, eps),
    "no-eps": lambda g, s, m, lr, eps, bug: -lr * torch.sign(g),
    "bug-is-g-over-s": lambda g, s, m, lr, eps, bug: _adam_like(g / s if bug else _used(g, s, m, False), lr, eps),
    "never-unscaled": lambda g, s, m, lr, eps, bug: _adam_like(_used(g, s, m, bug) * (s if bug else 1.0), lr, eps),
}
ADAM_MISTAKES = mistakes(ADAM_HINTS, _ADAM_WRONG)


def _adam_cases() -> list[Case]:
    """Gradients spanning six orders of magnitude: with the bug some shrunk elements sit far above ε, some near, some below."""
    gen = seeded(12)
    out = []
    for n, dtype, scale, ratio, lr, eps, bug, what in (  # ratio: max_norm as a multiple of ‖g‖
        (200, torch.float64, 2.0**16, 0.5, 0.1, 1e-8, True, N_("the bug, both orders would clip")),
        (200, torch.float64, 2.0**16, 0.5, 0.1, 1e-8, False, N_("the right order, clip active")),
        (300, torch.float64, 2.0**16, 3.0, 0.01, 1e-8, True, N_("the bug, the right order would not clip")),
        (300, torch.float64, 2.0**16, 3.0, 0.01, 1e-8, False, N_("the right order, clip inactive")),
        (50, torch.float64, 1024.0, 0.2, 0.5, 1e-6, True, N_("the bug, a larger ε")),
        (64, torch.float32, 2.0**12, 0.5, 0.1, 1e-8, True, N_("the bug, float32")),
        (40, torch.float64, 4.0, 10.0, 0.1, 1e-8, True, N_("the bug with S·‖g‖ below max_norm: nothing is clipped")),
    ):
        g = cases.spread_gradient(gen, n, dtype)
        g = g.reshape(n // 4, 4) if dtype == torch.float32 else g
        norm = float(g.double().norm())
        values = dict(shape=tuple(g.shape), dtype=dtype, scale=scale, max_norm=ratio * norm, norm=norm, lr=lr, eps=eps)
        label = _said("adam-label", **values, bug=bug, what=_(what))
        out.append(Case((g, scale, ratio * norm, lr, eps, bug), label))
    return out


_ADAM_MODULE = importlib.import_module("torch.optim.adam")  # torch.optim hides the submodule's name
_ADAM_KERNELS = ("adam", "_single_tensor_adam", "_multi_tensor_adam", "_fused_adam")
ADAM_OFF_LIMITS = OffLimits(
    # the class, and the kernels the functional form looks up at call time (so an `adam` imported earlier is caught too)
    routines=(
        Routine(torch.optim.Optimizer, "__init__", "a torch.optim optimizer"),
        *(Routine(_ADAM_MODULE, f, f"torch.optim.adam.{f}") for f in _ADAM_KERNELS),
    ),
    why=ADAM_WHY,
)


def _agrees(out, wrong) -> bool:
    return (
        isinstance(out, torch.Tensor)
        and out.shape == wrong.shape
        and torch.allclose(out.detach().double(), wrong.double(), rtol=1e-5, atol=1e-12)
    )


def check_adam_first_update(adam_first_update) -> None:
    """Check ``adam_first_update(grad, scale, max_norm, lr, eps, clip_before_unscale)``: the change Adam's first step
    makes to the parameters when clipping runs after ``unscale_`` or before it, against a real ``torch.optim.Adam``.

    >>> check_adam_first_update(lambda g, s, m, lr, eps, bug: _adam_like(_used(g, s, m, bug), lr, eps))
    ✓ adam_first_update matches the reference on 7 inputs
    """
    inputs = _adam_cases()
    learner = LearnerCall(adam_first_update, "adam_first_update", ADAM_OFF_LIMITS)
    outputs = []
    for case in inputs:  # several mistakes coincide on some inputs: name the one that agrees on every input
        try:
            outputs.append(learner(*clones(case.args)))
        except ExerciseError:  # reported properly by check_function below
            outputs.append(None)
    agrees = lambda m: all(_agrees(out, m.compute(*case.args)) for out, case in zip(outputs, inputs))
    slips = tuple(filter(agrees, ADAM_MISTAKES)) or ADAM_MISTAKES
    check_function(
        adam_first_update, _adam_reference, inputs, name="adam_first_update", mistakes=slips, off_limits=ADAM_OFF_LIMITS
    )
