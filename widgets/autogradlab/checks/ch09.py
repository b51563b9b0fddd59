"""Checkers for chapter 09 (when the model does not learn): repaired steps, judged by the doctor.

Every checker runs the learner's repaired model or step through
:func:`autogradlab.models.doctor.diagnose` (no error or warning may remain), compares the
parameters after a few steps with a reference step (so a step that is silent but
computes something else does not pass), and trains long enough to see the loss fall.

The small data sets and models of the chapter's case studies live here too, so the
notebook and its checkers train exactly the same things.

>>> x, y = stripes(4)
>>> tuple(x.shape), tuple(y.shape)
((4, 1, 12, 12), (4,))
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from autogradlab.checks.core import ExerciseError, call_learner, compare, passed
from autogradlab.models.doctor import diagnose

# --------------------------------------------------------------------------- data and models


def stripes(n: int, seed: int = 0, size: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` noisy stripe images (n, 1, size, size) and labels (n,) as floats: 1 = horizontal, 0 = vertical."""
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=gen).float()
    phase = torch.rand(n, 1, 1, generator=gen) * 2 * math.pi
    period = 3 + torch.rand(n, 1, 1, generator=gen) * 3
    r = torch.arange(size, dtype=torch.float32)
    rows = torch.sin(2 * math.pi * r.view(1, -1, 1) / period + phase).expand(n, size, size)
    cols = torch.sin(2 * math.pi * r.view(1, 1, -1) / period + phase).expand(n, size, size)
    x = torch.where(y.view(-1, 1, 1) > 0, rows, cols) + 0.5 * torch.randn(n, size, size, generator=gen)
    return x.unsqueeze(1), y


