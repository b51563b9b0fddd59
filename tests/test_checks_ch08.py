"""Chapter 08 checkers: right answers in several forms pass, plausible wrong ones are rejected with the hint naming the mistake."""

import re

import pytest
import torch
import torch.nn.functional as F

from autogradlab.checks import ch08
from autogradlab.checks.ch08 import check_adam_first_update, check_loss_scale_after, check_two_optimizer_step
from autogradlab.checks.core import ExerciseError
from autogradlab.models.loss_scale import scale_trace


def not_implemented(*args):
    raise NotImplementedError()


def rejects(checker, answer, mistake, kind=None):
    """The checker rejects ``answer``, naming ``mistake`` (and ``kind``), with a hint where a mistake is named."""
    with pytest.raises(ExerciseError) as info:
        checker(answer)
    error = info.value
    assert (error.mistake, error.kind if kind else None) == (mistake, kind), str(error)
    assert error.hint is not None or mistake is None, str(error)


# ---- exercise 1: the loss scale after a sequence ---------------------------------------------


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


def scale_by_counting(overflows, init_scale, growth_interval, growth_factor=2.0, backoff_factor=0.5):
    # a different shape of the same rule: runs of good steps between overflows
    scale, run = float(init_scale), 0
    for overflow in list(overflows) + [None]:
        if overflow is None or overflow:
            scale *= growth_factor ** (run // growth_interval)
            run = 0
            if overflow:
                scale *= backoff_factor
        else:
            run += 1
    return scale


def scale_as_tensor(*args):
    return torch.tensor(scale_loop(*args))


CORRECT_SCALES = {"loop": scale_loop, "runs of good steps": scale_by_counting, "0-dim tensor": scale_as_tensor}


@pytest.mark.parametrize("name", CORRECT_SCALES)
def test_correct_loss_scales_pass(name, capsys):
    check_loss_scale_after(CORRECT_SCALES[name])
    assert capsys.readouterr().out.startswith("✓ loss_scale_after")


def _wrong(kind):
    return ch08._scale_variant(kind)


def with_gradscaler(overflows, init_scale, growth_interval, growth_factor=2.0, backoff_factor=0.5):
    return ch08._gradscaler_scale_after(overflows, init_scale, growth_interval, growth_factor, backoff_factor)


def with_course_helper(overflows, init_scale, growth_interval, growth_factor=2.0, backoff_factor=0.5):
    return scale_trace(
        overflows,
        init_scale=init_scale,
        growth_interval=growth_interval,
        growth_factor=growth_factor,
        backoff_factor=backoff_factor,
    ).final_scale


WRONG_SCALES = {
    "no reset on overflow": (_wrong("no-reset-on-overflow"), "no-reset-on-overflow", "value"),
    "off by one": (_wrong("off-by-one"), "off-by-one", "value"),
    "counts all steps": (_wrong("count-all-steps"), "count-all-steps", "value"),
    "no reset after growth": (_wrong("no-reset-after-growth"), "no-reset-after-growth", "value"),
    "fixed half": (_wrong("fixed-half"), "fixed-half", "value"),
    "string": (lambda *a: "65536", None, "type"),
    "never changes": (lambda o, s, *a: s, "off-by-one", "value"),  # on '...' with interval 3 it looks exactly like that
    "a real GradScaler does it": (with_gradscaler, "torch.amp.GradScaler", "off-limits"),
    "the course's simulation does it": (with_course_helper, "autogradlab.models.loss_scale.scale_trace", "off-limits"),
    "not implemented": (not_implemented, None, "not-implemented"),
}


@pytest.mark.parametrize("name", WRONG_SCALES)
def test_wrong_loss_scales_are_rejected_with_their_hint(name):
    rejects(check_loss_scale_after, *WRONG_SCALES[name])


def test_an_unrelated_scale_gets_the_rule_spelled_out():
    with pytest.raises(ExerciseError) as info:
        check_loss_scale_after(lambda o, s, *a: 3.0 * s)
    assert (info.value.kind, info.value.mistake) == ("value", None) and info.value.hint is not None


def test_helpers_work_again_after_a_refused_answer():
    with pytest.raises(ExerciseError):
        check_loss_scale_after(with_gradscaler)
    assert with_course_helper([True], 8.0, 2) == 4.0 and with_gradscaler([True], 8.0, 2) == 4.0


def test_variants_differ_from_gradscaler_on_some_case():
    # every named mistake is caught by at least one case (else its hint could never fire)
    for mistake in ch08.SCALE_MISTAKES:
        assert any(
            mistake.compute([c == "x" for c in p], *settings)
            != ch08._gradscaler_scale_after([c == "x" for c in p], *settings)
            for p, *settings in ch08.SCALE_CASES
        ), mistake.id


# ---- exercise 2: one scaler, two optimizers --------------------------------------------------


def step_model_zero_grad(model, optimizers, max_norms, scaler, x, y, dtype):
    model.zero_grad()
    with torch.amp.autocast("cpu", dtype=dtype):
        out = model(x)
    loss = F.mse_loss(out.float(), y)  # the loss outside autocast, from the 16-bit output: same value
    if scaler is None:
        loss.backward()
        for optimizer, max_norm in zip(optimizers, max_norms):
            torch.nn.utils.clip_grad_norm_(optimizer.param_groups[0]["params"], max_norm=max_norm)
        for optimizer in optimizers:
            optimizer.step()
        return float(loss.detach())
    scaler.scale(loss).backward()
    for optimizer in optimizers:
        scaler.unscale_(optimizer)
    for optimizer, max_norm in zip(optimizers, max_norms):
        torch.nn.utils.clip_grad_norm_(optimizer.param_groups[0]["params"], max_norm)
    for optimizer in optimizers:
        scaler.step(optimizer)
    scaler.update()
    return loss.item()


def step_interleaved(model, optimizers, max_norms, scaler, x, y, dtype):
    # unscale, clip and step one optimizer after the other; update once at the end
    for optimizer in optimizers:
        optimizer.zero_grad(set_to_none=False)
    with torch.autocast(device_type=x.device.type, dtype=dtype):
        loss = F.mse_loss(model(x), y)
    (scaler.scale(loss) if scaler else loss).backward()
    for optimizer, max_norm in zip(optimizers, max_norms):
        if scaler:
            scaler.unscale_(optimizer)
        params = [p for group in optimizer.param_groups for p in group["params"]]
        torch.nn.utils.clip_grad_norm_(params, max_norm)
        scaler.step(optimizer) if scaler else optimizer.step()
    if scaler:
        scaler.update()
    return float(loss.item())


CORRECT_TWO = {
    "reference": ch08.reference_two_optimizer_step,
    "model.zero_grad, loss from the 16-bit output": step_model_zero_grad,
    "interleaved per optimizer": step_interleaved,
}


@pytest.mark.parametrize("name", CORRECT_TWO)
def test_correct_two_optimizer_steps_pass(name, capsys):
    check_two_optimizer_step(CORRECT_TWO[name])
    assert capsys.readouterr().out.startswith("✓ two_optimizer_step")


def model_cast_instead_of_autocast(model, optimizers, max_norms, scaler, x, y, dtype):
    model.to(dtype)  # model.half(): not mixed precision
    loss = F.mse_loss(model(x.to(dtype)).float(), y)
    loss.backward()
    for optimizer in optimizers:
        optimizer.step()
    return loss.item()


def forgets_the_second_optimizer(model, optimizers, max_norms, scaler, x, y, dtype):
    optimizers[0].zero_grad()
    optimizers[1].zero_grad()
    with torch.autocast("cpu", dtype=dtype):
        loss = F.mse_loss(model(x), y)
    (scaler.scale(loss) if scaler else loss).backward()
    if scaler:
        scaler.unscale_(optimizers[0])
    torch.nn.utils.clip_grad_norm_(list(model[0].parameters()), max_norms[0])
    scaler.step(optimizers[0]) if scaler else optimizers[0].step()
    if scaler:
        scaler.update()
    return loss.item()


def returns_the_tensor(model, optimizers, max_norms, scaler, x, y, dtype):
    for optimizer in optimizers:
        optimizer.zero_grad()
    with torch.autocast("cpu", dtype=dtype):
        loss = F.mse_loss(model(x), y)
    (scaler.scale(loss) if scaler else loss).backward()
    for optimizer, max_norm in zip(optimizers, max_norms):
        if scaler:
            scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(optimizer.param_groups[0]["params"], max_norm)
        scaler.step(optimizer) if scaler else optimizer.step()
    if scaler:
        scaler.update()
    return loss


def changes_lr(model, optimizers, max_norms, scaler, x, y, dtype):
    for optimizer in optimizers:  # "a smaller lr for fp16"
        for group in optimizer.param_groups:
            group["lr"] = group["lr"] * (0.5 if dtype == torch.float16 else 1.0)
    return ch08.reference_two_optimizer_step(model, optimizers, max_norms, scaler, x, y, dtype)


def changes_x(model, optimizers, max_norms, scaler, x, y, dtype):
    x /= x.norm()  # "normalise the batch" in place
    return ch08.reference_two_optimizer_step(model, optimizers, max_norms, scaler, x, y, dtype)


WRONG_TWO = {
    **{
        mistake: (ch08._two_step(mistake), mistake)
        for mistake in (
            "clip-first",
            "unscale-first-only",
            "update-each",
            "optimizer-step",
            "one-clip",
            "no-zero-grad",
            "scaled-loss",
            "backward-in-autocast",
            "always-fp16",
        )
    },
    "model.to(dtype) instead of autocast": (model_cast_instead_of_autocast, "no-autocast"),
    "forgets the second optimizer": (forgets_the_second_optimizer, "steps-differ"),
    "returns a tensor": (returns_the_tensor, "loss-not-float"),
    "changes the learning rate": (changes_lr, "changed-settings"),
    "no model call": (lambda *a: 0.0, "no-forward"),
}


@pytest.mark.parametrize("name", WRONG_TWO)
def test_wrong_two_optimizer_steps_are_rejected_with_their_hint(name):
    answer, mistake = WRONG_TWO[name]
    with pytest.raises(ExerciseError) as info:
        check_two_optimizer_step(answer)
    assert info.value.mistake == mistake, str(info.value)
    assert mistake == "loss-not-float" or info.value.hint is not None


@pytest.mark.parametrize("answer, kind", [(not_implemented, "not-implemented"), (changes_x, "changed-input")])
def test_two_optimizer_step_kernel_errors(answer, kind):
    with pytest.raises(ExerciseError) as info:
        check_two_optimizer_step(answer)
    assert info.value.kind == kind


def test_two_optimizer_cases_exercise_both_clip_regimes_and_a_lone_overflow():
    # every case clips one part (max_norm below its ‖g‖) and not the other (above ‖g‖, below S·‖g‖)
    for *_, ratios, init_scale, _, _ in ch08.TWO_CASES:
        assert min(ratios) < 1 < max(ratios) and (init_scale is None or max(ratios) < init_scale)
    ref = ch08._run_two(ch08.reference_two_optimizer_step, ch08.TWO_CASES[1])
    assert ref["steps"] == [[1, 1], [1, 0], [1, 1]]  # on the overflow the first optimizer still steps
    assert ref["scales"] == [512.0, 256.0, 512.0]


# ---- exercise 3: Adam's first update with the clip bug ---------------------------------------


def adam_closed_form(grad, scale, max_norm, lr, eps, clip_before_unscale):
    norm = float(grad.norm()) * (scale if clip_before_unscale else 1.0)
    g = grad * min(1.0, max_norm / (norm + 1e-6))
    return -lr * g / (g.abs() + eps)


def adam_by_the_book(grad, scale, max_norm, lr, eps, clip_before_unscale, betas=(0.9, 0.999)):
    g = grad * scale if clip_before_unscale else grad.clone()
    total = torch.linalg.vector_norm(g)
    g = g * torch.clamp(max_norm / (total + 1e-6), max=1.0)
    if clip_before_unscale:
        g = g / scale
    m = (1 - betas[0]) * g
    v = (1 - betas[1]) * g * g
    m_hat, v_hat = m / (1 - betas[0]), v / (1 - betas[1])
    return -lr * m_hat / (v_hat.sqrt() + eps)


def adam_with_real_clip(grad, scale, max_norm, lr, eps, clip_before_unscale):
    p = torch.nn.Parameter(torch.zeros_like(grad))
    p.grad = grad * (scale if clip_before_unscale else 1.0)
    torch.nn.utils.clip_grad_norm_([p], max_norm)
    g = p.grad / (scale if clip_before_unscale else 1.0)
    return -lr * g / (g.abs() + eps)


CORRECT_ADAM = {
    "closed form": adam_closed_form,
    "by the book": adam_by_the_book,
    "real clip, Adam by hand": adam_with_real_clip,
}


@pytest.mark.parametrize("name", CORRECT_ADAM)
def test_correct_adam_updates_pass(name, capsys):
    check_adam_first_update(CORRECT_ADAM[name])
    assert capsys.readouterr().out.startswith("✓ adam_first_update")


def with_torch_adam(grad, scale, max_norm, lr, eps, clip_before_unscale):
    p = torch.nn.Parameter(torch.zeros_like(grad))
    p.grad = adam_with_real_clip(grad, scale, max_norm, 1.0, 0.0, clip_before_unscale)
    torch.optim.Adam([p], lr=lr, eps=eps).step()
    return p.detach()


WRONG_ADAM = {
    **{m.id: (m.compute, m.id, "value") for m in ch08.ADAM_MISTAKES},
    "torch.optim.Adam does it": (with_torch_adam, "a torch.optim optimizer", "off-limits"),
    "lost dtype": (lambda *a: adam_closed_form(*a).double(), None, "dtype"),
    "in place": (lambda g, *a: g.mul_(1.0).copy_(adam_closed_form(g, *a)), None, "changed-input"),
    "not implemented": (not_implemented, None, "not-implemented"),
}


@pytest.mark.parametrize("name", WRONG_ADAM)
def test_wrong_adam_updates_are_rejected_with_their_hint(name):
    answer, mistake, kind = WRONG_ADAM[name]
    with pytest.raises(ExerciseError) as info:
        check_adam_first_update(answer)
    assert (info.value.mistake, info.value.kind) == (mistake, kind), str(info.value)


def test_adam_cases_put_the_bugs_gradient_on_both_sides_of_eps():
    # some shrunk elements far above ε, some below: else ε (and the size effect) would not be tested
    for case in ch08._adam_cases():
        grad, scale, max_norm, lr, eps, bug = case.args
        if bug and scale * float(grad.double().norm()) > max_norm:
            used = ch08._used(grad.double(), scale, max_norm, True).abs()
            assert used.max() > 10 * eps and used.min() < eps / 10, case.label
    assert torch.optim.Optimizer.__init__.__name__ == "__init__"  # the checker restored torch.optim


def test_the_functional_adam_is_refused_too():
    adam = __import__("importlib").import_module("torch.optim.adam").adam

    def functional(grad, scale, max_norm, lr, eps, clip_before_unscale):
        g = adam_with_real_clip(grad, scale, max_norm, 1.0, 0.0, clip_before_unscale)
        p = torch.zeros_like(grad)
        adam(
            [p],
            [g],
            [torch.zeros_like(g)],
            [torch.zeros_like(g)],
            [],
            [torch.tensor(0.0)],
            amsgrad=False,
            beta1=0.9,
            beta2=0.999,
            lr=lr,
            weight_decay=0.0,
            eps=eps,
            maximize=False,
        )
        return p

    with pytest.raises(ExerciseError) as info:
        check_adam_first_update(functional)
    assert info.value.kind == "off-limits" and info.value.mistake.startswith("torch.optim.adam.")


def test_a_rejected_answer_speaks_chinese_when_asked(monkeypatch):
    """Under AUTOGRADLAB_LANG=zh the checker's summary, measurement and hint are Chinese; kind and mistake stay."""
    monkeypatch.setenv("AUTOGRADLAB_LANG", "zh")
    with pytest.raises(ExerciseError) as info:
        check_loss_scale_after(ch08._scale_variant("off-by-one"))
    error, chinese = info.value, re.compile("[\u4e00-\u9fff]")
    assert (error.kind, error.mistake) == ("value", "off-by-one"), str(error)
    assert all(chinese.search(text) for text in (error.summary, error.detail, str(error).splitlines()[-1])), str(error)
