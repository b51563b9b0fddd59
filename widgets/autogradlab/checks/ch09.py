"""Checkers for chapter 09 (when the model does not learn): a diagnosis measured by hand before the doctor
confirms it, a repaired forward, a repaired mixed-precision step, and a graph walk that finds what the
optimizer cannot see.

The case studies' data, model and reference step live in :mod:`autogradlab.models.debug_cases`; every call
of the learner's code goes through :class:`~autogradlab.checks.core.LearnerCall`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import replace
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from autogradlab.checks.core import (
    BY_HAND,
    ExerciseError,
    LearnerCall,
    Mistake,
    OffLimits,
    close,
    compare,
    mistakes,
    passed,
)
from autogradlab.checks.stateful import run_variants, variants
from autogradlab.i18n import N_, _, said
from autogradlab.models.debug_cases import (
    CLIP_NORM,
    HEAD_LIMIT,
    VISITS,
    TinyConvNet,
    batches_of,
    conv_setup,
    leaf_cases,
    reference_amp_step,
    stripes,
)
from autogradlab.models.doctor import diagnose
from autogradlab.torch_internals import SCALER_GROWTH_TRACKER_KEY
from autogradlab.tracebacks import error_kind

CASE_DATA = "autogradlab.models.debug_cases"

# fmt: off
_MEASURE_HINTS = {
    "no_grad_1": N_("measure it: read every parameter's .grad after one call of the step."),
    "overwritten_1": N_("measure it: remember each parameter right after optimizer.step() (optimizer.register_step_post_hook) and compare it with its value when the step returns."),
}
_CONVNET_HINTS = {  # mistake id: hint
    "wrong-dim": N_("normalise each example's feature vector: the norm is over dim=1 (keepdim=True)."),
    "not-normalised": N_("the features are not normalised: divide each example's features by their L2 norm."),
    "no-keepdim": N_("the norm must keep its dimension (keepdim=True) so each row is divided by its own norm."),
    "no-squeeze": N_("the logits need shape (N,): squeeze the head's last dimension, .squeeze(1)."),
    "data-write": N_("the logits are right but the gradients skip the normalisation: a write through `.data` hides the division from autograd. Normalise out of place (f / f.norm(...))."),
    "no-gradient": N_("the path from the features to the loss is cut: the log may be detached, the computation not."),
    "no-log": N_("keep what self.features(x) returns, as a snapshot, in self.logged."),
    "log-with-graph": N_("cut it from the graph (detach) before storing."),
    "log-normalised": N_("log what self.features(x) returns, before the normalisation."),
    "log-is-a-view": N_("detach() is not a copy: it returns a view of the same storage, with the same version counter, so a later in-place change of the features (a `.data` write included) changes the log too."),
}
AMP_SLIP_HINTS = {  # the variants of the reference step: slip -> hint
    "no-clip": N_("the gradients are not clipped: after scaler.unscale_(optimizer), clip them to norm {clip}."),
    "always-rescale": N_("the gradients are always rescaled to norm {clip}: clip_grad_norm_ only shrinks gradients whose norm is above the threshold and leaves the others alone."),
    "no-clamp": N_("the head is not kept in [-{limit:g}, {limit:g}]: after the step, clamp model.head's parameters under torch.no_grad()."),
    "clamp-all": N_("only the head is constrained: clamp model.head.parameters(), not every parameter."),
    "fp32": N_("the forward runs in float32: the step is meant for fp16 autocast, torch.autocast('cpu', dtype=torch.float16)."),
    "bf16": N_("the forward runs in bf16: the step is meant for fp16 autocast (the one that needs the GradScaler)."),
    "stale-grads": N_("your step used gradients that were already in .grad when it started (the checker leaves some there, as a validation pass that called backward would): clear them before backward."),
}
AMP_HINTS = {  # by the doctor's code
    "clip-before-unscale": N_("clip the true gradients: scaler.unscale_(optimizer) first, then clip_grad_norm_ (chapter 08, clipping under a GradScaler)."),
    "data-bypass": N_("clamp the parameter itself under torch.no_grad() (p.clamp_(...)), not through p.data."),
    "update-undone": N_("the clamp after the step puts the head back where it was: is the bound {limit:g}?"),
    "grad-not-cleared": N_("call optimizer.zero_grad() at the start of the step."),
}
AMP_CONTRACT_HINTS = {  # the step's contract, checked outside the doctor
    "batch-changed": N_("an in-place op on x or y (`x -= ...`) writes into the caller's tensor; use `x = x - ...`."),
    "loss-with-graph": N_("return loss.detach() or loss.item()."),
    "no-scaler": N_("scale the loss (scaler.scale(loss).backward()), then scaler.unscale_, scaler.step(optimizer) and scaler.update() once per step."),
    "optimizer-step": N_("step through scaler.step(optimizer): it skips the update when the unscaled gradients are not finite."),
    "counts-skipped": N_("it counts steps the GradScaler skipped (it lowers the scale in update() then); count an update only when the optimizer really stepped."),
    "misses-updates": N_("it misses real updates: the scale also stays or grows when a step is applied (it grows after growth_interval clean steps); a skipped step is the only one that lowers it; count an update only when the optimizer really stepped."),
    "no-clamp": N_("clamp them after the step."),
}
AMP_ERROR_HINTS = {  # by the kind of error the step raised (autogradlab.tracebacks.ERROR_KINDS)
    "scaler_no_inf_checks": N_("step with scaler.step(optimizer) (not optimizer.step()) before scaler.update()."),
    "scaler_never_scaled": N_("backward the scaled loss: scaler.scale(loss).backward()."),
}
FORWARD_ERROR_HINTS = {
    "stale": N_("an in-place normalisation (`f /= ...`) overwrites the tensor norm() saved for backward; normalise out of place (and do not detach to silence the error)."),
}
LEAF_ERROR_HINTS = {  # by the kind of error the learner's walk raised (autogradlab.tracebacks.ERROR_KINDS)
    "recursion": N_("a recursive walk needs one Python frame per node, and graphs are often thousands of nodes deep: walk with a stack (a list you push next_functions onto) and a loop."),
    "none_value": N_("next_functions holds (None, 0) for an input that needs no gradient (a constant factor): skip those."),
    "ambiguous_bool": N_("`t in list_of_tensors` compares values element by element; compare identities instead, e.g. a set of id(p) for p in model.parameters()."),
    "size_mismatch": N_("`t in list_of_tensors` compares values element by element (and fails on different shapes); compare identities instead, e.g. a set of id(p) for p in model.parameters()."),
}
LEAF_MISTAKES = {  # the slips of a returned list, by mistake id
    "names": N_("return the tensors themselves (AccumulateGrad nodes hold them in `.variable`), not their names."),
    "duplicates": N_("a tensor used twice in the forward has one AccumulateGrad node reached along two paths: keep a set of the nodes (or tensors) you have seen."),
    "registered": N_("those are the ones the optimizer does see; leave them out."),
    "not-in-graph": N_("a tensor kept in the model but never used by the forward is not in the loss's graph, so backward gives it nothing: walk the graph from loss.grad_fn, not the model's attributes."),
    "no-grad-tensor": N_("a tensor that does not require grad is no leaf of the graph and gets no gradient."),
    "missed": N_("every leaf of the graph that requires grad and is not registered counts, wherever it lives: in a list or dict of the model, or outside it (an input that requires grad); follow every next_functions entry, skipping the (None, 0) ones."),
    "no-visited-set": N_("your walk visits a node once per path to it, and h = h * w + h doubles the paths at every step: keep a set of the nodes you have seen and skip them."),
}
#: the checks' words, by key (a slip's own id where it has one); {clip} and {limit} are CLIP_NORM and HEAD_LIMIT
SAID = {
    "doctor": N_("the doctor still reports {code} at {where}"),
    "doctor-also": N_("the doctor still reports {code} at {where} (also: {others})"),
    "no-fall": N_("the doctor is silent, but the loss does not fall with `{name}`: mean of the first {k} steps {first:.4f}, of the last {k} steps {last:.4f} (expected below {factor:g}× the start)."),
    "names-type": N_("`{variable}` should be a list of parameter names as `model.named_parameters()` gives them (e.g. ['head.bias']), got {value!r}."),
    "no-hypothesis": N_("Write your hypothesis first: a sentence in `hypothesis_1` (six words at least), what you think is wrong and why it gives this symptom."),
    "case-step": N_("the step case_1 returns"),
    "no-symptom": N_("`case_1` no longer shows the symptom: run its cell again as the chapter gives it."),
    "measured-wrong": N_("`{variable}` does not match what the checker measures on a fresh case_1 ({got} name(s) given, {want} measured)."),
    "case-passed": N_("your measurements match: no gradient for {no_grad}, overwritten after the step: {overwritten}. The doctor's view of case_1, as confirmation:"),
    "no-log": N_("`{name}` should keep the features in `self.logged` (a tensor); found {type} for {label}."),
    "log-with-graph": N_("`self.logged` requires grad for {label}: the log holds the features' graph, and with it every saved activation of the step, for as long as it is kept."),
    "log-normalised": N_("`self.logged` holds the normalised features for {label}."),
    "log-is-a-view": N_("`self.logged` shares its memory with the features for {label}."),
    "logged-what": N_("`self.logged`"),
    "not-a-subclass": N_("`{name}` should subclass TinyConvNet (keep `class {name}(TinyConvNet):`)."),
    "batch-label": N_("a batch of {n} image(s) in {dtype} (seed {seed})"),
    "logits-what": N_("`{name}` logits"),
    "features-once": N_("`{name}.forward` should run self.features once per call; it ran {n} times."),
    "backward-fails": N_("backward through `{name}` fails for {label}: {error}"),
    "no-gradient": N_("`{param}` gets no gradient through `{name}` for {label}."),
    "gradient-what": N_("the gradient of `{param}`"),
    "convnet-passed": N_("{name}: same logits and gradients as the reference on {n} inputs, a snapshot in self.logged; doctor silent; loss {first:.3f} → {last:.3f}"),
    "batch-changed": N_("`amp_step` changed the batch it was given in place: the caller may still use it."),
    "high-scaler": N_("a GradScaler that starts at 2**24 and grows every 2 steps"),
    "first-batch": N_("the checker's first batch"),
    "batches": N_("the checker's batches"),
    "loss-with-graph": N_("`{name}` returns the loss with its graph: whoever logs it keeps every saved activation of the step alive."),
    "loss-type": N_("`{name}` should return the loss (a number or a 1-element tensor)."),
    "no-scaler": N_("`{name}` does not use the GradScaler it is given."),
    "optimizer-step": N_("`{name}` applied an update in a step the GradScaler skipped (calls {calls}): the gradients held inf/NaN, and the optimizer wrote them into the weights."),
    "six-steps": N_("6 steps (seed {seed})"),
    "params-differ": N_("the parameters after 6 steps (seed {seed}) with `{name}` differ from the reference."),
    "param-what": N_("`{key}` after 6 steps (seed {seed})"),
    "count-wrong": N_("`{name}` counted {counted!r} updates in {calls} calls where the optimizer really stepped {ran} times (a GradScaler that starts at 2**24 skips its first steps; with growth_interval=2 it then grows)."),
    "no-clamp": N_("the head's parameters reach |{worst:.3g}| > {limit:g}."),
    "amp-passed": N_("{name}: doctor silent, same parameters as the reference after 6 steps (2 seeds, stale gradients present before the first), {ran} real updates of 10 counted right, loss {first:.3f} → {last:.3f}"),
    "leaves-type": N_("`{name}` should return a list of tensors for {label}, got {type}."),
    "leaves-wrong": N_("`{name}` returned {n} item(s) for {label}; {want} tensor(s) are expected, each once."),
    "leaves-passed": N_("{name}: the right tensors, each once, for {n} graphs (lists, dicts, shared tensors, an input, a graph after backward, 3,000 ops deep, 2^30 paths), walked by hand"),
}
FORWARD_WHY = N_("write the forward yourself (TinyConvNet.forward is the course's answer); self.features and self.head are yours.")
AMP_WHY = N_("write the step yourself (reference_amp_step is the checker's answer).")
LEAVES_WHY = N_("walk loss.grad_fn yourself (chapter 01): backward, the doctor's graph walk and capture() are the course's answer.")
# fmt: on


_said = partial(said, SAID, clip=CLIP_NORM, limit=HEAD_LIMIT)


def _hint(table: dict, key: str) -> str:
    return _(table[key]).format(clip=CLIP_NORM, limit=HEAD_LIMIT)


def _named(mistake: str, table: dict, kind: str = "contract", **values) -> ExerciseError:
    """The error for the slip ``mistake``: summary ``SAID[mistake]`` filled in with ``values``, hint from ``table``."""
    return ExerciseError(kind, _said(mistake, **values), hint=_hint(table, mistake), mistake=mistake)


def _doctor_silent(step: Callable, model, optimizer, batches, hints: dict, scaler=None) -> None:
    """Run the doctor on ``step`` (which calls the learner's code through a LearnerCall); the learner's own error,
    or the first error or warning the doctor reports (``mistake`` = its code, ``hint`` = this exercise's hint for
    it), is raised."""
    raised: list[ExerciseError] = []

    def observed(batch):
        try:
            return step(batch)
        except ExerciseError as error:
            raised.append(error)
            raise

    report = diagnose(observed, model, optimizer, batches, scaler=scaler)
    if raised:
        raise raised[0]
    bad = report.errors + report.warnings
    if bad:
        first, others = bad[0], ", ".join(sorted({f.code for f in bad} - {bad[0].code}))
        summary = _said("doctor-also" if others else "doctor", code=first.code, where=first.where, others=others)
        hint = _hint(hints, first.code) if first.code in hints else first.fix
        raise ExerciseError("doctor", summary, detail=first.message, hint=hint, mistake=first.code)


def _loss_falls(losses: list[float], name: str, factor: float = 0.8) -> tuple[float, float]:
    k = max(1, len(losses) // 4)
    first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
    if not all(math.isfinite(v) for v in losses) or not last < factor * first:
        summary = _said("no-fall", name=name, k=k, first=first, last=last, factor=factor)
        raise ExerciseError("contract", summary, measured={"first": first, "last": last})
    return first, last


# --------------------------------------------------------------------------- exercise 1: case 1 by hand


def _measure_case(case: Callable) -> tuple[set[str], set[str]]:
    """(parameters without a gradient, parameters a write after optimizer.step() changed) over two calls."""
    step, model, optimizer = case()
    step, params = LearnerCall(step, _said("case-step"), frozen_inputs=False), dict(model.named_parameters())
    names = {id(p): n for n, p in params.items()}
    after_step: dict[str, torch.Tensor] = {}

    def remember(opt, args, kwargs):
        after_step.update({names[id(p)]: p.detach().clone() for g in opt.param_groups for p in g["params"]})

    no_grad, overwritten = set(), set()
    with optimizer.register_step_post_hook(remember):
        for batch in batches_of(*stripes(64, seed=0), 32):
            step(batch)
            no_grad |= {n for n, p in params.items() if p.grad is None}
            overwritten |= {n for n, p in params.items() if n in after_step and not torch.equal(p, after_step[n])}
    return no_grad, overwritten


def _names(value: Any, variable: str) -> set[str]:
    if isinstance(value, str) or not isinstance(value, Iterable) or not all(isinstance(v, str) for v in value):
        raise ExerciseError("type", _said("names-type", variable=variable, value=value))
    return set(value)


def check_case_1(case_1, hypothesis: Any, no_grad: Any, overwritten: Any):
    """Check the measurements of case 1 against the checker's own, then show the doctor's view of the case.

    ``case_1()`` returns ``(step, model, optimizer)``, fresh; ``no_grad`` names the parameters whose ``.grad``
    stays None over a step, ``overwritten`` those whose value at the end of the step is not the one
    ``optimizer.step()`` gave them.
    """
    if not isinstance(hypothesis, str) or len(hypothesis.split()) < 6:
        raise ExerciseError("contract", _said("no-hypothesis"), mistake="no-hypothesis")
    case = LearnerCall(case_1, "case_1", frozen_inputs=False)
    want_no_grad, want_overwritten = _measure_case(case)
    if not want_no_grad and not want_overwritten:
        raise ExerciseError("contract", _said("no-symptom"))
    for variable, got, want in (("no_grad_1", no_grad, want_no_grad), ("overwritten_1", overwritten, want_overwritten)):
        got = _names(got, variable)
        if got != want:
            summary = _said("measured-wrong", variable=variable, got=len(got), want=len(want))
            raise ExerciseError("value", summary, hint=_hint(_MEASURE_HINTS, variable), mistake=f"{variable}-wrong")
    passed(_said("case-passed", no_grad=sorted(want_no_grad), overwritten=sorted(want_overwritten)))
    step, model, optimizer = case()
    return diagnose(step, model, optimizer, batches_of(*stripes(96, seed=0), 32))


# --------------------------------------------------------------------------- exercise 1: the repaired forward

FORWARD_MISTAKES = mistakes(  # each computes the slip's features from the right ones, f
    _CONVNET_HINTS,
    {
        "wrong-dim": lambda f: f / (f.norm(dim=0, keepdim=True) + 1e-6),
        "not-normalised": lambda f: f,
        "no-keepdim": lambda f: f / (f.norm() + 1e-6),
    },
)
NO_SQUEEZE, DATA_WRITE = (Mistake(slip, _CONVNET_HINTS[slip]) for slip in ("no-squeeze", "data-write"))


def _same_shape(got: Any, expected: torch.Tensor) -> bool:
    return isinstance(got, torch.Tensor) and got.shape == expected.shape


def _check_logged(model: nn.Module, features: torch.Tensor, values: torch.Tensor, name: str, label: str) -> None:
    """`model.logged` must be a snapshot of the features: same ``values``, no graph, its own storage."""
    logged = getattr(model, "logged", None)
    if not isinstance(logged, torch.Tensor):
        raise _named("no-log", _CONVNET_HINTS, name=name, type=type(logged).__name__, label=label)
    if logged.requires_grad:
        raise _named("log-with-graph", _CONVNET_HINTS, label=label)
    if logged.shape == values.shape and close(logged, F.normalize(values, dim=1)) and not close(logged, values):
        raise _named("log-normalised", _CONVNET_HINTS, "value", label=label)
    compare(logged, values, what=_said("logged-what"), label=label)
    if logged.untyped_storage().data_ptr() == features.untyped_storage().data_ptr():
        raise _named("log-is-a-view", _CONVNET_HINTS, label=label)


def check_repaired_convnet(cls) -> None:
    """Check a ``TinyConvNet`` subclass whose ``forward`` gives the reference's logits and gradients, keeps a
    snapshot of the features in ``self.logged``, and trains with the doctor silent.

    >>> class Fixed(TinyConvNet):
    ...     def forward(self, x):
    ...         f = self.features(x)
    ...         self.logged = f.detach().clone()
    ...         return self.head(f / (f.norm(dim=1, keepdim=True) + 1e-6)).squeeze(1)
    >>> check_repaired_convnet(Fixed)  # doctest: +ELLIPSIS
    ✓ RepairedConvNet: same logits and gradients as the reference ...
    """
    name, hints = "RepairedConvNet", FORWARD_ERROR_HINTS
    off_limits = OffLimits(course=(CASE_DATA,), why=FORWARD_WHY)
    cases = [(0, 6, torch.float32), (1, 1, torch.float32), (2, 5, torch.float64)]
    for seed, n, dtype in cases:
        torch.manual_seed(seed)
        model = LearnerCall(cls, name, frozen_inputs=False).on(f"{name}()")()
        if not isinstance(model, TinyConvNet):
            raise ExerciseError("type", _said("not-a-subclass", name=name))
        model = model.to(dtype)
        reference = TinyConvNet().to(dtype)
        reference.load_state_dict(model.state_dict())
        x, y = (t.to(dtype) for t in stripes(n, seed=seed))
        label = _said("batch-label", n=n, dtype=str(dtype)[6:], seed=seed)
        captured = []  # the features (for their storage) and their values before the forward may change them
        with model.features.register_forward_hook(
            lambda m, a, out, log=captured: log.append((out, out.detach().clone()))
        ):
            out = LearnerCall(model, f"{name}.forward", off_limits, hints).on(label)(x)
        f = reference.features(x)
        accepted = (reference(x), reference.head(f / (f.norm(dim=1, keepdim=True) + 1e-6)).squeeze(1))
        got = out.detach() if isinstance(out, torch.Tensor) else out
        expected = min(accepted, key=lambda e: float((got - e.detach()).abs().max()) if _same_shape(got, e) else 1e9)
        wrong = {m: reference.head(m.compute(f)).squeeze(1).detach() for m in FORWARD_MISTAKES}
        wrong[NO_SQUEEZE] = expected.detach().unsqueeze(1)
        compare(got, expected.detach(), what=_said("logits-what", name=name), label=label, mistakes=wrong)
        if len(captured) != 1:
            raise ExerciseError("contract", _said("features-once", name=name, n=len(captured)))
        params = list(model.parameters())
        try:
            loss = F.binary_cross_entropy_with_logits(out, y)
            grads = torch.autograd.grad(loss, params, allow_unused=True) if out.grad_fn else [None] * len(params)
        except RuntimeError as exc:
            summary = _said("backward-fails", name=name, label=label, error=exc)
            raise ExerciseError("raised", summary, hint=hints.get(error_kind(exc)), mistake=error_kind(exc)) from None
        straight_through = reference.head(f + (F.normalize(f, dim=1) - f).detach()).squeeze(1)  # `f.data /= ...`
        ref_params, bce = list(reference.parameters()), F.binary_cross_entropy_with_logits
        expected_grads = torch.autograd.grad(bce(expected, y), ref_params, retain_graph=True)
        data_grads = torch.autograd.grad(bce(straight_through, y), ref_params, retain_graph=True)
        for pname, g, rg, dg in zip(dict(model.named_parameters()), grads, expected_grads, data_grads):
            if g is None:
                raise _named("no-gradient", _CONVNET_HINTS, param=pname, name=name, label=label)
            compare(g, rg, what=_said("gradient-what", param=pname), label=label, mistakes={DATA_WRITE: dg})
        _check_logged(model, *captured[0], name, label)
    model, optimizer = conv_setup(0, cls)
    scaler, data = torch.amp.GradScaler("cpu"), batches_of(*stripes(384, seed=7), 32)
    step = LearnerCall(partial(reference_amp_step, model, optimizer, scaler, counter={"updates": 0}), name)
    _doctor_silent(step, model, optimizer, data[:3], {}, scaler=scaler)
    first, last = _loss_falls([float(step(b)) for b in data[3:] + data[:6]], name)
    passed(_said("convnet-passed", name=name, n=len(cases), first=first, last=last))


# --------------------------------------------------------------------------- exercise 2: the AMP step


def _amp_variant(slip: str):
    """The reference step with the slip ``slip`` (a key of :data:`AMP_SLIP_HINTS`)."""
    autocast = {"fp32": None, "bf16": torch.bfloat16}.get(slip, torch.float16)

    def step(model, optimizer, scaler, batch, counter):
        x, y = batch
        if slip != "stale-grads":
            optimizer.zero_grad()
        with torch.autocast("cpu", dtype=autocast or torch.float16, enabled=autocast is not None):
            loss = F.binary_cross_entropy_with_logits(model(x).float(), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        if slip == "always-rescale":  # always scales the gradient to norm CLIP_NORM
            norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
            for p in model.parameters():
                p.grad.mul_(CLIP_NORM / norm)
        elif slip != "no-clip":
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
        scaler.step(optimizer)
        scaler.update()
        if slip != "no-clamp":
            with torch.no_grad():
                for p in model.parameters() if slip == "clamp-all" else model.head.parameters():
                    p.clamp_(-HEAD_LIMIT, HEAD_LIMIT)
        if slip == "stale-grads":
            optimizer.zero_grad()
        return loss.detach()

    return step


AMP_VARIANTS = variants(_amp_variant, AMP_SLIP_HINTS)


def _one_step(learner: LearnerCall, model, optimizer, scaler, batch, counter) -> Any:
    """One call of the learner's step on copies of ``batch``; a batch changed in place is reported."""
    x, y = batch[0].clone(), batch[1].clone()
    out = learner(model, optimizer, scaler, (x, y), counter)
    if not (torch.equal(x, batch[0]) and torch.equal(y, batch[1])):
        raise _named("batch-changed", AMP_CONTRACT_HINTS, "changed-input")
    return out


def _count_updates(learner: LearnerCall, data) -> tuple[int, int, list[int]]:
    """(the learner's count, the optimizer steps that really ran, the calls in which the optimizer stepped although
    the GradScaler skipped) for a scaler that starts far too high (its first steps overflow in fp16 and are skipped)
    and grows every 2 clean steps."""
    model, optimizer = conv_setup(0)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**24, growth_interval=2)
    ran, counter, skipped_but_stepped = [], {"updates": 0}, []
    call = learner.on(_said("high-scaler"))
    with optimizer.register_step_post_hook(lambda *args: ran.append(1)):
        for i, batch in enumerate(data):
            before, stepped = scaler.get_scale(), len(ran)
            _one_step(call, model, optimizer, scaler, batch, counter)
            if scaler.get_scale() < before and len(ran) > stepped:
                skipped_but_stepped.append(i)
    return counter.get("updates"), len(ran), skipped_but_stepped


