"""Checkers for chapter 10 (debugging lab): overfit one batch, chart a batch's dependencies, and the lab's
mysteries (this module's lab part is shared with chapter 12).

A mystery is judged by behaviour, never by its text (:mod:`autogradlab.models.mysteries.record`): the
learner's file must reproduce the healthy reference's gradients and losses, and leave everything outside
the bug as shipped (the data the model sees, the parameters it starts from, the optimizer, the learning
rates, the loss scale). Hints escalate with failed attempts (the symptom, which tool, where), the last two
only once :func:`note` holds a hypothesis and its evidence; :func:`doctor_view` opens then too, and
:func:`debrief` after the check passed.
"""

from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from autogradlab.checks.core import ExerciseError, LearnerCall, Mistake, OffLimits, close, compare, passed
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
from autogradlab.models.mysteries.record import KEEP_GRADS

# --------------------------------------------------------------------------- exercise 1: overfit one batch


def _overfit_slip(slip: str):
    def run(model, loss_fn, batch, steps=100, lr=1e-2):
        copied = copy.deepcopy(model)
        if slip != "eval-mode":
            copied.train()
        params = (model if slip == "optimizer-on-original" else copied).parameters()
        optimizer = torch.optim.SGD(params, lr=lr) if slip == "sgd" else torch.optim.Adam(params, lr=lr)
        losses = []
        for _ in range(steps):
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


OVERFIT_MISTAKES = tuple(
    Mistake(slip, hint, _overfit_slip(slip))
    for slip, hint in {
        "eval-mode": "the copy's batch norm ran in eval mode: put the copy in training mode (copy.train()) whatever "
        "mode the caller's model is in.",
        "optimizer-on-original": "the optimizer was built on the original model's parameters, so it never moves the "
        "copy: build it from the copy's parameters.",
        "no-zero-grad": "gradients accumulate across steps: clear them every step (optimizer.zero_grad()).",
        "new-optimizer": "a new Adam every step forgets its moments (and restarts its bias correction): build the "
        "optimizer once.",
        "loss-after-update": "each loss should come from the step's own forward, before its update; you recorded it "
        "after the update.",
        "sgd": "the losses match plain SGD: the contract asks for torch.optim.Adam(lr=lr).",
    }.items()
)


def _state(model: nn.Module) -> dict[str, Any]:
    return {
        "parameters": {k: v.detach().clone() for k, v in model.named_parameters()},
        ".grad": {k: None if v.grad is None else v.grad.clone() for k, v in model.named_parameters()},
        "batch-norm statistics": {k: v.clone() for k, v in model.named_buffers()},
        "mode (train/eval)": [m.training for m in model.modules()],
    }


def _changed(before: dict[str, Any], model: nn.Module) -> str | None:
    """The first part of the model's state that differs from ``before`` (exactly), or None."""
    for part, values in _state(model).items():
        if part == "mode (train/eval)":
            if values != before[part]:
                return part
        elif any(
            not (a is None and b is None) and (a is None or b is None or not torch.equal(a, b))
            for a, b in zip(before[part].values(), values.values())
        ):
            return part
    return None


_CALLER = {
    "parameters": "train a copy (copy.deepcopy(model)), and build the optimizer from the copy's parameters "
    "(copy.copy shares them).",
    ".grad": "the gradients belong to the copy: an optimizer built from model.parameters() instead of the copy's "
    "clears and steps the caller's.",
    "batch-norm statistics": "run the forward passes on the copy only.",
    "mode (train/eval)": "set the mode on the copy only.",
}


