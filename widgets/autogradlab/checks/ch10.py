"""Checkers for chapter 10 (debugging lab): overfit one batch, chart a batch's dependencies, and the lab's
mysteries (the lab part is shared with chapter 12).

A mystery is judged by behaviour, never by its text (:mod:`autogradlab.models.mysteries.record`): the
learner's file must reproduce the healthy reference's gradients and losses, and leave everything outside
the bug as shipped (the data the model sees, the parameters it starts from, the optimizer, the learning
rates, the loss scale). Hints escalate with failed attempts (the symptom, which tool, where), the last two
only once :func:`note` holds a hypothesis and its evidence; :func:`doctor_view` opens then too, and
:func:`debrief` once the check has passed.
"""

from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from autogradlab.checks.core import ExerciseError, LearnerCall, OffLimits, close, compare, mistakes, passed
from autogradlab.i18n import N_, _, said
from autogradlab.models.doctor import Report, diagnose
from autogradlab.models.four_checks import (
    Normed,
    PerExample,
    PerStep,
    SmallClassifier,
    TimeMean,
    clusters,
    dependencies,
    overfit,
)
from autogradlab.models.mysteries import MYSTERIES, Recording, fixed, load, original, record
from autogradlab.models.mysteries.record import KEEP_GRADS, common_factor, first_difference