def check_amp_step(amp_step) -> None:
    """Check the repaired AMP step of case 1 (see the exercise for its contract).

    >>> check_amp_step(reference_amp_step)  # doctest: +ELLIPSIS
    ✓ amp_step: doctor silent, ...
    """
    name, off_limits = "amp_step", OffLimits(course=(CASE_DATA,), why=AMP_WHY)
    learner = LearnerCall(amp_step, name, off_limits, AMP_ERROR_HINTS, frozen_inputs=False)
    data = batches_of(*stripes(384, seed=3), 32)
    (model, optimizer), scaler = conv_setup(0), torch.amp.GradScaler("cpu")
    first = _one_step(learner.on(_said("first-batch")), model, optimizer, scaler, data[0], {"updates": 0})
    if isinstance(first, torch.Tensor) and first.requires_grad:
        raise _named("loss-with-graph", AMP_CONTRACT_HINTS, name=name)
    if not (isinstance(first, (int, float)) or (isinstance(first, torch.Tensor) and first.numel() == 1)):
        raise ExerciseError("type", _said("loss-type", name=name))
    (model, optimizer), scaler = conv_setup(0), torch.amp.GradScaler("cpu")
    step = partial(_one_step, learner.on(_said("batches")), model, optimizer, scaler, counter={"updates": 0})
    _doctor_silent(step, model, optimizer, data[:5], AMP_HINTS, scaler=scaler)
    if scaler.state_dict().get(SCALER_GROWTH_TRACKER_KEY, 0) != 5:
        raise _named("no-scaler", AMP_CONTRACT_HINTS, name=name)
    counted, ran, stepped_on_skip = _count_updates(learner, data[:10])
    if stepped_on_skip:
        raise _named("optimizer-step", AMP_CONTRACT_HINTS, name=name, calls=stepped_on_skip)
    for seed in (0, 1):

        def run(one, seed=seed):
            """Six steps from the same seeded setup, with stale gradients; the parameters they leave."""
            model, optimizer = conv_setup(seed)
            for p in model.parameters():
                p.grad = torch.full_like(p, 0.5)
            scaler, counter = torch.amp.GradScaler("cpu"), {"updates": 0}
            torch.manual_seed(seed)
            for batch in data[:6]:
                one(model, optimizer, scaler, batch, counter)
            return {k: p.detach().clone() for k, p in model.named_parameters()}

        runs = run_variants(run, learner.on(_said("six-steps", seed=seed)), reference_amp_step, AMP_VARIANTS)
        if not _same_params(runs.learner, runs.reference):
            if slip := runs.closest(_same_params):
                summary = _said("params-differ", seed=seed, name=name)
                raise ExerciseError("value", summary, hint=_hint(AMP_SLIP_HINTS, slip.name), mistake=slip.name)
            for key, value in runs.reference.items():
                compare(runs.learner[key], value, what=_said("param-what", key=key, seed=seed), label=_said("batches"))
    if counted != ran:
        mistake = "counts-skipped" if isinstance(counted, int) and counted > ran else "misses-updates"
        summary = _said("count-wrong", name=name, counted=counted, calls=len(data[:10]), ran=ran)
        hint, measured = _hint(AMP_CONTRACT_HINTS, mistake), {"counted": counted, "ran": ran}
        raise ExerciseError("value", summary, hint=hint, mistake=mistake, measured=measured)
    losses = [float(step(b)) for b in data[5:] + data[:6]]
    first, last = _loss_falls(losses, name)
    worst = max(float(p.detach().abs().max()) for p in model.head.parameters())
    if worst > HEAD_LIMIT + 1e-6:
        raise _named("no-clamp", AMP_CONTRACT_HINTS, worst=worst)
    passed(_said("amp-passed", name=name, ran=ran, first=first, last=last))