def check_overfit_one_batch(overfit_one_batch) -> None:
    """Check ``overfit_one_batch(model, loss_fn, batch, steps, lr)`` against the exercise's contract."""
    name = "overfit_one_batch"
    learner = LearnerCall(
        overfit_one_batch,
        name,
        OffLimits(
            course=("autogradlab.models.four_checks",),
            why="write the loop yourself (the course's `overfit` is the checker's answer).",
        ),
    )
    cases = [(0, 8, "eval"), (1, 5, "train")]
    for seed, n, mode in cases:
        torch.manual_seed(seed)
        model = SmallClassifier()
        model.train(mode == "train")
        x, y = clusters(n, seed=seed + 10)
        model(x).sum().backward()  # the caller's model holds gradients of its own
        label = f"a batch of {n} points, the model in {mode} mode (seed {seed})"
        before = _state(model)
        expected = torch.tensor(overfit(model, F.cross_entropy, (x, y), 60, 2e-2))
        got = learner.on(label)(model, F.cross_entropy, (x, y), 60, 2e-2)
        part = _changed(before, model)
        if part:
            raise ExerciseError(
                "contract",
                f"`{name}` changed the caller's {part} for {label}.",
                hint=_CALLER[part],
                mistake=f"changed-{part.split()[0].strip('.')}",
            )
        if not isinstance(got, (list, tuple)) or len(got) != 60:
            raise ExerciseError(
                "type",
                f"`{name}` should return a list with one loss per step (60 here) for {label}; got "
                f"{type(got).__name__}{f' of length {len(got)}' if hasattr(got, '__len__') else ''}.",
                mistake="length",
            )
        if not all(isinstance(v, float) for v in got):
            raise ExerciseError(
                "type",
                f"`{name}` should return Python floats (loss.item()) for {label}.",
                hint="a list of loss tensors keeps every step's graph alive.",
                mistake="tensors",
            )
        if not close(torch.tensor(got), expected):
            wrong = {m: m.compute(copy.deepcopy(model), F.cross_entropy, (x, y), 60, 2e-2) for m in OVERFIT_MISTAKES}
            compare(torch.tensor(got), expected, what=f"the losses of `{name}`", label=label, mistakes=wrong)
    passed(
        f"{name}: the reference losses on {len(cases)} batches (caller's model in eval and in train mode, "
        f"left untouched); the healthy model reaches loss {float(expected[-1]):.2g} on one batch"
    )


# --------------------------------------------------------------------------- exercise 2: batch dependencies


def _dependency_cases() -> list[tuple[str, Any, tuple[int, ...], bool]]:
    return [
        ("a per-example MLP, outputs (5, 3)", PerExample, (5, 4), True),
        ("an MLP ending in softmax (each row sums to 1)", lambda: PerExample(softmax=True), (5, 4), True),
        ("a mean over time taken through view(T, B, D) (mixes examples)", lambda: TimeMean(bug=True), (5, 3, 3), True),
        ("the same model with mean(dim=1)", TimeMean, (5, 3, 3), True),
        ("batch norm in training mode, outputs (6,)", Normed, (6, 4), True),
        ("batch norm in eval mode", Normed, (6, 4), False),
        ("per-step scores, outputs (4, 3, 2)", PerStep, (4, 3, 3), True),
    ]


def _summed_rows(model: nn.Module, x: torch.Tensor, norm) -> torch.Tensor:
    """Row i from the gradient of one number per example: sum(out[i]) (cancels) or the sum of |Jacobian| entries."""
    rows = []
    for i in range(x.shape[0]):
        if norm == "abs":
            jac = torch.autograd.functional.jacobian(lambda inp, i=i: model(inp)[i], x)
            rows.append(jac.reshape(-1, x.shape[0], x[0].numel()).abs().sum(dim=(0, 2)))
        else:
            xi = x.detach().clone().requires_grad_()
            (g,) = torch.autograd.grad(model(xi)[i].sum(), xi)
            rows.append(g.reshape(x.shape[0], -1).norm(dim=1))
    return torch.stack(rows)


DEPENDENCY_MISTAKES = (
    Mistake(
        "sum",
        "a sum of outputs can cancel (a softmax row sums to 1, so its gradient is 0): take the gradient of "
        "every output element (or the Jacobian) and the norm over them.",
        lambda m, x: _summed_rows(m, x, "sum"),
    ),
    Mistake(
        "transposed",
        "D[i, j] is the dependency of example i's *output* on example j's *input*: rows are outputs.",
        lambda m, x: dependencies(m, x).t(),
    ),
    Mistake(
        "abs-sum",
        "use the Frobenius norm (square root of the sum of squares) of the Jacobian block, not a sum "
        "of absolute values.",
        lambda m, x: _summed_rows(m, x, "abs"),
    ),
    Mistake(
        "eval-copy",
        "keep the model's mode: in training mode batch norm mixes examples, and that is what D must show.",
        lambda m, x: dependencies(copy.deepcopy(m).eval(), x),
    ),
    Mistake(
        "diagonal-only",
        "only the diagonal: a per-example computation (vmap, or a loop that runs the model on one "
        "example at a time) cannot see what mixes examples; run the model on the whole batch.",
        lambda m, x: torch.diag(dependencies(m, x).diag()),
    ),
)


