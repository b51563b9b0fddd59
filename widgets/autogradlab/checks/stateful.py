"""What the stateful checkers (chapters 06–09) share: run a learner's training step and watch it.

One primitive, :func:`run_variants`: the reference step, the learner's step and named
:class:`Variant` s (mutants of the reference, each one typical slip with the hint that
names it) each run on a fresh seeded setup that a factory builds, so all of them start
from the same state. The caller compares what the runs left behind (parameters,
``.grad``, optimizer state, module modes, RNG, returned values:
:func:`autogradlab.models.train_state.snapshot` captures them, :func:`differences` names which differ) and, when the learner's result
differs from the reference's, :meth:`Runs.closest` names the variant that did the same.

>>> from autogradlab.checks.core import LearnerCall
>>> def run(step):  # a fresh setup per run; here a number stands for the model
...     return step(3.0)
>>> slips = variants(lambda name: {"add": lambda x: x + 2, "square": lambda x: x**2}[name],
...                  {"add": "doubling is x * 2, not x + 2", "square": "doubling is x * 2, not x ** 2"})
>>> runs = run_variants(run, LearnerCall(lambda x: x**2, "double"), lambda x: x * 2, slips)
>>> runs.reference, runs.learner, runs.closest(lambda got, wrong: got == wrong).hint
(6.0, 9.0, 'doubling is x * 2, not x ** 2')

:func:`recorded_scaler_calls` logs the calls a ``GradScaler`` receives, in order, through
:func:`autogradlab.models.doctor.watch_scaler` (the one place that wraps a scaler's methods;
``torch.optim.Optimizer`` has public step hooks, use those to watch an optimizer).

>>> import torch
>>> model = torch.nn.Linear(2, 1)
>>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
>>> scaler = torch.amp.GradScaler("cpu")
>>> with recorded_scaler_calls(scaler) as calls:
...     scaler.scale(model(torch.ones(1, 2)).sum()).backward()
...     scaler.step(optimizer)
...     scaler.update()
>>> calls, "step" in vars(scaler)  # scaler.step unscales itself when the learner did not
(['scale', 'step', 'unscale_', 'update'], False)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from autogradlab.checks.core import LearnerCall, close
from autogradlab.i18n import N_
from autogradlab.models.doctor import watch_scaler
from autogradlab.models.train_state import Snapshot

# --------------------------------------------------------------------------- variants of a step


@dataclass(frozen=True)
class Variant:
    """A mutant of the reference step: ``step`` makes one typical slip, ``hint`` names it for the learner."""

    name: str
    hint: str
    step: Callable


def variants(make: Callable[[str], Callable], hints: Mapping[str, str]) -> tuple[Variant, ...]:
    """One :class:`Variant` per ``name: hint``, its step built by ``make(name)`` (the reference with that slip).

    >>> [v.name for v in variants(lambda name: print, {"no_zero": "zero the gradients", "no_clip": "clip"})]
    ['no_zero', 'no_clip']
    """
    return tuple(Variant(name, hint, make(name)) for name, hint in hints.items())


_FAILED = object()  # a variant that raised on this setup


@dataclass
class Runs:
    """The reference's and the learner's results; each variant's is run on first use (:meth:`closest`).

    A variant runs only when a check needs it (most learners' answers are right), once.
    A variant that raises on a setup (some slips make PyTorch raise there) is left out:
    it cannot be what the learner did when the learner's step ran.
    """

    reference: Any
    learner: Any
    run: Callable[..., Any] = field(repr=False, default=lambda step: None)
    variants: tuple[Variant, ...] = ()
    _results: dict[str, Any] = field(default_factory=dict, repr=False)

    def result(self, variant: Variant) -> Any:
        """What ``variant`` left behind on the same seeded setup (``_FAILED`` when it raised)."""
        if variant.name not in self._results:
            try:
                self._results[variant.name] = self.run(variant.step)
            except Exception:  # noqa: BLE001  the slip itself raised on this setup: not the learner's error
                self._results[variant.name] = _FAILED
        return self._results[variant.name]

    def closest(self, same: Callable[[Any, Any], bool]) -> Variant | None:
        """The first variant (in the order given) whose result ``same(learner's, variant's)`` accepts, or None."""
        for variant in self.variants:
            result = self.result(variant)
            if result is not _FAILED and same(self.learner, result):
                return variant
        return None


def run_variants(
    run: Callable[[Callable], Any], learner: LearnerCall, reference: Callable | None, variants: tuple[Variant, ...] = ()
) -> Runs:
    """Run ``reference``, then ``learner``, through ``run(step)``; the variants run when a comparison needs them.

    ``run(step)`` builds a fresh seeded setup (a factory: model, optimizer, data), runs ``step``
    on it and returns what the check compares (a :func:`snapshot`, the returned values, ...).
    ``learner`` is a :class:`~autogradlab.checks.core.LearnerCall`: it has the step's signature and
    reports the learner's errors itself. ``reference=None``: the check computes its expected
    result another way (e.g. one autograd pass over the whole window).
    """
    expected = None if reference is None else run(reference)
    return Runs(reference=expected, learner=run(learner), run=run, variants=variants)


# --------------------------------------------------------------------------- comparing states


def differences(got: Snapshot, expected: Snapshot) -> list[str]:
    """The states in which two snapshots of the same model differ (``.grad``, parameters, optimizer, mode, RNG).

    >>> from autogradlab.models.train_state import snapshot
    >>> model = torch.nn.Linear(2, 1)
    >>> before = snapshot(model, torch.optim.SGD(model.parameters(), lr=0.1))
    >>> _ = model.eval()
    >>> differences(snapshot(model, torch.optim.SGD(model.parameters(), lr=0.1)), before)
    ['module mode']
    """
    same = lambda a, b: all(close(a[k], b[k], after_steps=True) for k in b)  # b: the reference's keys
    optimizer = all(
        (mine is None) == (state is None) and (not state or (mine.keys() == state.keys() and same(mine, state)))
        for mine, state in ((got.optimizer[n], state) for n, state in expected.optimizer.items())
    )
    differ = {  # the names are shown to the learner: translate them with _() where they are
        ".grad": not same(got.grads, expected.grads),
        N_("parameter values"): not same(got.params, expected.params),
        N_("optimizer state"): not optimizer,
        N_("module mode"): got.mode != expected.mode,
        N_("RNG state"): got.rng != expected.rng,
    }
    return [state for state, differs in differ.items() if differs]


# --------------------------------------------------------------------------- observing a GradScaler

SCALER_METHODS = ("scale", "unscale_", "step", "update")


@contextlib.contextmanager
def recorded_scaler_calls(scaler: torch.amp.GradScaler, methods=SCALER_METHODS) -> Iterator[list[str]]:
    """Log the names of ``scaler``'s ``methods`` as they are called, in order; the list stays readable after."""
    log: list[str] = []

    def logged(method: str) -> Callable:
        return lambda original, *args, **kwargs: (log.append(method), original(*args, **kwargs))[1]

    with watch_scaler(scaler, {method: logged(method) for method in methods}):
        yield log