# fmt: off
_OVERFIT_HINTS = {
    "eval-mode": N_("the copy's batch norm ran in eval mode: put the copy in training mode (copy.train()) whatever mode the caller's model is in."),
    "optimizer-on-original": N_("the optimizer was built on the original model's parameters, so it never moves the copy: build it from the copy's parameters."),
    "no-zero-grad": N_("gradients accumulate across steps: clear them every step (optimizer.zero_grad())."),
    "new-optimizer": N_("a new Adam every step forgets its moments (and restarts its bias correction): build the optimizer once."),
    "loss-after-update": N_("each loss should come from the step's own forward, before its update."),
    "sgd": N_("the losses match plain SGD: the contract asks for torch.optim.Adam(lr=lr)."),
}
_CALLER = {  # mistake "changed-<part>" (the part of the caller's model a function changed) -> hint
    "changed-parameters": N_("train a copy (copy.deepcopy(model)) and build the optimizer from its parameters (copy.copy shares them)."),
    "changed-grad": N_("the gradients belong to the copy: an optimizer on model.parameters() clears and steps the caller's."),
    "changed-buffers": N_("run the forward passes on the copy only (batch norm updates its statistics in training mode)."),
    "changed-mode": N_("set the mode on the copy only."),
}
_DEPENDENCY_HINTS = {
    "sum": N_("a sum of outputs can cancel (a softmax row sums to 1, so its gradient is 0): take the gradient of every output element (or the Jacobian) and the norm over them."),
    "transposed": N_("D[i, j] is the dependency of example i's *output* on example j's *input*: rows are outputs."),
    "abs-sum": N_("use the Frobenius norm (square root of the sum of squares) of the Jacobian block, not a sum of absolute values."),
    "eval-copy": N_("keep the model's mode: in training mode batch norm mixes examples, and that is what D must show."),
    "diagonal-only": N_("only the diagonal: a per-example computation (vmap, or the model run on one example at a time) cannot see what mixes examples; run the model on the whole batch."),
    "changed-mode": N_("keep the model's mode: in training mode batch norm mixes examples."),
    "changed-grad": N_("ask for the gradient with respect to the input only, torch.autograd.grad(output, x_copy), which does not touch the parameters' .grad."),
    "x-requires-grad": N_("work on a copy, x.detach().clone().requires_grad_()."),
}
_OUTSIDE_HINTS = {  # mistake id: hint, for a change where the shipped script and the reference agree
    "data": N_("a fix leaves the data, its order and the batch size as shipped."),
    "start": N_("another architecture or initialisation can move the symptom without removing its cause. A fix leaves the model as shipped."),
    "model": N_("a fix leaves the forward as shipped."),
    "optimizer": N_("a fix leaves the optimizer and its settings as shipped."),
    "loss-scale": N_("the loss scale changes how fast or how big, not why: changing it chases the symptom. Put it back and look for the cause."),
    "learning-rate": N_("a learning rate changes how fast or how big, not why: changing it chases the symptom. Put it back and look for the cause."),
    "smaller-gradients": N_("clipping or rescaling the loss changes their size, not their direction: if you added either to move the loss, that chases the symptom."),
    "larger-gradients": N_("clipping or rescaling the loss changes their size, not their direction: if you added either to move the loss, that chases the symptom."),
    "structure": N_("keep the script's structure: a Config dataclass with a seed, and a Trainer whose fit(log) returns one loss per optimizer step."),
    "tensors": N_("a list of loss tensors keeps every step's graph alive."),
}
#: the checks' words, by key
SAID = {
    "overfit-label": N_("a batch of {n} points, the model in {mode} mode (seed {seed})"),
    "changed": N_("`{name}` changed the model's {part} for {label}."),
    "not-a-list": N_("`{name}` should return a list of 60 losses (one per step) for {label}; got {type}."),
    "not-a-list-length": N_("`{name}` should return a list of 60 losses (one per step) for {label}; got {type} of length {n}."),
    "tensors": N_("`{name}` should return Python floats (loss.item()) for {label}."),
    "losses-what": N_("the losses of `{name}`"),
    "overfit-passed": N_("{name}: the reference losses on {n} batches (caller's model in eval and in train mode, left untouched); the healthy model reaches loss {loss:.2g} on one batch"),
    "x-requires-grad": N_("`{name}` set requires_grad (or .grad) on the x it was given for {label}."),
    "dependencies-passed": N_("{name}: exact dependency norms on {n} models ({mixing} mix examples, {separate} do not); model, parameters' .grad and x left as they were"),
    "no-hypothesis": N_("Write your hypothesis for mystery {number} first: a sentence (six words at least) saying what you think is wrong and why it gives this symptom."),
    "no-evidence": N_("The evidence for mystery {number} has no measured number. Write what you ran and what it gave (a loss, a gradient norm, a fraction, a count)."),
    "noted": N_("mystery {number}: hypothesis and evidence noted; the doctor's view and the later hints are open"),
    "no-note": N_("The doctor's view of mystery {number} opens once your hypothesis and evidence are on record: note({number}, hypothesis, evidence)."),
    "not-solved": N_("The debrief of mystery {number} opens once its check passes."),
    "no-script": N_("No script at {path} for mystery {number}: unpack({number}) writes it."),
    "three-batches": N_("its first three batches"),
    "data": N_("The model in `{name}` sees other batches than the shipped one."),
    "start": N_("The model in `{name}` starts from other parameters (names, shapes or values) than the shipped one."),
    "model": N_("The model in `{name}` computes something else than the shipped one from the same parameters on the same batch."),
    "setting": N_("`{name}` changed the {what}: {got} instead of {want}."),
    "lr-at": N_("step {k} uses {lr:.3g}"),
    "lr-steps": N_("{steps} optimizer steps"),
    "learning-rate": N_("`{name}` changed the learning rate: {shown} where the shipped script does not."),
    "unchanged": N_("`{name}` still behaves as shipped: the same learning rates and gradients in its first {n} steps."),
    "lr-of": N_("step {k}: {lr:.3g}"),
    "lr-steps-not": N_("{steps} steps, not {want}"),
    "lr-differs": N_("The learning rates of `{name}` differ from the healthy script's ({shown})."),
    "scaled-gradients": N_("The gradients of step {k} in `{name}` point the same way as the healthy script's but are {c:.3g}× as large."),
    "gradients": N_("The gradients of step {k} in `{name}` differ from the healthy script's."),
    "losses": N_("`{name}` starts with the healthy gradients, but its {n} losses drift from the healthy script's {want}."),
    "ladder": N_("{hint} Next: {extra}"),
    "ladder-locked": N_("{extra} The next hint opens once your hypothesis and evidence are on record: note({number}, ...)."),
    "structure": N_("`{name}` has no {missing}."),
    "import": N_("import"),
    "seed": N_("seed {seed}"),
    "fix-passed": N_("mystery {number}: `{name}` behaves like the healthy script on 2 seeds (the same gradients in the first steps, the same losses); the data, the model's start, the optimizer and its learning rates are as shipped"),
}
OWN_WHY = N_("write it yourself: the course's version is the checker's answer.")
# fmt: on


_said = partial(said, SAID)


def _named(mistake: str, table: dict, kind: str = "contract", said: str | None = None, **values) -> ExerciseError:
    """The error for the slip ``mistake``: summary ``SAID[said or mistake]`` filled in with ``values``, hint from ``table``."""
    return ExerciseError(kind, _said(said or mistake, **values), hint=table[mistake], mistake=mistake)


_OWN_LOOP = OffLimits(course=("autogradlab.models.four_checks",), why=OWN_WHY)