def check_batch_dependencies(batch_dependencies) -> None:
    """Check ``batch_dependencies(model, x)`` → (B, B) matrix of ‖∂ out[i] / ∂ x[j]‖.

    >>> check_batch_dependencies(lambda model, x: dependencies(model, x))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    autogradlab.checks.core.ExerciseError: `batch_dependencies` used autogradlab.models.four_checks.dependencies ...
    """
    name = "batch_dependencies"
    learner = LearnerCall(
        batch_dependencies,
        name,
        OffLimits(
            course=("autogradlab.models.four_checks",),
            why="compute the gradients yourself (the course's `dependencies` is the checker's answer).",
        ),
    )
    mixing = 0
    cases = _dependency_cases()
    for label, build, shape, training in cases:
        torch.manual_seed(0)
        model = build().train(training)
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
        expected = dependencies(copy.deepcopy(model), x)
        before, x_given = _state(model), x.clone()
        got = learner.on(label)(model, x_given)
        part = _changed(before, model)
        if part in ("mode (train/eval)", ".grad"):
            hint = (
                "keep the model's mode: in training mode batch norm mixes examples."
                if part != ".grad"
                else "ask for the gradient with respect to the input only, torch.autograd.grad(output, x_copy), which "
                "does not touch the parameters' .grad."
            )
            raise ExerciseError(
                "contract",
                f"`{name}` changed the model's {part} for {label}.",
                hint=hint,
                mistake=f"changed-{part.split()[0].strip('.')}",
            )
        if x_given.requires_grad or x_given.grad is not None:
            raise ExerciseError(
                "changed-input",
                f"`{name}` set requires_grad (or .grad) on the x it was given for {label}.",
                hint="work on a copy, x.detach().clone().requires_grad_().",
                mistake="x-requires-grad",
            )
        wrong = {m: m.compute(copy.deepcopy(model), x) for m in DEPENDENCY_MISTAKES}
        got = got.detach() if isinstance(got, torch.Tensor) else got
        expected = expected.to(got.dtype) if isinstance(got, torch.Tensor) else expected
        compare(got, expected, what=f"`{name}`", label=label, mistakes=wrong, check_dtype=False)
        mixing += int(bool((expected - torch.diag(expected.diag())).abs().max() > 1e-6))
    passed(
        f"{name}: exact dependency norms on {len(cases)} models ({mixing} mix examples, "
        f"{len(cases) - mixing} do not); model, parameters' .grad and x left as they were"
    )


# --------------------------------------------------------------------------- the lab: notes, the doctor, the debrief


@dataclass
class _Progress:
    """One mystery in this kernel: the hypothesis and evidence on record, failed checks, solved or not."""

    hypothesis: str = ""
    evidence: str = ""
    failures: int = 0
    level: int = 0  # the last hint of the ladder shown (0: none yet)
    solved: bool = False


LAB: dict[int, _Progress] = {}


def note(number: int, hypothesis: Any, evidence: Any) -> None:
    """Record a hypothesis (a sentence: what is wrong and why it gives the symptom) and its evidence (a
    measurement you ran, with its number). Opens :func:`doctor_view` and the later hints for this mystery.

    >>> note(1, "the head's weight gets no gradient, so the output is the bias", "head.weight.grad is None")
    Traceback (most recent call last):
    ...
    autogradlab.checks.core.ExerciseError: The evidence for mystery 1 has no measured number. ...
    """
    if not isinstance(hypothesis, str) or len(hypothesis.split()) < 6:
        raise ExerciseError(
            "no-hypothesis",
            f"Write your hypothesis for mystery {number} first: a sentence or two (six words at least) saying what "
            "you think is wrong and why it would give this symptom.",
            mistake="no-hypothesis",
        )
    if not isinstance(evidence, str) or len(evidence.split()) < 4 or not re.search(r"\d", evidence):
        raise ExerciseError(
            "no-evidence",
            f"The evidence for mystery {number} has no measured number. Write what you ran and what it gave (a "
            "loss, a gradient norm, a fraction, a count), four words at least.",
            mistake="no-evidence",
        )
    LAB.setdefault(number, _Progress()).hypothesis, LAB[number].evidence = hypothesis.strip(), evidence.strip()
    passed(f"mystery {number}: hypothesis and evidence noted; the doctor's view and the later hints are open")