def _same_params(got: dict, want: dict) -> bool:
    return all(close(got[k], v, after_steps=True) for k, v in want.items())


# --------------------------------------------------------------------------- exercise 3: what the optimizer misses


def check_untrained_leaves(untrained_leaves) -> None:
    """Check ``untrained_leaves(model, loss)``: the tensors backward would give a gradient that are not in
    ``model.parameters()``, each once, found by walking the graph by hand.

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
    name, hints = "untrained_leaves", LEAF_ERROR_HINTS
    off_limits = replace(BY_HAND, course=("autogradlab.models.doctor", "autogradlab.graph"), why=LEAVES_WHY)
    cases = leaf_cases()
    for label, build in cases:
        model, loss, expected = build()
        VISITS.update(reads=0, limit=20 * model.depth if getattr(model, "residual", False) else None)
        try:
            got = LearnerCall(untrained_leaves, name, off_limits, hints).on(label)(model, loss)
        except ExerciseError as error:
            if VISITS["limit"] is not None and VISITS["reads"] > VISITS["limit"]:
                hint = _hint(LEAF_MISTAKES, "no-visited-set")
                raise error.but(kind="contract", hint=hint, mistake="no-visited-set") from None
            raise
        finally:
            VISITS["limit"] = None
        if isinstance(got, torch.Tensor) or not isinstance(got, (list, tuple, set, frozenset)):
            raise ExerciseError("type", _said("leaves-type", name=name, label=label, type=type(got)))
        items = list(got)
        ids = [id(t) for t in items]
        registered, want = {id(p) for p in model.parameters()}, {id(t) for t in expected}
        extra = [t for t in items if isinstance(t, torch.Tensor) and id(t) not in want]
        slips = {
            "names": any(isinstance(t, str) for t in items),
            "type": not all(isinstance(t, torch.Tensor) for t in items),
            "duplicates": len(set(ids)) != len(ids),
            "registered": any(i in registered for i in ids),
            "not-in-graph": any(t.requires_grad for t in extra),
            "no-grad-tensor": bool(extra),
            "missed": not want <= set(ids),
        }
        slip = next((m for m, happened in slips.items() if happened), None)
        if slip is not None:
            kind = {"names": "type", "type": "type", "duplicates": "contract"}.get(slip, "value")
            summary = _said("leaves-wrong", name=name, n=len(items), label=label, want=len(want))
            hint = _hint(LEAF_MISTAKES, slip) if slip in LEAF_MISTAKES else None
            raise ExerciseError(kind, summary, hint=hint, mistake=slip if slip != "type" else None)
    passed(_said("leaves-passed", name=name, n=len(cases)))