# --------------------------------------------------------------------------- exercise 1: overfit one batch


def _overfit_slip(slip: str):
    def run(model, loss_fn, batch, steps=100, lr=1e-2):
        copied = copy.deepcopy(model).train(slip != "eval-mode")
        params = (model if slip == "optimizer-on-original" else copied).parameters()
        optimizer = torch.optim.SGD(params, lr=lr) if slip == "sgd" else torch.optim.Adam(params, lr=lr)
        losses = []
        for _step in range(steps):
            if slip == "new-optimizer":
                optimizer = torch.optim.Adam(copied.parameters(), lr=lr)
            if slip != "no-zero-grad":
                optimizer.zero_grad()
            loss = loss_fn(copied(batch[0]), batch[1])
            loss.backward()
            optimizer.step()
            if slip == "loss-after-update":
                with torch.no_grad():
                    loss = loss_fn(copied(batch[0]), batch[1])
            losses.append(loss.item())
        return torch.tensor(losses)

    return run


OVERFIT_MISTAKES = mistakes(_OVERFIT_HINTS, {slip: _overfit_slip(slip) for slip in _OVERFIT_HINTS})


def _state(model: torch.nn.Module) -> dict[str, list]:
    params = list(model.parameters())
    return {
        "parameters": [p.detach().clone() for p in params],
        "grad": [None if p.grad is None else p.grad.clone() for p in params],
        "buffers": [b.clone() for b in model.buffers()],
        "mode": [m.training for m in model.modules()],
    }


def _changed(before: dict[str, list], model: torch.nn.Module) -> str | None:
    """The first part of the model's state that is not exactly as ``before``, or None."""

    def same(a, b) -> bool:
        return a is b if a is None or b is None else a == b if isinstance(a, bool) else torch.equal(a, b)

    return next((part for part, now in _state(model).items() if not all(map(same, before[part], now))), None)


def check_overfit_one_batch(overfit_one_batch) -> None:
    """Check ``overfit_one_batch(model, loss_fn, batch, steps, lr)`` against the exercise's contract."""
    name = "overfit_one_batch"
    learner = LearnerCall(overfit_one_batch, name, _OWN_LOOP)
    cases = [(0, 8, "eval"), (1, 5, "train")]
    for seed, n, mode in cases:
        torch.manual_seed(seed)
        model = SmallClassifier().train(mode == "train")
        x, y = clusters(n, seed=seed + 10)
        model(x).sum().backward()  # the caller's model holds gradients of its own
        label = _said("overfit-label", n=n, mode=mode, seed=seed)
        before = _state(model)
        expected = torch.tensor(overfit(model, F.cross_entropy, (x, y), 60, 2e-2))
        got = learner.on(label)(model, F.cross_entropy, (x, y), 60, 2e-2)
        if part := _changed(before, model):
            raise _named(f"changed-{part}", _CALLER, said="changed", name=name, part=part, label=label)
        if not isinstance(got, (list, tuple)) or len(got) != 60:
            said, n = ("not-a-list-length", len(got)) if hasattr(got, "__len__") else ("not-a-list", 0)
            summary = _said(said, name=name, label=label, type=type(got).__name__, n=n)
            raise ExerciseError("type", summary, mistake="length")
        if not all(isinstance(v, float) for v in got):
            raise _named("tensors", _OUTSIDE_HINTS, "type", name=name, label=label)
        if not close(torch.tensor(got), expected):
            wrong = {m: m.compute(copy.deepcopy(model), F.cross_entropy, (x, y), 60, 2e-2) for m in OVERFIT_MISTAKES}
            compare(torch.tensor(got), expected, what=_said("losses-what", name=name), label=label, mistakes=wrong)
    passed(_said("overfit-passed", name=name, n=len(cases), loss=float(expected[-1])))


# --------------------------------------------------------------------------- exercise 2: batch dependencies

_DEPENDENCY_CASES = [  # (label, model, input shape, training mode)
    (N_("a per-example MLP, outputs (5, 3)"), PerExample, (5, 4), True),
    (N_("an MLP ending in softmax (each row sums to 1)"), lambda: PerExample(softmax=True), (5, 4), True),
    (N_("a mean over time taken through view(T, B, D) (mixes examples)"), lambda: TimeMean(bug=True), (5, 3, 3), True),
    (N_("the same model with mean(dim=1)"), TimeMean, (5, 3, 3), True),
    (N_("batch norm in training mode, outputs (6,)"), Normed, (6, 4), True),
    (N_("batch norm in eval mode"), Normed, (6, 4), False),
    (N_("per-step scores, outputs (4, 3, 2)"), PerStep, (4, 3, 3), True),
]


