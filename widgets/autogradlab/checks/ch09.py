"""Checkers for chapter 09 (when the model does not learn): repaired steps judged by the doctor, and a
graph walk that finds what the optimizer cannot see.

The repair checkers run the learner's model or step through
:func:`autogradlab.models.doctor.diagnose` (no error or warning may remain), compare the
parameters after a few steps with a reference step (so a step that is silent but
computes something else does not pass), and train long enough to see the loss fall.

The small data sets and models of the chapter's case studies live here too, so the
notebook and its checkers train exactly the same things.

>>> x, y = stripes(4)
>>> tuple(x.shape), tuple(y.shape)
((4, 1, 12, 12), (4,))
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from autogradlab.checks.core import ExerciseError, call_learner, compare, passed
from autogradlab.models.doctor import diagnose
from autogradlab.torch_internals import SCALER_GROWTH_TRACKER_KEY
from autogradlab.tracebacks import hint_for, is_kind

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


# The AMP step of case 1: constants the exercise states.
CONV_LR, CONV_MOMENTUM = 0.5, 0.9
# Measured: the true gradient norms of TinyConvNet in the checker's first steps lie between
# 0.11 and 0.19, so this clip is active in some steps and not in others.
CLIP_NORM = 0.15
HEAD_LIMIT = 0.4  # the head's weights pass 0.4 within the first steps, so the clamp is active too


def reference_amp_step(
    model: nn.Module, optimizer, scaler, batch, counter: dict, head_limit: float = HEAD_LIMIT
) -> torch.Tensor:
    """Case 1's step done right: fp16 autocast, scale → backward → unscale_ → clip → step → update, the head
    constraint written under no_grad (``head_limit`` lets the chapter put its wrong bound back), and
    ``counter["updates"]`` advanced only for an update the optimizer really applied."""
    x, y = batch
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.binary_cross_entropy_with_logits(model(x).float(), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
    scale = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    if scaler.get_scale() >= scale:  # update() lowers the scale exactly when step() was skipped
        counter["updates"] += 1
    with torch.no_grad():
        for p in model.head.parameters():
            p.clamp_(-head_limit, head_limit)
    return loss.detach()


# --------------------------------------------------------------------------- shared checking

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH_ROOT = os.path.dirname(os.path.abspath(torch.__file__))


@contextlib.contextmanager
def course_calls() -> Iterator[list[str]]:
    """Record every function of the autogradlab package called from outside the package while active.

    A learner's answer that calls a course helper (the doctor's graph walk, a reference
    step, the class being repaired) does not do the exercise. Only calls made directly
    from outside both the package and torch are recorded: the package calling itself, and
    torch calling the package (a module's forward, a hook), are not.

    >>> from autogradlab.models.doctor import graph_leaves
    >>> w = torch.ones(1, requires_grad=True)
    >>> with course_calls() as seen:
    ...     _ = graph_leaves(w * 2)
    >>> seen
    ['autogradlab.models.doctor.observe.graph_leaves']
    """
    seen: list[str] = []
    previous = sys.getprofile()

    def inside(filename: str, root: str = _PACKAGE_ROOT) -> bool:
        return os.path.abspath(filename).startswith(root + os.sep)

    def profile(frame, event, arg) -> None:
        if event != "call" or frame.f_code is _OWN_CODE or not inside(frame.f_code.co_filename):
            return
        caller = frame.f_back
        if (
            caller is not None
            and not inside(caller.f_code.co_filename)
            and not inside(caller.f_code.co_filename, _TORCH_ROOT)
        ):
            module = frame.f_globals.get("__name__", "?")
            name = f"{module}.{frame.f_code.co_qualname}"
            if name not in seen:
                seen.append(name)

    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(previous)


_OWN_CODE = course_calls.__wrapped__.__code__  # resumed by contextlib on exit: not a learner's call


def _call_without_helpers(fn: Callable, args: tuple, name: str, label: str, why: str, **kw: Any) -> Any:
    """call_learner, then reject an answer that called into the course's package."""
    with course_calls() as seen:
        result = call_learner(fn, args, name, label, **kw)
    helpers = [s for s in seen if not s.startswith("autogradlab.checks.core.")]
    if helpers:
        raise ExerciseError(f"`{name}` calls the course's own code ({', '.join(helpers)}) for {label}.\nHint: {why}")
    return result


def _loss_value(out: Any, name: str) -> float:
    if isinstance(out, torch.Tensor) and out.numel() == 1:
        return float(out.detach())
    if isinstance(out, (int, float)) and not isinstance(out, bool):
        return float(out)
    raise ExerciseError(
        f"`{name}` should return the loss (a number or a 1-element tensor), but it returned {type(out).__name__}."
    )


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
        hint = next(
            (h for text, h in hints.items() if text.startswith("raised:") and text[7:] in finding.message), None
        )
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


def _compare_params(
    model: nn.Module, expected: dict[str, torch.Tensor], mistakes: dict[str, Callable[[], dict]], name: str, label: str
) -> None:
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


def _stale_grads(model: nn.Module) -> None:
    """Gradients left over from elsewhere (a validation pass that called backward, say)."""
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.5)