def _script(path: Any, number: int) -> Path:
    path = Path(path)
    if not path.is_file():
        raise ExerciseError("type", f"No script at {path} for mystery {number}: unpack({number}) writes it.")
    return path


def doctor_view(number: int, script: Any) -> Report:
    """The doctor on the script's first three training steps: open once :func:`note` holds a hypothesis."""
    if not LAB.get(number, _Progress()).hypothesis:
        raise ExerciseError(
            "gate",
            f"The doctor's view of mystery {number} opens once your hypothesis and evidence are on record: "
            f"note({number}, hypothesis, evidence).",
            mistake="no-note",
        )
    path = _script(script, number)

    def three_steps(path):
        module = load(path)
        trainer = module.Trainer(module.Config())
        batches = list(itertools.islice(trainer.epoch_batches(), 3))
        scaler = getattr(trainer, "scaler", None)
        return diagnose(trainer.train_step, trainer.model, trainer.optimizer, batches, scaler=scaler)

    return LearnerCall(three_steps, path.name, frozen_inputs=False, label="its first three batches")(path)


def debrief(number: int):
    """What the bug of mystery ``number`` was, once its check has passed (IPython shows it as markdown)."""
    if not LAB.get(number, _Progress()).solved:
        raise ExerciseError(
            "gate", f"The debrief of mystery {number} opens once its check passes.", mistake="not-solved"
        )
    from IPython.display import Markdown

    return Markdown(MYSTERIES[number].debrief)


# --------------------------------------------------------------------------- the lab: judging a fix by behaviour

_RECORDED: dict[tuple, Recording] = {}


def _reference(number: int, which: str, seed: int = 0, steps: int | None = None) -> Recording:
    """A run of the healthy reference (``which="fixed"``) or of the shipped script, recorded once per process."""
    key = (number, which, seed, steps)
    if key not in _RECORDED:
        _RECORDED[key] = record(fixed(number) if which == "fixed" else original(number), seed, steps)
    return _RECORDED[key]


def _first_difference(got: list, expected: list, complete: bool) -> int | None:
    """The first index where two sequences differ; a partial run is compared with the start of ``expected``."""
    n = len(got) if not complete else max(len(got), len(expected))
    return next((i for i in range(n) if i >= len(got) or i >= len(expected) or got[i] != expected[i]), None)


def _same_grads(a: dict, b: dict) -> bool:
    """The gradients of one step: values one computation gives (its dtype's tolerance), not state after steps."""
    return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)


def _same_start(got: Recording, ref: Recording) -> bool:
    return got.start.keys() == ref.start.keys() and all(close(got.start[n], ref.start[n]) for n in ref.start)


def _factor(got: dict, expected: dict) -> float | None:
    """c when every gradient of ``got`` is c × ``expected``'s (clipping, a rescaled loss), else None."""
    if got.keys() != expected.keys() or any((got[k] is None) != (expected[k] is None) for k in got):
        return None
    g = torch.cat([got[k].double().flatten() for k in got if got[k] is not None])
    e = torch.cat([expected[k].double().flatten() for k in got if got[k] is not None])
    if not e.numel() or float(e @ e) == 0:
        return None
    c = float(g @ e) / float(e @ e)
    return c if float((g - c * e).norm()) <= 1e-4 * float(g.norm()) and abs(c - 1) > 1e-3 else None