def blobs(n: int, seed: int = 0, dim: int = 6, classes: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` points (n, dim) around ``classes`` random centres, and their class (n,) as int64."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, dim, generator=torch.Generator().manual_seed(1234)) * 2.0
    y = torch.randint(0, classes, (n,), generator=gen)
    return centres[y] + torch.randn(n, dim, generator=gen), y


def batches_of(x: torch.Tensor, y: torch.Tensor, size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Consecutive ``(x, y)`` batches of ``size`` rows."""
    return [(x[i : i + size], y[i : i + size]) for i in range(0, len(x), size)]


class TinyConvNet(nn.Module):
    """Conv features, L2-normalised per example, then a linear head giving one logit per image."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()
        )
        self.head = nn.Linear(channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = F.normalize(self.features(x), dim=1)  # f / ‖f‖ per example
        return self.head(features).squeeze(1)


def mlp_with_dropout_and_bn(seed: int = 0, dim: int = 6, hidden: int = 32, classes: int = 3) -> nn.Sequential:
    """A small classifier whose training and eval modes differ (batch norm and dropout)."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(0.3), nn.Linear(hidden, classes)
    )


# The repaired AMP step of case 1: constants the exercise states.
CONV_LR, CONV_MOMENTUM = 0.5, 0.9
CLIP_NORM = 0.1  # measured: gradient norms of TinyConvNet start at 0.1-0.2, so this clip is active
HEAD_LIMIT = 0.4  # the head's weights pass 0.4 within the first steps, so the clamp is active too


def reference_amp_step(model: nn.Module, optimizer, scaler, batch) -> torch.Tensor:
    """Case 1's step done right: bf16 autocast, scale → backward → unscale_ → clip → step → update, then
    the head constraint written under no_grad."""
    x, y = batch
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.binary_cross_entropy_with_logits(model(x).float(), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
    scaler.step(optimizer)
    scaler.update()
    with torch.no_grad():
        for p in model.head.parameters():
            p.clamp_(-HEAD_LIMIT, HEAD_LIMIT)
    return loss.detach()


def reference_train_step(model: nn.Module, optimizer, batch) -> torch.Tensor:
    """A plain classification step that survives a validation pass before it."""
    x, y = batch
    model.train()
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()


# --------------------------------------------------------------------------- shared checking


def _loss_value(out: Any, name: str) -> float:
    if isinstance(out, torch.Tensor) and out.numel() == 1:
        return float(out.detach())
    if isinstance(out, (int, float)) and not isinstance(out, bool):
        return float(out)
    raise ExerciseError(f"`{name}` should return the loss (a number or a 1-element tensor), but it returned "
                        f"{type(out).__name__}.")


def _doctor_clean(step: Callable, model, optimizer, batches, name: str, hints: dict[str, str], scaler=None):
    """Run the doctor; raise ExerciseError naming the first error/warning with this exercise's hint."""
    report = diagnose(step, model, optimizer, batches, scaler=scaler)
    raised = report["step-raised"]
    if raised:
        finding = raised[0]
        if finding.message.startswith("NotImplementedError"):
            raise ExerciseError(
                f"`{name}` still raises NotImplementedError: replace `raise NotImplementedError()` with your code, "
                "run that cell, then run this check again."
            )
        hint = next((h for text, h in hints.items() if text.startswith("raised:") and text[7:] in finding.message),
                    None)
        message = f"`{name}` raised {finding.message}\n  in your code: {finding.where}"
        raise ExerciseError(message + (f"\nHint: {hint}" if hint else ""))
    bad = report.errors + report.warnings
    if bad:
        first = bad[0]
        others = sorted({f.code for f in bad} - {first.code})
        more = f" (also: {', '.join(others)})" if others else ""
        raise ExerciseError(
            f"the doctor still reports {first.code} at {first.where}{more}:\n{first.message}\n"
            f"Hint: {hints.get(first.code, first.fix)}"
        )
    return report


def _check_loss_falls(losses: list[float], name: str, factor: float = 0.8) -> tuple[float, float]:
    k = max(1, len(losses) // 4)
    first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
    if not all(math.isfinite(v) for v in losses):
        raise ExerciseError(f"the loss became inf/NaN while training with `{name}`.")
    if not last < factor * first:
        raise ExerciseError(
            f"the doctor is silent, but the loss does not fall with `{name}`: mean of the first {k} steps "
            f"{first:.4f}, of the last {k} steps {last:.4f} (expected below {factor:g}× the start)."
        )
    return first, last


def _compare_params(model: nn.Module, expected: dict[str, torch.Tensor], mistakes: dict[str, Callable[[], dict]],
                    name: str, label: str) -> None:
    """Parameters after the learner's steps vs the reference's; on a mismatch, name a known wrong step that
    matches (``mistakes`` maps a hint to a function computing that wrong step's parameters, run only then)."""
    got = {k: v.detach() for k, v in model.named_parameters()}
    if all(torch.allclose(got[k], expected[k], rtol=1e-4, atol=1e-6) for k in expected):
        return
    for hint, wrong_params in mistakes.items():
        wrong = wrong_params()
        if all(torch.allclose(got[k], wrong[k], rtol=1e-4, atol=1e-6) for k in expected):
            raise ExerciseError(f"the parameters after {label} with `{name}` differ from the reference.\nHint: {hint}")
    for key, value in expected.items():
        compare(got[key], value, what=f"parameter `{key}` after {label} with `{name}`", label="the checker's batches")


def _params_after(step: Callable, make: Callable, batches, seed: int) -> dict[str, torch.Tensor]:
    model, run = make(step)
    torch.manual_seed(seed)
    for batch in batches:
        run(batch)
    return {k: v.detach().clone() for k, v in model.named_parameters()}


# --------------------------------------------------------------------------- exercise 1: repaired forward


def _bce_grads(model: nn.Module, out: torch.Tensor, y: torch.Tensor, name: str):
    loss = F.binary_cross_entropy_with_logits(out, y.to(out.dtype))
    try:
        return torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
    except RuntimeError as error:
        if "inplace" in str(error):
            raise ExerciseError(
                f"backward through `{name}` fails: {str(error).splitlines()[0]}\nHint: an in-place normalisation "
                "(`f /= f.norm(...)`) overwrites the tensor that norm() saved for backward; write "
                "`f = f / (f.norm(dim=1, keepdim=True) + 1e-6)` instead (and do not detach to silence the error)."
            ) from None
        raise ExerciseError(f"backward through `{name}` fails: {error}") from None


CONVNET_MISTAKES = {
    "normalise each example's feature vector: the norm is over the features, dim=1 (keepdim=True).":
        lambda f: f / (f.norm(dim=0, keepdim=True) + 1e-6),
    "the features are not normalised: divide by their L2 norm over dim=1 (plus 1e-6).":
        lambda f: f,
    "the norm must keep its dimension (keepdim=True) so each row is divided by its own norm.":
        lambda f: f / (f.norm() + 1e-6),
}


def _with_eps(reference: TinyConvNet, x: torch.Tensor) -> torch.Tensor:
    """The accepted alternative f / (‖f‖ + 1e-6): it differs from F.normalize by ~1e-6 relative."""
    f = reference.features(x)
    return reference.head(f / (f.norm(dim=1, keepdim=True) + 1e-6)).squeeze(1)


def _closest(got: Any, candidates: list[torch.Tensor]) -> torch.Tensor:
    """The accepted variant nearest to the learner's answer (the first one if none has its shape)."""
    same = [c for c in candidates if isinstance(got, torch.Tensor) and got.shape == c.shape]
    if not same:
        return candidates[0]
    return min(same, key=lambda c: float((got.detach().double() - c.detach().double()).abs().max()))


def check_repaired_convnet(cls) -> None:
    """Check a ``TinyConvNet`` subclass whose ``forward`` gives the same logits as the reference,
    lets a gradient reach every parameter, and trains under the doctor.

    >>> class Fixed(TinyConvNet):
    ...     def forward(self, x):
    ...         f = self.features(x)
    ...         self.logged = f.detach()
    ...         return self.head(f / (f.norm(dim=1, keepdim=True) + 1e-6)).squeeze(1)
    >>> check_repaired_convnet(Fixed)  # doctest: +ELLIPSIS
    ✓ RepairedConvNet: same logits and gradients as the reference ...
    """
    name = "RepairedConvNet"
    cases = [(0, 6, torch.float32), (1, 1, torch.float32), (2, 5, torch.float64)]
    for seed, n, dtype in cases:
        torch.manual_seed(seed)
        model = call_learner(cls, (), name, f"{name}()")
        if not isinstance(model, TinyConvNet):
            raise ExerciseError(f"`{name}` should subclass TinyConvNet (keep `class {name}(TinyConvNet):`).")
        model = model.to(dtype)
        reference = TinyConvNet().to(dtype)
        reference.load_state_dict(model.state_dict())
        x, y = stripes(n, seed=seed)
        x = x.to(dtype)
        label = f"a batch of {n} image(s) in {str(dtype)[6:]} (seed {seed})"
        out = call_learner(model, (x,), f"{name}.forward", label)
        expected = _closest(out, [reference(x), _with_eps(reference, x)])
        out_values = out.detach() if isinstance(out, torch.Tensor) else out
        with torch.no_grad():
            feats = reference.features(x)
            wrong = {hint: reference.head(fn(feats)).squeeze(1) for hint, fn in CONVNET_MISTAKES.items()}
        wrong["the logits need shape (N,): squeeze the head's last dimension, .squeeze(1)."] = expected.unsqueeze(1)
        compare(out_values, expected.detach(), what=f"`{name}` logits", label=label, mistakes=wrong)
        if out.grad_fn is None:
            raise ExerciseError(f"the logits of `{name}` do not require grad: nothing can be trained.")
        grads = _bce_grads(model, out, y, name)
        ref_grads = torch.autograd.grad(
            F.binary_cross_entropy_with_logits(expected, y.to(dtype)), list(reference.parameters())
        )
        for (pname, _), g, rg in zip(model.named_parameters(), grads, ref_grads):
            if g is None:
                raise ExerciseError(
                    f"`{pname}` gets no gradient through `{name}` for {label}.\nHint: the path from the features to "
                    "the loss is cut: log a detached *copy* (self.logged = f.detach()) but keep computing with f."
                )
            compare(g, rg, what=f"the gradient of `{pname}`", label=label)
    torch.manual_seed(0)
    model = cls()
    optimizer = torch.optim.SGD(model.parameters(), lr=CONV_LR, momentum=CONV_MOMENTUM)
    scaler = torch.amp.GradScaler("cpu")
    data = batches_of(*stripes(384, seed=7), 32)
    step = partial(reference_amp_step, model, optimizer, scaler)
    _doctor_clean(step, model, optimizer, data[:3], name, {
        "missing-grad": "the conv layers get no gradient: do not detach the features you compute with.",
    }, scaler=scaler)
    losses = [float(step(b)) for b in data[3:] + data[:6]]
    first, last = _check_loss_falls(losses, name)
    passed(f"{name}: same logits and gradients as the reference on {len(cases)} inputs; "
           f"doctor silent; loss {first:.3f} → {last:.3f}")


# --------------------------------------------------------------------------- exercise 2: the AMP step


def _amp_variant(clip: bool = True, clamp: bool = True, clamp_all: bool = False, autocast: bool = True):
    def step(model, optimizer, scaler, batch):
        x, y = batch
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = F.binary_cross_entropy_with_logits(model(x).float(), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
        scaler.step(optimizer)
        scaler.update()
        if clamp:
            with torch.no_grad():
                for p in (model.parameters() if clamp_all else model.head.parameters()):
                    p.clamp_(-HEAD_LIMIT, HEAD_LIMIT)
        return loss.detach()

    return step


def _scaler_steps(amp_step: Callable, batch) -> int:
    """How many times one call of the learner's step calls scaler.step."""
    torch.manual_seed(0)
    model = TinyConvNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=CONV_LR, momentum=CONV_MOMENTUM)
    scaler = torch.amp.GradScaler("cpu")
    calls = []
    original = scaler.step
    scaler.step = lambda opt, *a, **k: calls.append(1) or original(opt, *a, **k)
    call_learner(amp_step, (model, optimizer, scaler, batch), "amp_step", "one batch")
    return len(calls)


AMP_MISTAKES = {
    f"the gradients are not clipped: after scaler.unscale_(optimizer), call "
    f"torch.nn.utils.clip_grad_norm_(model.parameters(), {CLIP_NORM}).": dict(clip=False),
    f"the head is not kept in [-{HEAD_LIMIT:g}, {HEAD_LIMIT:g}]: after the step, clamp model.head's parameters "
    "under torch.no_grad().": dict(clamp=False),
    "only the head is constrained: clamp model.head.parameters(), not every parameter.": dict(clamp_all=True),
    "the forward runs in float32: wrap the forward and loss in torch.autocast('cpu', dtype=torch.bfloat16).":
        dict(autocast=False),
}

AMP_HINTS = {
    "clip-before-unscale": "call scaler.unscale_(optimizer) before clip_grad_norm_, then scaler.step(optimizer).",
    "data-bypass": "clamp the parameter itself under torch.no_grad() (p.clamp_(...)), not through p.data.",
    "grad-not-cleared": "call optimizer.zero_grad() at the start of the step.",
    "raised:No inf checks": "step with scaler.step(optimizer) (not optimizer.step()) before scaler.update().",
    "raised:_scale is None": "backward the scaled loss: scaler.scale(loss).backward().",
}


def _amp_setup(seed: int):
    def make(step):
        torch.manual_seed(seed)
        model = TinyConvNet()
        optimizer = torch.optim.SGD(model.parameters(), lr=CONV_LR, momentum=CONV_MOMENTUM)
        scaler = torch.amp.GradScaler("cpu")
        return model, partial(step, model, optimizer, scaler)

    return make


def check_amp_step(amp_step) -> None:
    """Check the repaired AMP step of case 1 (see the exercise for the exact recipe).

    >>> check_amp_step(reference_amp_step)  # doctest: +ELLIPSIS
    ✓ amp_step: doctor silent, ...
    """
    name = "amp_step"
    if not callable(amp_step):
        raise ExerciseError(f"`{name}` should be a function, but it is a {type(amp_step).__name__}.")
    data = batches_of(*stripes(384, seed=3), 32)
    torch.manual_seed(0)
    model = TinyConvNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=CONV_LR, momentum=CONV_MOMENTUM)
    scaler = torch.amp.GradScaler("cpu")
    step = partial(amp_step, model, optimizer, scaler)
    _doctor_clean(step, model, optimizer, data[:5], name, AMP_HINTS, scaler=scaler)
    if scaler.state_dict().get("_growth_tracker", 0) != 5:
        raise ExerciseError(
            f"`{name}` does not use the GradScaler it is given: scale the loss (scaler.scale(loss).backward()), "
            "then scaler.unscale_, scaler.step(optimizer) and scaler.update() once per step."
        )
    if _scaler_steps(amp_step, data[3]) != 1:
        raise ExerciseError(
            f"`{name}` calls optimizer.step() itself: step through scaler.step(optimizer), which skips the update "
            "when the gradients hold inf/NaN (optimizer.step() would write them into the weights)."
        )
    for seed in (0, 1):
        make = _amp_setup(seed)
        expected = _params_after(reference_amp_step, make, data[:6], seed)
        mistakes = {hint: partial(_params_after, _amp_variant(**kw), make, data[:6], seed)
                    for hint, kw in AMP_MISTAKES.items()}
        learner_model, run = make(amp_step)
        torch.manual_seed(seed)
        for batch in data[:6]:
            call_learner(run, (batch,), name, "the checker's batches")
        _compare_params(learner_model, expected, mistakes, name, f"6 steps (seed {seed})")
    losses = [_loss_value(step(b), name) for b in data[5:] + data[:6]]
    first, last = _check_loss_falls(losses, name)
    worst = max(float(p.detach().abs().max()) for p in model.head.parameters())
    if worst > HEAD_LIMIT + 1e-6:
        raise ExerciseError(f"the head's parameters reach |{worst:.3g}| > {HEAD_LIMIT:g}: clamp them after the step.")
    passed(f"{name}: doctor silent, same parameters as the reference after 6 steps (2 seeds), "
           f"loss {first:.3f} → {last:.3f}")


# --------------------------------------------------------------------------- exercise 3: registered scales


LAYER_SCALE_HINTS = {
    "param-not-in-optimizer": "a Python list hides its Parameters from model.parameters(), so the optimizer never "
                              "sees them: keep them in nn.ParameterList.",
}


def _layer_scale_forward(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    layers = list(model.layers)
    for i, (layer, scale) in enumerate(zip(layers, model.scales)):
        x = layer(x) * scale
        if i < len(layers) - 1:
            x = torch.relu(x)
    return x


def check_layer_scale_mlp(cls) -> None:
    """Check ``LayerScaleMLP(sizes)``: one trainable scale per layer output, registered with the model.

    >>> class Good(nn.Module):
    ...     def __init__(self, sizes):
    ...         super().__init__()
    ...         self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))
    ...         self.scales = nn.ParameterList(nn.Parameter(torch.ones(b)) for b in sizes[1:])
    ...     def forward(self, x):
    ...         return _layer_scale_forward(self, x)
    >>> check_layer_scale_mlp(Good)  # doctest: +ELLIPSIS
    ✓ LayerScaleMLP: ...
    """
    name = "LayerScaleMLP"
    for sizes in [(6, 16, 3), (6, 7, 5, 3)]:
        torch.manual_seed(0)
        model = call_learner(cls, (list(sizes),), name, f"{name}({list(sizes)})")
        scales = getattr(model, "scales", None)
        if scales is None or len(scales) != len(sizes) - 1:
            raise ExerciseError(f"`{name}({list(sizes)})` should have `self.scales` with one scale per layer "
                                f"({len(sizes) - 1}), found {None if scales is None else len(scales)}.")
        for i, (scale, width) in enumerate(zip(scales, sizes[1:])):
            if not isinstance(scale, torch.Tensor) or tuple(scale.shape) != (width,):
                raise ExerciseError(f"scale {i} should be a tensor of shape ({width},), one factor per output "
                                    f"feature; got {getattr(scale, 'shape', type(scale).__name__)}.")
            if not torch.equal(scale.detach(), torch.ones(width)):
                raise ExerciseError(f"scale {i} should start at ones (the layer's output unchanged).")
            if not scale.requires_grad:
                raise ExerciseError(f"scale {i} does not require grad, so it cannot be trained: wrap it in "
                                    "nn.Parameter (buffers and plain tensors are not trained).")
        registered = {id(p) for p in model.parameters()}
        if not all(id(s) in registered for s in scales):
            raise ExerciseError(
                f"the scales are not in model.parameters() of `{name}({list(sizes)})`.\n"
                f"Hint: {LAYER_SCALE_HINTS['param-not-in-optimizer']}"
            )
        x, y = blobs(10, seed=len(sizes))
        out = call_learner(model, (x,), f"{name}.forward", "10 points")
        compare(out, _layer_scale_forward(model, x), what=f"`{name}` output", label="10 points")
    torch.manual_seed(0)
    model = cls([6, 16, 3])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = batches_of(*blobs(320, seed=5), 16)
    step = partial(reference_train_step, model, optimizer)
    _doctor_clean(step, model, optimizer, data[:3], name, LAYER_SCALE_HINTS)
    losses = [float(step(b)) for b in data[3:]]
    first, last = _check_loss_falls(losses, name)
    moved = [float((s.detach() - 1).abs().max()) for s in model.scales]
    if min(moved) == 0:
        raise ExerciseError("a scale did not change during training: is it trained by the optimizer?")
    passed(f"{name}: scales registered and trained, doctor silent, loss {first:.3f} → {last:.3f}")


# --------------------------------------------------------------------------- exercise 4: the training step


def _validation_then(step: Callable, model: nn.Module, optimizer, val_x: torch.Tensor) -> Callable:
    """A step preceded by a validation pass, as in a loop that validates every step."""

    def run(batch):
        model.eval()
        with torch.no_grad():
            model(val_x)
        return step(model, optimizer, batch)

    return run


TRAIN_STEP_HINTS = {
    "eval-mode-in-training": "validation left the model in eval mode: call model.train() at the start of the step.",
    "grad-not-cleared": "call optimizer.zero_grad() once per step.",
}


def _train_variant(train: bool = True, detach: bool = True, zero_grad: bool = True):
    def step(model, optimizer, batch):
        x, y = batch
        if train:
            model.train()
        if zero_grad:
            optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach() if detach else loss

    return step


def _train_setup(seed: int, val_x: torch.Tensor):
    def make(step):
        model = mlp_with_dropout_and_bn(seed)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        return model, _validation_then(step, model, optimizer, val_x)

    return make


def check_train_step(train_step) -> None:
    """Check a step ``train_step(model, optimizer, batch)`` that survives validation and logs safely.

    >>> check_train_step(reference_train_step)  # doctest: +ELLIPSIS
    ✓ train_step: ...
    """
    name = "train_step"
    if not callable(train_step):
        raise ExerciseError(f"`{name}` should be a function, but it is a {type(train_step).__name__}.")
    val_x, _ = blobs(64, seed=99)
    data = batches_of(*blobs(480, seed=11), 16)
    model = mlp_with_dropout_and_bn(0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    run = _validation_then(train_step, model, optimizer, val_x)
    torch.manual_seed(0)
    _doctor_clean(run, model, optimizer, data[:3], name, TRAIN_STEP_HINTS)
    out = call_learner(run, (data[3],), name, "a batch after validation")
    if isinstance(out, torch.Tensor) and out.grad_fn is not None:
        raise ExerciseError(
            f"`{name}` returns the loss with its autograd graph attached.\nHint: whoever logs it keeps that graph "
            "(and, for a loss not backpropagated, every activation) alive: return loss.detach() or loss.item()."
        )
    _loss_value(out, name)
    for seed in (0, 1):
        make = _train_setup(seed, val_x)
        expected = _params_after(reference_train_step, make, data[:4], seed)
        mistakes = {
            "the model trains in eval mode after validation: call model.train() first.":
                partial(_params_after, _train_variant(train=False), make, data[:4], seed),
        }
        learner_model, learner_run = make(train_step)
        torch.manual_seed(seed)
        for batch in data[:4]:
            call_learner(learner_run, (batch,), name, "the checker's batches")
        _compare_params(learner_model, expected, mistakes, name, f"4 steps (seed {seed})")
    torch.manual_seed(1)
    losses = [_loss_value(run(b), name) for b in data[4:]]
    first, last = _check_loss_falls(losses, name)
    passed(f"{name}: doctor silent after validation passes, returns a plain loss, same parameters as the "
           f"reference (2 seeds), loss {first:.3f} → {last:.3f}")