def _params_after(step: Callable, make: Callable, batches, seed: int) -> dict[str, torch.Tensor]:
    model, run = make(step)
    _stale_grads(model)
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
        if is_kind(error, "stale"):
            raise ExerciseError(
                f"backward through `{name}` fails: {str(error).splitlines()[0]}\nHint: an in-place normalisation "
                "(`f /= f.norm(...)`) overwrites the tensor that norm() saved for backward; normalise out of place "
                "(and do not detach to silence the error)."
            ) from None
        raise ExerciseError(f"backward through `{name}` fails: {error}") from None


CONVNET_MISTAKES = {
    "normalise each example's feature vector: the norm is over the features, dim=1 (keepdim=True).": lambda f: (
        f / (f.norm(dim=0, keepdim=True) + 1e-6)
    ),
    "the features are not normalised: divide each example's features by their L2 norm.": lambda f: f,
    "the norm must keep its dimension (keepdim=True) so each row is divided by its own norm.": lambda f: (
        f / (f.norm() + 1e-6)
    ),
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


def _check_logged(model: nn.Module, features: torch.Tensor, values: torch.Tensor, name: str, label: str) -> None:
    """`model.logged` must be a snapshot of the features: same ``values``, no graph, its own storage."""
    logged = getattr(model, "logged", None)
    if not isinstance(logged, torch.Tensor):
        raise ExerciseError(
            f"`{name}` should keep the features for logging in `self.logged` (a tensor); found "
            f"{type(logged).__name__} for {label}."
        )
    if logged.requires_grad:
        raise ExerciseError(
            f"`self.logged` requires grad for {label}: the log holds the features' graph, and with it every saved "
            "activation of the step, for as long as it is kept.\nHint: cut it from the graph (detach) before storing."
        )
    if (
        logged.shape == values.shape
        and torch.allclose(logged.double(), F.normalize(values, dim=1).double(), rtol=1e-4, atol=1e-6)
        and not torch.allclose(logged.double(), values.double(), rtol=1e-4, atol=1e-6)
    ):
        raise ExerciseError(
            f"`self.logged` holds the normalised features for {label}.\nHint: log what "
            "self.features(x) returns, before the normalisation."
        )
    compare(logged, values, what="`self.logged`", label=label)
    if logged.untyped_storage().data_ptr() == features.untyped_storage().data_ptr():
        raise ExerciseError(
            f"`self.logged` shares its memory with the features for {label}.\nHint: detach() is not a copy: it "
            "returns a view of the same storage, with the same version counter, so any later in-place change of "
            "the features changes the log too. A snapshot is .detach().clone()."
        )


def check_repaired_convnet(cls) -> None:
    """Check a ``TinyConvNet`` subclass whose ``forward`` gives the same logits as the reference, keeps a
    snapshot of the features in ``self.logged``, lets a gradient reach every parameter, and trains
    under the doctor.

    >>> class Fixed(TinyConvNet):
    ...     def forward(self, x):
    ...         f = self.features(x)
    ...         self.logged = f.detach().clone()
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
        captured = []
        # the output itself (for its storage) and its values now (the forward may change it in place later)
        handle = model.features.register_forward_hook(lambda m, args, out: captured.append((out, out.detach().clone())))
        try:
            out = _call_without_helpers(
                model,
                (x,),
                f"{name}.forward",
                label,
                "write the forward yourself (TinyConvNet.forward is the course's version of the answer); "
                "self.features and self.head are yours to call.",
            )
        finally:
            handle.remove()
        expected = _closest(out, [reference(x), _with_eps(reference, x)])
        out_values = out.detach() if isinstance(out, torch.Tensor) else out
        with torch.no_grad():
            feats = reference.features(x)
            wrong = {hint: reference.head(fn(feats)).squeeze(1) for hint, fn in CONVNET_MISTAKES.items()}
        wrong["the logits need shape (N,): squeeze the head's last dimension, .squeeze(1)."] = expected.unsqueeze(1)
        compare(out_values, expected.detach(), what=f"`{name}` logits", label=label, mistakes=wrong)
        if out.grad_fn is None:
            raise ExerciseError(f"the logits of `{name}` do not require grad: nothing can be trained.")
        if len(captured) != 1:
            raise ExerciseError(
                f"`{name}.forward` should run self.features once per call; it ran {len(captured)} time(s) for {label}."
            )
        grads = _bce_grads(model, out, y, name)
        ref_grads = torch.autograd.grad(
            F.binary_cross_entropy_with_logits(expected, y.to(dtype)), list(reference.parameters())
        )
        for (pname, _), g, rg in zip(model.named_parameters(), grads, ref_grads):
            if g is None:
                raise ExerciseError(
                    f"`{pname}` gets no gradient through `{name}` for {label}.\nHint: the path from the features to "
                    "the loss is cut: the log may be detached, the computation must not be."
                )
            compare(g, rg, what=f"the gradient of `{pname}`", label=label)
        _check_logged(model, *captured[0], name, label)
    torch.manual_seed(0)
    model = cls()
    optimizer = torch.optim.SGD(model.parameters(), lr=CONV_LR, momentum=CONV_MOMENTUM)
    scaler = torch.amp.GradScaler("cpu")
    data = batches_of(*stripes(384, seed=7), 32)
    step = partial(reference_amp_step, model, optimizer, scaler, counter={"updates": 0})
    _doctor_clean(
        step,
        model,
        optimizer,
        data[:3],
        name,
        {
            "missing-grad": "the conv layers get no gradient: do not detach the features you compute with.",
        },
        scaler=scaler,
    )
    losses = [float(step(b)) for b in data[3:] + data[:6]]
    first, last = _check_loss_falls(losses, name)
    passed(
        f"{name}: same logits and gradients as the reference on {len(cases)} inputs, a snapshot in "
        f"self.logged; doctor silent; loss {first:.3f} → {last:.3f}"
    )


# --------------------------------------------------------------------------- exercise 2: the AMP step


def _amp_variant(
    clip: str = "after",
    clamp: str = "head",
    autocast: torch.dtype | None = torch.float16,
    zero_grad: str = "start",
    bound: float = HEAD_LIMIT,
):
    def step(model, optimizer, scaler, batch, counter):
        x, y = batch
        if zero_grad == "start":
            optimizer.zero_grad()
        with torch.autocast("cpu", dtype=autocast or torch.float16, enabled=autocast is not None):
            loss = F.binary_cross_entropy_with_logits(model(x).float(), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        if clip == "after":
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
        elif clip == "rescale":  # always scales the gradient to norm CLIP_NORM
            norm = torch.sqrt(sum((p.grad.float() ** 2).sum() for p in model.parameters()))
            for p in model.parameters():
                p.grad.mul_(CLIP_NORM / norm)
        scaler.step(optimizer)
        scaler.update()
        counter["updates"] += 1
        if clamp != "none":
            with torch.no_grad():
                for p in model.parameters() if clamp == "all" else model.head.parameters():
                    p.clamp_(-bound, bound)
        if zero_grad == "end":
            optimizer.zero_grad()
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
    call_learner(amp_step, (model, optimizer, scaler, batch, {"updates": 0}), "amp_step", "one batch")
    return len(calls)


def _updates_counted(amp_step: Callable, data) -> tuple[int, int, int]:
    """(the learner's count, the optimizer steps that really ran, the calls) for a GradScaler that starts
    far too high, so that its first steps overflow in fp16 and are skipped while the loss stays finite."""
    torch.manual_seed(0)
    model = TinyConvNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=CONV_LR, momentum=CONV_MOMENTUM)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**24)
    ran = []
    handle = optimizer.register_step_post_hook(lambda *args: ran.append(1))
    counter = {"updates": 0}
    try:
        for batch in data:
            call_learner(
                amp_step, (model, optimizer, scaler, batch, counter), "amp_step", "a GradScaler that starts at 2**24"
            )
    finally:
        handle.remove()
    return counter.get("updates"), len(ran), len(data)


AMP_MISTAKES = {
    f"the gradients are not clipped: after scaler.unscale_(optimizer), clip them to norm {CLIP_NORM}.": dict(
        clip="none"
    ),
    f"the gradients are always rescaled to norm {CLIP_NORM}: clipping (clip_grad_norm_) only shrinks gradients "
    "whose norm is above the threshold and leaves the others alone.": dict(clip="rescale"),
    f"the head is not kept in [-{HEAD_LIMIT:g}, {HEAD_LIMIT:g}]: after the step, clamp model.head's parameters "
    "under torch.no_grad().": dict(clamp="none"),
    "only the head is constrained: clamp model.head.parameters(), not every parameter.": dict(clamp="all"),
    "the forward runs in float32: the step is meant for fp16 autocast, torch.autocast('cpu', dtype=torch.float16).": dict(
        autocast=None
    ),
    "the forward runs in bf16: the step is meant for fp16 autocast (the one that needs the GradScaler), "
    "torch.autocast('cpu', dtype=torch.float16).": dict(autocast=torch.bfloat16),
    "your step used gradients that were already in .grad when it started (the checker leaves some there, as a "
    "validation pass that called backward would): clear them at the start of the step, before backward.": dict(
        zero_grad="end"
    ),
}

AMP_HINTS = {
    "clip-before-unscale": "call scaler.unscale_(optimizer) before clip_grad_norm_, then scaler.step(optimizer).",
    "data-bypass": "clamp the parameter itself under torch.no_grad() (p.clamp_(...)), not through p.data.",
    "update-undone": f"the clamp after the step puts the head back where it was: is the bound {HEAD_LIMIT:g}? "
    "(4 // 10 is integer division: 0).",
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
        return model, partial(step, model, optimizer, scaler, counter={"updates": 0})

    return make


def check_amp_step(amp_step) -> None:
    """Check the repaired AMP step of case 1 (see the exercise for its contract).

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
    step = partial(amp_step, model, optimizer, scaler, counter={"updates": 0})
    _doctor_clean(step, model, optimizer, data[:5], name, AMP_HINTS, scaler=scaler)
    if scaler.state_dict().get(SCALER_GROWTH_TRACKER_KEY, 0) != 5:
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
        mistakes = {
            hint: partial(_params_after, _amp_variant(**kw), make, data[:6], seed) for hint, kw in AMP_MISTAKES.items()
        }
        learner_model, run = make(amp_step)
        _stale_grads(learner_model)
        torch.manual_seed(seed)
        for batch in data[:6]:
            x, y = batch[0].clone(), batch[1].clone()
            _call_without_helpers(
                run,
                ((x, y),),
                name,
                "the checker's batches",
                "write the step yourself (reference_amp_step is the checker's answer).",
            )
            if not (torch.equal(x, batch[0]) and torch.equal(y, batch[1])):
                raise ExerciseError(f"`{name}` changed the batch it was given in place: the caller may still use it.")
        _compare_params(learner_model, expected, mistakes, name, f"6 steps (seed {seed})")
    counted, ran, calls = _updates_counted(amp_step, data[:8])
    if counted != ran:
        why = (
            (
                "it counts steps the GradScaler skipped: the scaler skips when the scaled *gradients* hold inf/NaN, "
                "even with a finite loss, and then lowers the scale in update(); count an update only when the scale "
                "did not go down (or when optimizer.step() really ran)."
            )
            if counted == calls
            else "count exactly the updates the optimizer applied, one per real optimizer step."
        )
        raise ExerciseError(
            f"`{name}` counted {counted!r} updates in {calls} calls where the optimizer really stepped "
            f"{ran} times (a GradScaler starting at 2**24 skips the first steps).\nHint: {why}"
        )
    losses = [_loss_value(step(b), name) for b in data[5:] + data[:6]]
    first, last = _check_loss_falls(losses, name)
    worst = max(float(p.detach().abs().max()) for p in model.head.parameters())
    if worst > HEAD_LIMIT + 1e-6:
        raise ExerciseError(f"the head's parameters reach |{worst:.3g}| > {HEAD_LIMIT:g}: clamp them after the step.")
    passed(
        f"{name}: doctor silent, same parameters as the reference after 6 steps (2 seeds, stale gradients "
        f"present before the first), {ran} real updates of {calls} counted right, loss {first:.3f} → {last:.3f}"
    )


# --------------------------------------------------------------------------- exercise 3: what the optimizer misses


class _Scaled(nn.Module):
    """Linear layers, each output multiplied by a scale kept in ``holder`` (a list, a dict, or registered)."""

    def __init__(self, sizes, holder: str = "list", parameter: bool = True, unused: bool = False):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))
        make = nn.Parameter if parameter else (lambda t: t.requires_grad_())
        scales = [make(torch.ones(b)) for b in sizes[1:]]
        if unused:
            scales.append(make(torch.ones(3)))  # kept, never used in forward: not in the graph
        if holder == "registered":
            self.scales = nn.ParameterList(scales)
        elif holder == "dict":
            self.scales = {f"s{i}": s for i, s in enumerate(scales)}
        else:
            self.scales = scales
        self.mask = torch.ones(sizes[-1])  # a constant factor: (None, 0) in next_functions

    def forward(self, x):
        scales = list(self.scales.values()) if isinstance(self.scales, dict) else list(self.scales)
        for i, layer in enumerate(self.layers):
            x = layer(x) * scales[i]
            if i < len(self.layers) - 1:
                x = torch.relu(x)
        return x * self.mask


