"""Chapter 08 checkers: right answers in several forms pass, typical wrong ones get their hint."""

import re

import pytest
import torch
import torch.nn.functional as F

from autogradlab.checks import ch08
from autogradlab.checks.ch08 import check_amp_train_step, check_grad_after_clip_bug, check_loss_scale_after
from autogradlab.checks.core import ExerciseError
from autogradlab.models.loss_scale import scale_trace

# ---- exercise 1: the AMP step ----------------------------------------------------------------


def zero_grad_at_end(model, optimizer, scaler, x, y, max_norm):
    with torch.autocast(device_type=x.device.type, dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=False)
    return loss


def amp_namespace_and_param_groups(model, optimizer, scaler, x, y, max_norm):
    model.zero_grad()
    with torch.amp.autocast("cpu", dtype=torch.float16):
        out = model(x)
        loss = F.mse_loss(out, y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    torch.nn.utils.clip_grad_norm_(params, max_norm=max_norm)
    scaler.step(optimizer)
    scaler.update()


def loss_outside_autocast(model, optimizer, scaler, x, y, max_norm):
    optimizer.zero_grad()
    with torch.autocast(x.device.type, torch.float16):
        out = model(x)
    loss = F.mse_loss(out.float(), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


CORRECT_STEPS = {
    "reference": ch08.reference_amp_train_step,
    "zero_grad at the end": zero_grad_at_end,
    "torch.amp.autocast, param_groups": amp_namespace_and_param_groups,
    "loss outside autocast": loss_outside_autocast,
}


@pytest.mark.parametrize("name", CORRECT_STEPS)
def test_correct_amp_steps_pass(name, capsys):
    check_amp_train_step(CORRECT_STEPS[name])
    assert capsys.readouterr().out.startswith("✓ amp_train_step")


def no_autocast(model, optimizer, scaler, x, y, max_norm):
    optimizer.zero_grad()
    scaler.scale(F.mse_loss(model(x), y)).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()


def clip_then_step_no_unscale(model, optimizer, scaler, x, y, max_norm):
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()


def unscale_twice(model, optimizer, scaler, x, y, max_norm):
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    scaler.unscale_(optimizer)


def not_scaled(model, optimizer, scaler, x, y, max_norm):
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    loss.backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()


def no_update_after_first(model, optimizer, scaler, x, y, max_norm):
    # right on the first run's single step (growth_interval 1 shows it), PyTorch itself raises on later steps
    ch08._no_update(model, optimizer, scaler, x, y, max_norm)
    if scaler.get_scale() == 2.0**12:
        scaler.update()


def not_implemented(*args):
    raise NotImplementedError()


WRONG_STEPS = {
    "clip before unscale_": (ch08._clip_before_unscale, "ran on the *scaled* gradients"),
    "clip, no unscale_": (clip_then_step_no_unscale, "ran on the *scaled* gradients"),
    "no clip": (ch08._no_clip, "were not clipped"),
    "optimizer.step": (ch08._optimizer_step, "use scaler.step" if False else "call scaler.step(optimizer)"),
    "no update": (ch08._no_update, "scaler.update() was never called"),
    "update before step": (ch08._update_before_step, "scaler.update() ran before scaler.step"),
    "loss not scaled": (not_scaled, "did not use scaler.scale"),  # PyTorch's own message names it
    "no update, several steps": (no_update_after_first, "unscale_() is being called after step()"),
    "no zero_grad": (ch08._no_zero_grad, "gradients accumulate"),
    "zero_grad after backward": (ch08._zero_grad_after_backward, "zero_grad ran between backward and step"),
    "no autocast": (no_autocast, "outside autocast"),
    "unscale twice": (unscale_twice, "raised RuntimeError"),
    "not implemented": (not_implemented, "NotImplementedError"),
    "no model call": (lambda *a: None, "never called the model"),
}


@pytest.mark.parametrize("name", WRONG_STEPS)
def test_wrong_amp_steps_are_rejected_with_their_hint(name):
    answer, hint = WRONG_STEPS[name]
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_amp_train_step(answer)


# ---- exercise 2: the clip-before-unscale bug -------------------------------------------------


def bug_by_formula(grad, scale, max_norm):
    return grad * min(1.0, max_norm / (scale * float(grad.norm()) + 1e-6))


def bug_by_simulation(grad, scale, max_norm):
    scaled = grad * scale
    norm = torch.linalg.vector_norm(scaled)
    factor = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    return scaled * factor / scale


def bug_without_eps(grad, scale, max_norm):
    norm = scale * grad.norm()
    return grad if norm <= max_norm else grad * (max_norm / norm)


CORRECT_CLIPS = {"formula": bug_by_formula, "simulated": bug_by_simulation, "no eps": bug_without_eps}


@pytest.mark.parametrize("name", CORRECT_CLIPS)
def test_correct_clip_bug_answers_pass(name, capsys):
    check_grad_after_clip_bug(CORRECT_CLIPS[name])
    assert capsys.readouterr().out.startswith("✓ grad_after_clip_bug")


WRONG_CLIPS = {
    "right order": (lambda g, s, m: g * min(1.0, m / (float(g.norm()) + 1e-6)), "that is the right order's result"),
    "forgot to unscale": (lambda g, s, m: g * s * min(1.0, m / (s * float(g.norm()) + 1e-6)), "divide by the scale"),
    "unscaled twice": (lambda g, s, m: bug_by_formula(g, s, m) / s, "divided by the scale twice"),
    "no min(1, .)": (lambda g, s, m: g * m / (s * float(g.norm()) + 1e-6), "only ever shrinks"),
    "unclipped": (lambda g, s, m: g.clone(), "returned unclipped"),
    "lost dtype": (lambda g, s, m: bug_by_formula(g, s, m).float(), "Dtype"),
    "in place": (lambda g, s, m: g.mul_(min(1.0, m / (s * float(g.norm()) + 1e-6))), "changed its input in place"),
}


@pytest.mark.parametrize("name", WRONG_CLIPS)
def test_wrong_clip_bug_answers_are_rejected_with_their_hint(name):
    answer, hint = WRONG_CLIPS[name]
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_grad_after_clip_bug(answer)


# ---- exercise 3: the loss scale after a sequence ---------------------------------------------


def scale_loop(overflows, init_scale, growth_interval, growth_factor=2.0, backoff_factor=0.5):
    scale, good = init_scale, 0
    for overflow in overflows:
        if overflow:
            scale, good = scale * backoff_factor, 0
        else:
            good += 1
            if good == growth_interval:
                scale, good = scale * growth_factor, 0
    return scale


def scale_with_model(overflows, init_scale, growth_interval, growth_factor, backoff_factor):
    return scale_trace(overflows, init_scale=init_scale, growth_interval=growth_interval,
                       growth_factor=growth_factor, backoff_factor=backoff_factor).final_scale


def scale_as_tensor(*args):
    return torch.tensor(scale_loop(*args))


CORRECT_SCALES = {"loop": scale_loop, "model": scale_with_model, "0-dim tensor": scale_as_tensor}


@pytest.mark.parametrize("name", CORRECT_SCALES)
def test_correct_loss_scales_pass(name, capsys):
    check_loss_scale_after(CORRECT_SCALES[name])
    assert capsys.readouterr().out.startswith("✓ loss_scale_after")


def _wrong(kind):
    return lambda o, s, n, g=2.0, b=0.5: ch08._variant(o, s, n, g, b, kind=kind)


WRONG_SCALES = {
    "no reset on overflow": (_wrong("no_reset_on_overflow"), "reset the count of good steps"),
    "off by one": (_wrong("off_by_one"), "off by one"),
    "counts all steps": (_wrong("count_all_steps"), "not of all steps"),
    "no reset after growth": (_wrong("no_reset_after_growth"), "after growing, the count restarts"),
    "fixed half": (_wrong("fixed_half"), "multiplied by backoff_factor"),
    "string": (lambda *a: "65536", "should return a number"),
    "never changes": (lambda o, s, *a: s, "off by one"),  # on '...' with interval 3 it looks exactly like that
    "unrelated": (lambda o, s, *a: 3.0 * s, "replay the rule"),
}


@pytest.mark.parametrize("name", WRONG_SCALES)
def test_wrong_loss_scales_are_rejected_with_their_hint(name):
    answer, hint = WRONG_SCALES[name]
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_loss_scale_after(answer)


def test_variants_differ_from_gradscaler_on_some_case():
    # every named mistake is caught by at least one case (else its hint could never fire)
    for kind in ch08.SCALE_MISTAKES.values():
        assert any(
            ch08._variant([c == "x" for c in p], s, n, g, b, kind=kind)
            != ch08._gradscaler_scale_after([c == "x" for c in p], s, n, g, b)
            for p, s, n, g, b in ch08._SCALE_CASES
        ), kind