def _outside(got: Recording, ref: Recording, orig: Recording, name: str) -> ExerciseError | None:
    """The first change where the shipped script and the reference agree: outside the bug."""
    k = _first_difference(got.inputs, ref.inputs, got.complete)
    if k is not None and _first_difference(orig.inputs, ref.inputs, False) is None:
        return ExerciseError(
            "changed-elsewhere",
            f"The model in `{name}` sees other inputs than in the shipped script, from its call {k} on.",
            hint="a fix leaves the data, its order and the batch size as they were.",
            mistake="data",
        )
    if not _same_start(got, ref):
        return ExerciseError(
            "changed-elsewhere",
            f"The model in `{name}` starts from other parameters than the shipped script's (names, shapes or values).",
            hint="another architecture or initialisation can move the symptom without removing its cause: keep the "
            "model as shipped.",
            mistake="start",
        )
    if got.first_output is None or not close(got.first_output, ref.first_output):
        return ExerciseError(
            "changed-elsewhere",
            f"The model in `{name}` computes something else than the shipped one, from the same parameters on the "
            "same first batch.",
            hint="keep the model's forward as shipped.",
            mistake="model",
        )
    for what in ("optimizer", "groups", "loss scale", "scaler"):
        if got.settings.get(what) != ref.settings.get(what) and orig.settings.get(what) == ref.settings.get(what):
            scale = what in ("loss scale", "scaler")
            return ExerciseError(
                "symptom-chasing" if scale else "changed-elsewhere",
                f"`{name}` changed the {what}: {got.settings.get(what)} instead of {ref.settings.get(what)}.",
                hint="the loss scale sets the size of the scaled gradients, not of the unscaled ones the optimizer "
                "applies: changing it chases the symptom."
                if scale
                else "a fix leaves the optimizer and its settings as they were.",
                mistake="loss-scale" if scale else "optimizer",
            )
    k = _first_difference(got.lrs, ref.lrs, got.complete)
    if k is not None and _first_difference(orig.lrs, ref.lrs, False) is None:
        detail = (
            f"step {k} uses {got.lrs[k][0]:.3g} instead of {ref.lrs[k][0]:.3g}"
            if k < min(len(got.lrs), len(ref.lrs))
            else f"{got.steps} optimizer steps instead of {ref.steps}"
        )
        return ExerciseError(
            "symptom-chasing",
            f"`{name}` changed the learning rate: {detail}.",
            hint="a learning rate changes how fast the loss moves, not what moves it: changing it chases the symptom. "
            "Put it back and look for the cause.",
            mistake="learning-rate",
        )
    return None


def _judge(got: Recording, ref: Recording, orig: Recording | None, name: str) -> ExerciseError | None:
    """The first way the learner's run differs from the healthy reference (None: it behaves the same)."""
    if orig is not None:
        problem = _outside(got, ref, orig, name)
        if problem is not None:
            return problem
        steps = len(got.grads)
        if all(_same_grads(a, b) for a, b in zip(got.grads, orig.grads)) and got.lrs == orig.lrs[: len(got.lrs)]:
            return ExerciseError(
                "unchanged",
                f"`{name}` still behaves as shipped: the same learning rates and gradients in its first {steps} steps.",
                mistake="unchanged",
            )
    k = _first_difference(got.lrs, ref.lrs, got.complete)
    untouched = orig is not None and _first_difference(got.lrs[: len(orig.lrs)], orig.lrs, False) is None
    if k is not None and not untouched:  # learning rates the learner left as shipped would name the bug: see below
        detail = f"step {k}: {got.lrs[k][0]:.3g}" if k < len(got.lrs) else f"{got.steps} steps, not {ref.steps}"
        return ExerciseError(
            "not-fixed",
            f"The learning rates of `{name}` differ from the healthy script's ({detail}).",
            mistake="learning-rate",
        )
    for k, (mine, healthy) in enumerate(zip(got.grads, ref.grads)):
        if _same_grads(mine, healthy):
            continue
        c = _factor(mine, healthy)
        if c is None and orig is not None and k < len(orig.grads):
            c = _factor(mine, orig.grads[k])  # a symptom-chasing change to the shipped script
        if c is not None:
            return ExerciseError(
                "not-fixed",
                f"The gradients of step {k} in `{name}` point the same way as the healthy script's but are "
                f"{c:.3g}× as large.",
                hint="clipping or rescaling the loss changes their size, not their direction: if you added either to "
                "move the loss, that chases the symptom; otherwise look at what sets their size.",
                mistake="smaller-gradients" if c < 1 else "larger-gradients",
            )
        names = sorted(n for n in {*mine, *healthy} if not close(mine.get(n), healthy.get(n)))
        return ExerciseError(
            "not-fixed",
            f"The gradients of step {k} in `{name}` differ from the healthy script's.",
            mistake="gradients",
            measured={"parameters": names},
        )
    if got.complete and not close(torch.tensor(got.losses), torch.tensor(ref.losses)):
        return ExerciseError(
            "not-fixed",
            f"`{name}` starts with the healthy gradients, but its {len(got.losses)} logged losses drift from the "
            f"healthy script's ({len(ref.losses)}).",
            mistake="losses",
        )
    return None