class _Tied(nn.Module):
    """A weight used twice and a hidden gate used twice; a frozen weight; a frozen hidden tensor."""

    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(4, 4)
        self.frozen = nn.Linear(4, 4).requires_grad_(False)
        self.extras = [torch.ones(4, requires_grad=True), torch.full((4,), 2.0)]  # [hidden gate, constant]

    def forward(self, x):
        gate, constant = self.extras
        h = torch.tanh(self.inner(x) * gate)
        h = self.frozen(h) * constant
        return self.inner(h) * gate


class _Deep(nn.Module):
    """Thousands of small ops in a chain, with a hidden scale used at every one."""

    def __init__(self, depth: int = 3000):
        super().__init__()
        self.depth = depth
        self.first = nn.Linear(3, 3)
        self.hidden = [torch.full((3,), 0.999, requires_grad=True)]

    def forward(self, x):
        h = self.first(x)
        for _ in range(self.depth):
            h = h * self.hidden[0]
        return h


def _leaf_cases() -> list[tuple[str, Callable[[], tuple[nn.Module, torch.Tensor, list[torch.Tensor]]]]]:
    """(label, build) pairs; build() returns (model, loss, the tensors the answer must hold)."""

    def scaled(holder, parameter, unused=False, after_backward=False):
        def build():
            torch.manual_seed(0)
            model = _Scaled([6, 8, 3], holder, parameter, unused)
            x, y = blobs(10, seed=1)
            loss = F.cross_entropy(model(x), y)
            if after_backward:
                loss.backward()
            hidden = (
                []
                if holder == "registered"
                else (list(model.scales.values()) if holder == "dict" else list(model.scales))[:2]
            )
            return model, loss, hidden

        return build

    def tied():
        torch.manual_seed(0)
        model = _Tied()
        x = torch.randn(5, 4, requires_grad=True)  # an input that asks for a gradient: a leaf too
        return model, model(x).pow(2).mean(), [model.extras[0], x]

    def deep():
        torch.manual_seed(0)
        model = _Deep()
        return model, model(torch.randn(2, 3)).sum(), [model.hidden[0]]

    return [
        ("nn.Parameters in a Python list (a constant factor in the graph too)", scaled("list", True)),
        ("plain tensors that require grad, in a dict", scaled("dict", False)),
        ("scales registered in nn.ParameterList (nothing hidden)", scaled("registered", True)),
        ("a hidden list that also holds a tensor the forward never uses", scaled("list", True, unused=True)),
        (
            "the same model after loss.backward() (the graph's structure survives)",
            scaled("list", True, after_backward=True),
        ),
        ("a weight and a gate each used twice, a frozen layer, an input that requires grad", tied),
        ("a chain 3,000 ops deep", deep),
    ]