def _row_by_row(model, x: torch.Tensor, norm: str) -> torch.Tensor:
    """Row i from one number per example: the gradient of sum(out[i]) (cancels), or the sum of |Jacobian|."""
    rows = []
    for i in range(x.shape[0]):
        if norm == "abs":
            jac = torch.autograd.functional.jacobian(lambda inp, i=i: model(inp)[i], x)
            rows.append(jac.reshape(-1, x.shape[0], x[0].numel()).abs().sum(dim=(0, 2)))
        else:
            xi = x.detach().clone().requires_grad_()
            rows.append(torch.autograd.grad(model(xi)[i].sum(), xi)[0].reshape(x.shape[0], -1).norm(dim=1))
    return torch.stack(rows)


DEPENDENCY_MISTAKES = mistakes(
    _DEPENDENCY_HINTS,
    {
        "sum": lambda m, x: _row_by_row(m, x, "sum"),
        "transposed": lambda m, x: dependencies(m, x).t(),
        "abs-sum": lambda m, x: _row_by_row(m, x, "abs"),
        "eval-copy": lambda m, x: dependencies(copy.deepcopy(m).eval(), x),
        "diagonal-only": lambda m, x: torch.diag(dependencies(m, x).diag()),
    },
)


def check_batch_dependencies(batch_dependencies) -> None:
    """Check ``batch_dependencies(model, x)`` → (B, B) matrix of ‖∂ out[i] / ∂ x[j]‖.

    >>> check_batch_dependencies(lambda model, x: dependencies(model, x))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    autogradlab.checks.core.ExerciseError: `batch_dependencies` used autogradlab.models.four_checks.dependencies ...
    """
    name, mixing = "batch_dependencies", 0
    learner = LearnerCall(batch_dependencies, name, _OWN_LOOP)
    for label, build, shape, training in _DEPENDENCY_CASES:
        label = _(label)
        torch.manual_seed(0)
        model = build().train(training)
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
        expected = dependencies(copy.deepcopy(model), x)
        before, x_given = _state(model), x.clone()
        got = learner.on(label)(model, x_given)
        if (part := _changed(before, model)) in ("mode", "grad"):
            raise _named(f"changed-{part}", _DEPENDENCY_HINTS, said="changed", name=name, part=part, label=label)
        if x_given.requires_grad or x_given.grad is not None:
            raise _named("x-requires-grad", _DEPENDENCY_HINTS, "changed-input", name=name, label=label)
        wrong = {m: m.compute(copy.deepcopy(model), x) for m in DEPENDENCY_MISTAKES}
        got = got.detach() if isinstance(got, torch.Tensor) else got
        expected = expected.to(got.dtype) if isinstance(got, torch.Tensor) else expected
        compare(got, expected, what=f"`{name}`", label=label, mistakes=wrong, check_dtype=False)
        mixing += int(bool((expected - torch.diag(expected.diag())).abs().max() > 1e-6))
    n = len(_DEPENDENCY_CASES)
    passed(_said("dependencies-passed", name=name, n=n, mixing=mixing, separate=n - mixing))


# --------------------------------------------------------------------------- the lab: notes, the doctor, the debrief


@dataclass
class _Progress:
    """One mystery in this kernel: hypothesis and evidence on record, failed checks, last hint shown, solved."""

    hypothesis: str = ""
    evidence: str = ""
    failures: int = 0
    level: int = 0
    solved: bool = False


LAB: dict[int, _Progress] = {}


def note(number: int, hypothesis: Any, evidence: Any) -> None:
    """Record a hypothesis (what is wrong and why it gives the symptom) and its evidence (a measurement you ran,
    with its number). Opens :func:`doctor_view` and the later hints for this mystery.

    >>> note(1, "the head's weight gets no gradient, so the output is the bias", "head.weight.grad is None")
    Traceback (most recent call last):
    ...
    autogradlab.checks.core.ExerciseError: The evidence for mystery 1 has no measured number. ...
    """
    if not isinstance(hypothesis, str) or len(hypothesis.split()) < 6:
        raise ExerciseError("no-hypothesis", _said("no-hypothesis", number=number), mistake="no-hypothesis")
    if not isinstance(evidence, str) or len(evidence.split()) < 4 or not re.search(r"\d", evidence):
        raise ExerciseError("no-evidence", _said("no-evidence", number=number), mistake="no-evidence")
    LAB.setdefault(number, _Progress()).hypothesis, LAB[number].evidence = hypothesis.strip(), evidence.strip()
    passed(_said("noted", number=number))