def _with_ladder(error: ExerciseError, number: int, progress: _Progress) -> ExerciseError:
    """The error with the ladder's next hint (``measured["hint_level"]``): none at the first failure, then one
    level per failure: the symptom; which tool and where only once a hypothesis is on record."""
    cap = 3 if progress.hypothesis else 1
    progress.level = min(progress.level + 1, cap) if progress.failures > 1 else 0
    measured = {**error.measured, "hint_level": progress.level}
    if progress.level == 0:
        return error.but(measured=measured)
    extra = MYSTERIES[number].ladder[progress.level - 1]
    if progress.failures > 2 and cap == 1:
        extra += f" The next hint opens once your hypothesis and evidence are on record: note({number}, ...)."
    hint = f"{error.hint} Next: {extra}" if error.hint else extra[0].upper() + extra[1:]
    return error.but(hint=hint, measured=measured)


def _structure(module: Any, name: str) -> None:
    """The names the checker drives a script by (a fix has no reason to rename them)."""
    trainer = getattr(module, "Trainer", None)
    missing = [n for n in ("Config", "Trainer") if not hasattr(module, n)]
    missing += [f"Trainer.{m}" for m in ("fit", "epoch_batches", "train_step") if trainer and not hasattr(trainer, m)]
    if missing:
        raise ExerciseError(
            "contract",
            f"`{name}` has no {', '.join(missing)}.",
            hint="keep the script's structure: a Config dataclass with a seed, and a Trainer whose fit(log) returns "
            "one loss per optimizer step.",
            mistake="structure",
        )


def check_fix(number: int, script: Any) -> None:
    """Check the learner's edited script for mystery ``number`` against the healthy reference, by behaviour.

    First its first steps on seed 0, against the reference and the shipped script (they show most wrong
    fixes), then its whole run, then the first steps on seed 1.
    """
    path = _script(script, number)
    progress = LAB.setdefault(number, _Progress())
    imported = LearnerCall(load, path.name, frozen_inputs=False, label="import")
    run = LearnerCall(record, path.name, frozen_inputs=False)
    orig = _reference(number, "original", 0, KEEP_GRADS)
    try:
        for seed, steps in ((0, KEEP_GRADS), (0, None), (1, KEEP_GRADS)):
            module = imported(path)
            _structure(module, path.name)
            got = run.on(f"seed {seed}")(module, seed, steps)
            ref = _reference(number, "fixed", seed, None if seed == 0 else KEEP_GRADS)
            problem = _judge(got, ref, orig if seed == 0 else None, path.name)
            if problem is not None:
                raise problem
    except ExerciseError as error:
        progress.failures += 1
        raise _with_ladder(error, number, progress) from None
    progress.solved = True
    passed(
        f"mystery {number}: `{path.name}` behaves like the healthy script on 2 seeds (the same gradients in the first "
        "steps, the same losses); the data, the model's start, the optimizer and its learning rates are as shipped"
    )


def check_mystery_1(script) -> None:
    """Check the repaired ``debug_lab/mystery_1.py`` (see :func:`check_fix`)."""
    check_fix(1, script)


__all__ = [
    "LAB",
    "check_batch_dependencies",
    "check_fix",
    "check_mystery_1",
    "check_overfit_one_batch",
    "debrief",
    "doctor_view",
    "note",
]