def _as_tensor_list(got: Any, name: str, label: str) -> list[torch.Tensor]:
    if isinstance(got, torch.Tensor) or not isinstance(got, (list, tuple, set, frozenset)):
        raise ExerciseError(f"`{name}` should return a list of tensors for {label}, got {type(got).__name__}.")
    items = list(got)
    strings = [i for i in items if isinstance(i, str)]
    if strings:
        raise ExerciseError(
            f"`{name}` returned names ({strings[0]!r}, ...) for {label}.\nHint: return the tensors "
            "themselves (AccumulateGrad nodes hold them in `.variable`), not their names."
        )
    if not all(isinstance(i, torch.Tensor) for i in items):
        raise ExerciseError(
            f"`{name}` should return tensors, got {sorted({type(i).__name__ for i in items})} for {label}."
        )
    return items


LEAF_ERROR_HINTS = {  # by the kind of error the learner's walk raised (autogradlab.tracebacks.ERROR_KINDS)
    "recursion": "a recursive walk needs one Python frame per node, and graphs are often thousands of nodes "
    "deep: walk with a stack (a list you push next_functions onto) and a loop.",
    "none_value": "next_functions holds (None, 0) for an input that needs no gradient "
    "(a constant factor): skip those entries.",
    "ambiguous_bool": "`t in list_of_tensors` compares values element by element; compare identities "
    "instead, e.g. a set of id(p) for p in model.parameters().",
    "size_mismatch": "`t in list_of_tensors` compares values element by element (and fails on "
    "different shapes); compare identities instead, e.g. a set of id(p) for p in "
    "model.parameters().",
}