def _gate(number: int, open_: bool, mistake: str) -> None:
    if not open_:
        raise ExerciseError("gate", _said(mistake, number=number), mistake=mistake)


def _script(path: Any, number: int) -> Path:
    if not Path(path).is_file():
        raise ExerciseError("type", _said("no-script", path=path, number=number))
    return Path(path)


def _first_steps(path: Path) -> Report:
    module = load(path)
    trainer = module.Trainer(module.Config())
    batches = list(itertools.islice(trainer.epoch_batches(), 3))
    return diagnose(trainer.train_step, trainer.model, trainer.optimizer, batches, getattr(trainer, "scaler", None))


def doctor_view(number: int, script: Any) -> Report:
    """The doctor on the script's first three training steps, once :func:`note` holds a hypothesis."""
    _gate(number, bool(LAB.get(number, _Progress()).hypothesis), "no-note")
    path = _script(script, number)
    return LearnerCall(_first_steps, path.name, frozen_inputs=False, label=_said("three-batches"))(path)


def debrief(number: int):
    """What the bug of mystery ``number`` was, once its check has passed (IPython shows it as markdown)."""
    _gate(number, LAB.get(number, _Progress()).solved, "not-solved")
    from IPython.display import Markdown

    return Markdown(_(MYSTERIES[number].debrief))


# --------------------------------------------------------------------------- the lab: judging a fix by behaviour

_RECORDED: dict[tuple, Recording] = {}


def _reference(number: int, which: str, seed: int = 0, steps: int | None = None) -> Recording:
    """A run of the healthy reference (``which="fixed"``) or of the shipped script, recorded once per process."""
    key = (number, which, seed, steps)
    if key not in _RECORDED:
        _RECORDED[key] = record(fixed(number) if which == "fixed" else original(number), seed, steps)
    return _RECORDED[key]


def _same_grads(a: dict, b: dict) -> bool:
    """One step's gradients: values one computation gives (its dtype's tolerance), not state after many steps."""
    return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)


_SETTINGS = {what: ("optimizer", "changed-elsewhere") for what in ("optimizer", "groups")}  # setting -> (mistake, kind)
_SETTINGS |= {what: ("loss-scale", "symptom-chasing") for what in ("loss scale", "scaler")}


def _outside(got: Recording, ref: Recording, orig: Recording, name: str) -> ExerciseError | None:
    """The first change where the shipped script and the reference agree: outside the bug."""
    other_data = first_difference(got.inputs, ref.inputs, got.complete) is not None
    if other_data and orig.inputs == ref.inputs[: len(orig.inputs)]:
        return _named("data", _OUTSIDE_HINTS, "changed-elsewhere", name=name)
    if got.start.keys() != ref.start.keys() or not all(close(got.start[n], ref.start[n]) for n in ref.start):
        return _named("start", _OUTSIDE_HINTS, "changed-elsewhere", name=name)
    if got.first_output is None or not close(got.first_output, ref.first_output):
        return _named("model", _OUTSIDE_HINTS, "changed-elsewhere", name=name)
    for what, (mistake, kind) in _SETTINGS.items():
        mine, want = got.settings.get(what), ref.settings.get(what)
        if mine != want and orig.settings.get(what) == want:
            return _named(mistake, _OUTSIDE_HINTS, kind, said="setting", name=name, what=what, got=mine, want=want)
    k = first_difference(got.lrs, ref.lrs, got.complete)
    if k is not None and orig.lrs == ref.lrs[: len(orig.lrs)]:
        shown = _said("lr-at", k=k, lr=got.lrs[k][0]) if k < len(got.lrs) else _said("lr-steps", steps=got.steps)
        return _named("learning-rate", _OUTSIDE_HINTS, "symptom-chasing", name=name, shown=shown)
    return None