def check_untrained_leaves(untrained_leaves) -> None:
    """Check ``untrained_leaves(model, loss)``: the tensors backward would give a gradient that are not in
    ``model.parameters()``, found by walking the graph by hand.

    >>> def reference(model, loss):
    ...     registered = {id(p) for p in model.parameters()}
    ...     found, seen, stack = [], set(), [loss.grad_fn]
    ...     while stack:
    ...         node = stack.pop()
    ...         if node is None or node in seen:
    ...             continue
    ...         seen.add(node)
    ...         leaf = getattr(node, "variable", None)
    ...         if leaf is not None and id(leaf) not in registered:
    ...             found.append(leaf)
    ...         stack.extend(nxt for nxt, _ in node.next_functions)
    ...     return found
    >>> check_untrained_leaves(reference)  # doctest: +ELLIPSIS
    ✓ untrained_leaves: ...
    """
    name = "untrained_leaves"
    if not callable(untrained_leaves):
        raise ExerciseError(f"`{name}` should be a function, but it is a {type(untrained_leaves).__name__}.")
    cases = _leaf_cases()
    for label, build in cases:
        model, loss, expected = build()
        try:
            got = _call_without_helpers(
                untrained_leaves,
                (model, loss),
                name,
                label,
                "walk loss.grad_fn yourself (chapter 01): the doctor's graph walk and capture() are the course's "
                "answer.",
                no_autograd=True,
            )
        except ExerciseError as error:
            hint = hint_for(str(error), LEAF_ERROR_HINTS)
            if hint and "Hint:" not in str(error):
                raise ExerciseError(f"{error}\nHint: {hint}") from None
            raise
        items = _as_tensor_list(got, name, label)
        ids = [id(t) for t in items]
        if len(set(ids)) != len(ids):
            raise ExerciseError(
                f"`{name}` returned the same tensor more than once for {label}.\nHint: a tensor used "
                "twice in the forward has one AccumulateGrad node reached along two paths: keep a "
                "set of the nodes (or tensors) you have seen."
            )
        registered = {id(p) for p in model.parameters()}
        if any(i in registered for i in ids):
            raise ExerciseError(
                f"`{name}` returned tensors that are in model.parameters() for {label}.\nHint: those "
                "are the ones the optimizer does see; leave them out."
            )
        want = {id(t) for t in expected}
        extra = [t for t in items if id(t) not in want]
        missing = [t for t in expected if id(t) not in set(ids)]
        if extra:
            why = (
                (
                    "a tensor kept in the model but never used by the forward is not in the loss's graph, so backward "
                    "gives it nothing: walk the graph from loss.grad_fn, not the model's attributes"
                )
                if any(t.requires_grad for t in extra)
                else "a tensor that does not require grad is no leaf of the graph and gets no gradient"
            )
            raise ExerciseError(
                f"`{name}` returned {len(extra)} tensor(s) too many for {label} (shapes "
                f"{[tuple(t.shape) for t in extra]}).\nHint: {why}."
            )
        if missing:
            raise ExerciseError(
                f"`{name}` missed {len(missing)} tensor(s) for {label} (shapes {[tuple(t.shape) for t in missing]})."
                "\nHint: every leaf of the graph that requires grad and is not registered counts, wherever it lives: "
                "in a list or dict of the model, or outside it (an input that requires grad); follow every "
                "next_functions entry, skipping the (None, 0) ones."
            )
    passed(
        f"{name}: the right tensors, each once, for {len(cases)} graphs (lists, dicts, shared tensors, an "
        "input, a graph after backward, 3,000 ops deep), walked by hand"
    )