def _judge(got: Recording, ref: Recording, orig: Recording | None, name: str) -> ExerciseError | None:
    """The first way the learner's run differs from the healthy reference (None: it behaves the same)."""
    if orig is not None:
        if problem := _outside(got, ref, orig, name):
            return problem
        if all(map(_same_grads, got.grads, orig.grads)) and got.lrs == orig.lrs[: len(got.lrs)]:
            return ExerciseError("unchanged", _said("unchanged", name=name, n=len(got.grads)), mistake="unchanged")
    k = first_difference(got.lrs, ref.lrs, got.complete)
    untouched = orig is not None and got.lrs[: len(orig.lrs)] == orig.lrs  # naming them would name the bug
    if k is not None and not untouched:
        steps = _said("lr-steps-not", steps=got.steps, want=ref.steps)
        shown = _said("lr-of", k=k, lr=got.lrs[k][0]) if k < len(got.lrs) else steps
        summary = _said("lr-differs", name=name, shown=shown)
        return ExerciseError("not-fixed", summary, mistake="learning-rate")
    for k, (mine, healthy) in enumerate(zip(got.grads, ref.grads)):
        if _same_grads(mine, healthy):
            continue
        c = common_factor(mine, healthy)
        if c is None and orig is not None and k < len(orig.grads):
            c = common_factor(mine, orig.grads[k])  # a symptom-chasing change to the shipped script
        if c is not None:
            slip = "smaller-gradients" if c < 1 else "larger-gradients"
            return _named(slip, _OUTSIDE_HINTS, "not-fixed", said="scaled-gradients", k=k, name=name, c=c)
        names = sorted(n for n in {*mine, *healthy} if not close(mine.get(n), healthy.get(n)))
        summary = _said("gradients", k=k, name=name)
        return ExerciseError("not-fixed", summary, mistake="gradients", measured={"parameters": names})
    if got.complete and not close(torch.tensor(got.losses), torch.tensor(ref.losses)):
        summary = _said("losses", name=name, n=len(got.losses), want=len(ref.losses))
        return ExerciseError("not-fixed", summary, mistake="losses")
    return None


def _with_ladder(error: ExerciseError, number: int, progress: _Progress) -> ExerciseError:
    """The error with the ladder's next hint (``measured["hint_level"]``): none at the first failure, then one
    level per failure: the symptom; which tool and where only once a hypothesis is on record."""
    cap = 3 if progress.hypothesis else 1
    progress.level = min(progress.level + 1, cap) if progress.failures > 1 else 0
    measured = {**error.measured, "hint_level": progress.level}
    if progress.level == 0:
        return error.but(measured=measured)
    extra = _(MYSTERIES[number].ladder[progress.level - 1])
    if progress.failures > 2 and cap == 1:
        extra = _said("ladder-locked", extra=extra, number=number)
    hint = _said("ladder", hint=_(error.hint), extra=extra) if error.hint else extra[0].upper() + extra[1:]
    return error.but(hint=hint, measured=measured)


def _structure(module: Any, name: str) -> None:
    """The names the checker drives a script by (a fix has no reason to rename them)."""
    trainer = getattr(module, "Trainer", None)
    missing = [n for n in ("Config", "Trainer") if not hasattr(module, n)]
    missing += [f"Trainer.{m}" for m in ("fit", "epoch_batches", "train_step") if trainer and not hasattr(trainer, m)]
    if missing:
        raise _named("structure", _OUTSIDE_HINTS, name=name, missing=", ".join(missing))


def check_fix(number: int, script: Any) -> None:
    """Check the learner's edited script for mystery ``number`` against the healthy reference, by behaviour.

    First its first steps on seed 0, against the reference and the shipped script (they show most wrong
    fixes), then its whole run, then the first steps on seed 1.
    """
    path, progress = _script(script, number), LAB.setdefault(number, _Progress())
    imported = LearnerCall(load, path.name, frozen_inputs=False, label=_said("import"))
    run = LearnerCall(record, path.name, frozen_inputs=False)
    orig = _reference(number, "original", 0, KEEP_GRADS)
    try:
        for seed, steps in ((0, KEEP_GRADS), (0, None), (1, KEEP_GRADS)):
            module = imported(path)
            _structure(module, path.name)
            got = run.on(_said("seed", seed=seed))(module, seed, steps)
            ref = _reference(number, "fixed", seed, None if seed == 0 else KEEP_GRADS)
            if problem := _judge(got, ref, orig if seed == 0 else None, path.name):
                raise problem
    except ExerciseError as error:
        progress.failures += 1
        raise _with_ladder(error, number, progress) from None
    progress.solved = True
    passed(_said("fix-passed", number=number, name=path.name))


def check_mystery_1(script) -> None:
    """Check the repaired ``debug_lab/mystery_1.py`` (see :func:`check_fix`)."""
    check_fix(1, script)
