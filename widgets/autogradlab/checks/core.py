"""The one kernel that calls the learner's code, and the parts every checker is built from.

A checker is a short function in ``autogradlab.checks.chNN``. It declares what the exercise
rules out (:class:`OffLimits`), calls the learner's function through a :class:`LearnerCall`,
compares the result with a reference (:func:`compare`, :func:`check_function`) and either
prints one ``✓`` line or raises :class:`ExerciseError`:

>>> import torch
>>> cases = [Case((torch.arange(3.0),), "x = arange(3)")]
>>> check_function(lambda x: 2 * x, lambda x: 2 * x, cases, name="double")
✓ double matches the reference on 1 input

An :class:`ExerciseError` carries its meaning in fields (``kind``, ``mistake``, ``hint``,
``where``, ``measured``); its message is rendered from them, and checkers and tests read the
fields, never the text. The hints come from two places: the exercise's :class:`Mistake` s
(wrong formulas a learner typically writes, run on the same inputs: if the answer equals one
of them, the mistake is named exactly) and generic shape and scale diagnostics (transposed,
off by the batch size, sign flipped, ...).
"""

from __future__ import annotations

import contextlib
import math
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from unittest import mock

import torch

from autogradlab import torch_internals as internals
from autogradlab.i18n import N_, _
from autogradlab.tracebacks import error_kind, function_name, hint_for, is_kind, learner_call, learner_frame

# --------------------------------------------------------------------------- the structured error

#: The kinds every checker shares; a chapter may add its own (a contract its exercise states).
KINDS = {
    "not-a-function": "the name is bound to something that is not a function",
    "not-implemented": "the exercise cell still raises NotImplementedError",
    "raised": "the learner's code raised an exception",
    "off-limits": "the learner's code used something the exercise rules out",
    "global-state": "a process-wide setting was changed and left changed",
    "changed-input": "an input tensor was changed in place",
    "type": "the result has the wrong type or structure",
    "shape": "a tensor has the wrong shape",
    "dtype": "a tensor has the wrong dtype",
    "not-finite": "inf or NaN where the reference is finite",
    "value": "the values differ from the reference",
    "contract": "a property the exercise states does not hold (graph kept, state restored, ...)",
}


_KIND = re.compile(r"[a-z][a-z0-9_-]*")


class ExerciseError(Exception):
    """A learner's answer is wrong: what went wrong (``kind``), for which input, the measured error and a hint.

    ``kind`` is one of :data:`KINDS` (or a chapter's own); ``mistake`` names the typical slip the
    answer matched (a :class:`Mistake`'s ``id``, or a generic one such as ``"transposed"``);
    ``where`` is the learner's line when their code raised; ``measured`` holds the numbers.
    In IPython only the message is shown, not the checker's traceback.

    >>> error = ExerciseError("value", "`f` is wrong for x = 1.", hint="a sign is flipped", mistake="sign")
    >>> error.kind, error.mistake
    ('value', 'sign')
    >>> print(error)
    `f` is wrong for x = 1.
    Hint: a sign is flipped
    """

    def __init__(
        self,
        kind: str,
        summary: str = "",
        *,
        detail: str = "",
        hint: str | None = None,
        where: str | None = None,
        mistake: str | None = None,
        measured: Mapping[str, Any] | None = None,
    ):
        if not _KIND.fullmatch(kind):
            raise ValueError(f"ExerciseError's kind is a short kebab-case name (see KINDS), not {kind!r}")
        self.kind, self.summary, self.detail = kind, summary, detail
        self.hint, self.where, self.mistake = hint, where, mistake
        self.measured = dict(measured or {})
        super().__init__(self.render())

    def render(self) -> str:
        """The message in the learner's language (a table's ``N_`` hint is translated here): summary, detail, line, hint."""
        lines = [part for part in (self.summary, self.detail) if part]
        if self.where:
            lines.append(_("  in your code: {where}").format(where=self.where))
        if self.hint:
            lines.append(_("Hint: {hint}").format(hint=_(self.hint)))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()

    def but(self, **fields: Any) -> ExerciseError:
        """A copy with some fields changed (e.g. a hint the caller knows better).

        >>> ExerciseError("raised", "`f` raised RuntimeError.").but(hint="mind the shapes").hint
        'mind the shapes'
        """
        current = {k: getattr(self, k) for k in ("summary", "detail", "hint", "where", "mistake", "measured")}
        kind = fields.pop("kind", self.kind)
        error = ExerciseError(kind, **{**current, **fields})
        error.__cause__, error.__suppress_context__ = None, True
        return error

    def _render_traceback_(self) -> list[str]:  # IPython hook for compact errors
        return [f"\x1b[1;31mExerciseError\x1b[0m: {self}"]


def passed(message: str) -> None:
    """Print the one line that a passing check shows."""
    print(f"✓ {message}")


# --------------------------------------------------------------------------- what an exercise rules out


@dataclass(frozen=True)
class Routine:
    """A library routine an exercise rules out: ``owner.attr``, shown to the learner as ``shown``."""

    owner: Any
    attr: str
    shown: str


def routines(owner: Any, prefix: str, *attrs: str) -> tuple[Routine, ...]:
    """One :class:`Routine` per attribute of ``owner``, shown as ```prefix.attr```.

    >>> [r.shown for r in routines(torch.Tensor, "Tensor", "softmax", "logsumexp")]
    ['`Tensor.softmax`', '`Tensor.logsumexp`']
    """
    return tuple(Routine(owner, attr, f"`{prefix}.{attr}`") for attr in attrs)


@dataclass(frozen=True)
class OffLimits:
    """What an exercise rules out while the learner's function runs (:class:`LearnerCall` applies it).

    * ``autograd``: ``backward()``, ``torch.autograd.grad``, the ``torch.func`` transforms,
      ``torch.autograd.functional`` and the C++ engine behind them (so a ``grad`` imported earlier
      under another name is caught too).
    * ``no_graph``: also run under ``torch.inference_mode()``: no graph can be recorded at all
      (a "by hand" formula needs none).
    * ``routines``: named library routines (:class:`Routine`) that would do the exercise's work.
    * ``course``: modules of this package (prefixes such as ``"autogradlab.models.train_state"``)
      whose functions the learner's code must not call directly.
    * ``why``: the exercise's reason, shown as the hint.
    """

    autograd: bool = False
    no_graph: bool = False
    routines: tuple[Routine, ...] = ()
    course: tuple[str, ...] = ()
    why: str = ""

    @contextlib.contextmanager
    def applied(self) -> Iterator[list[str]]:
        """Apply the declaration; yield the list of what the learner's code reached for (shown names).

        Everything is patched with ``unittest.mock.patch.object`` on one ``ExitStack``, so
        everything is restored, in reverse order, however the block ends (a Tensor method
        defined on torch's C base class is restored by deleting the override, as mock does).
        """
        used: list[str] = []
        with contextlib.ExitStack() as stack:
            targets = [*(autograd_routines() if self.autograd else ()), *self.routines]
            for routine in targets:
                stack.enter_context(mock.patch.object(routine.owner, routine.attr, _refuser(routine.shown, used)))
            if self.autograd:
                for owner, attr in internals.engine_patch_points():
                    engine = owner is torch.autograd.variable.Variable  # the C++ engine object, not a function
                    stand_in = _EngineStandIn(used) if engine else _refuser(N_("the autograd engine"), used)
                    stack.enter_context(mock.patch.object(owner, attr, stand_in))
            if self.no_graph:
                stack.enter_context(torch.inference_mode())
            if self.course:
                stack.enter_context(_course_calls(self.course, used))
            yield used


BY_HAND = OffLimits(
    autograd=True,
    no_graph=True,
    why=N_("this exercise asks for the formula by hand: write the gradient with plain tensor operations; autograd is only the reference the checker uses."),
)  # fmt: skip


class _Refused(RuntimeError):
    """Raised inside the learner's code when it reaches for something off limits."""


def _refuser(shown: str, used: list[str]) -> Callable:
    def refused(*args, **kwargs):
        used.append(shown)
        raise _Refused(f"{shown} is off limits in this exercise")

    return refused


class _EngineStandIn:
    """Stands in for PyTorch's C++ autograd engine: running backward is refused, everything else delegated."""

    def __init__(self, used: list[str]):
        self.run_backward, self._real = _refuser(N_("the autograd engine"), used), internals.execution_engine()

    def __getattr__(self, name):
        return getattr(self._real, name)


def autograd_routines() -> tuple[Routine, ...]:
    """What a learner may reach for instead of deriving.

    Tensor.backward calls ``torch.autograd.backward``; every ``torch.func`` transform enters
    functorch's grad or jvp level through the two context managers named here;
    ``torch.autograd.functional`` would silently return zeros under inference mode.
    """
    import torch.autograd.functional as functional

    transforms, (grad_nesting, jvp_nesting) = internals.functorch_transform_entry_points()
    return (Routine(torch.autograd, "backward", "`backward()`"), Routine(torch.autograd, "grad", "`torch.autograd.grad`"), Routine(transforms, grad_nesting, N_("a `torch.func` transform (grad, vjp, jacrev, hessian)")), Routine(transforms, jvp_nesting, N_("a `torch.func` forward-mode transform (jvp, jacfwd)")), *routines(functional, "torch.autograd.functional", "jacobian", "hessian", "vjp", "jvp", "vhp", "hvp"))  # fmt: skip


@contextlib.contextmanager
def _course_calls(modules: tuple[str, ...], used: list[str]) -> Iterator[None]:
    """Record calls from the learner's code into the package's ``modules`` (``sys.setprofile``).

    Only a call made directly from learner code counts: the package calling itself, and torch
    calling the package (a module's forward, a hook), do not. Where the package is imported
    from makes no difference: the callee is known by its module name, the caller by
    :func:`autogradlab.tracebacks.learner_call`.
    """
    previous = sys.getprofile()
    prefixes = tuple(m.rstrip(".") + "." for m in modules)  # "a.b" covers a.b.c, not a.bc

    def profile(frame, event, arg) -> None:
        if event != "call":
            return
        # Runs at every Python call: the cheap tests on the callee's name first; learner_call reads the caller's line.
        shown = function_name(frame)
        if not shown.startswith(prefixes) or shown.startswith(__name__ + ".") or shown in used:
            return
        if "__create_fn__" in shown:  # a dataclass's generated __init__/__eq__: a container, not a helper
            return
        if learner_call(frame) == shown:
            used.append(shown)

    sys.setprofile(profile)
    try:
        yield
    finally:
        sys.setprofile(previous)


# --------------------------------------------------------------------------- calling the learner


# Process-wide settings a learner's function must leave as it found them: (read, restore).
_GLOBAL_SETTINGS = {
    N_("grad mode (torch.is_grad_enabled())"): (torch.is_grad_enabled, torch.set_grad_enabled),
    N_("inference mode"): (torch.is_inference_mode_enabled, None),  # no public setter: reported, not restored
    N_("the default dtype"): (torch.get_default_dtype, torch.set_default_dtype),
    N_("anomaly detection"): (torch.is_anomaly_enabled, torch.set_anomaly_enabled),
    N_("deterministic algorithms"): (torch.are_deterministic_algorithms_enabled, torch.use_deterministic_algorithms),
    N_("the recursion limit"): (sys.getrecursionlimit, sys.setrecursionlimit),
}


def _global_state() -> dict[str, Any]:
    return {what: read() for what, (read, _) in _GLOBAL_SETTINGS.items()}


def _restore_global_state(state: Mapping[str, Any]) -> None:
    # Only what changed: use_deterministic_algorithms imports torch._inductor (seconds) on its first call.
    for what, (read, restore) in _GLOBAL_SETTINGS.items():
        if restore is not None and read() != state[what]:
            restore(state[what])


def learner_line(exc: BaseException) -> str | None:
    """``code  (line N)`` for the deepest line of the learner's own code in ``exc``'s traceback, or None."""
    last = learner_frame(exc)
    return f"{last.line}  (line {last.lineno})" if last is not None and last.line else None


@dataclass(frozen=True)
class LearnerCall:
    """The learner's function ``fn``, called the one way every checker calls it.

    ``LearnerCall(fn, name, off_limits)(*args)`` runs ``fn(*args)`` with the declaration applied
    and everything restored after, and turns every way it can go wrong into an
    :class:`ExerciseError` that says where: not a function, still ``NotImplementedError``, an
    exception (``error_hints``: one hint, or hints by :data:`autogradlab.tracebacks.ERROR_KINDS`),
    something off limits used (even when the learner's code caught the refusal), a global setting
    left changed, an input tensor changed in place (``frozen_inputs``; a stateful step that is
    meant to change its model passes ``frozen_inputs=False``). ``label`` names the input in messages;
    :meth:`on` gives a copy with another label. A LearnerCall is itself callable with ``fn``'s
    signature, so it can stand wherever the learner's function would (a training loop, a variant run).

    >>> import torch
    >>> double = LearnerCall(lambda x: 2 * x, "double", label="x = [1, 2]")
    >>> double(torch.tensor([1.0, 2.0]))
    tensor([2., 4.])
    >>> try:
    ...     LearnerCall(lambda x: x.add_(1), "bump").on("x = 0")(torch.zeros(1))
    ... except ExerciseError as error:
    ...     print(error.kind)
    changed-input
    """

    fn: Any
    name: str
    off_limits: OffLimits = OffLimits()
    error_hints: str | Mapping[str, str] | None = None
    frozen_inputs: bool = True
    label: str = "the check's input"

    def on(self, label: str) -> LearnerCall:
        """The same call, naming its input ``label`` in messages."""
        return replace(self, label=label)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name, label = self.name, self.label
        if not callable(self.fn):
            summary = _("`{name}` should be a function, but it is a {type}.").format(name=name, type=type(self.fn).__name__)  # fmt: skip
            raise ExerciseError("not-a-function", summary)
        before = _global_state()
        inputs = [(a, a.detach().clone()) for a in args if isinstance(a, torch.Tensor)] if self.frozen_inputs else []
        used: list[str] = []
        try:
            with self.off_limits.applied() as used:
                result = self.fn(*args, **kwargs)
            if self.off_limits.no_graph:
                result = _out_of_inference(result)
        except NotImplementedError:
            summary = _("`{name}` still raises NotImplementedError: replace `raise NotImplementedError()` with your code, run that cell, then run this check again.").format(name=name)  # fmt: skip
            raise ExerciseError("not-implemented", summary) from None
        except Exception as exc:  # the learner's bug, reported as such
            if used or (self.off_limits.no_graph and is_kind(exc, "no_graph")):
                raise self._off_limits_error(used or [N_("autograd (a graph cannot be recorded here)")], exc) from None
            summary = _("`{name}` raised {error} for {label}: {message}").format(name=name, error=type(exc).__name__, label=label, message=exc)  # fmt: skip
            where = learner_line(exc)
            raise ExerciseError(
                "raised", summary, where=where, hint=self._hint_for(exc), mistake=error_kind(exc)
            ) from None
        finally:
            changed = [what for what, value in _global_state().items() if before[what] != value]
            _restore_global_state(before)
        if used:
            raise self._off_limits_error(used, None)
        if changed:
            summary = _("`{name}` changed {settings} for {label} and left it changed.").format(name=name, settings=", ".join(map(_, changed)), label=label)  # fmt: skip
            hint = N_("a function must leave global settings as it found them; use a `with` block (e.g. `with torch.no_grad():`) instead of a global switch.")  # fmt: skip
            raise ExerciseError("global-state", summary, hint=hint, mistake=changed[0])
        if any(given.shape != copy.shape or not torch.equal(given.detach(), copy) for given, copy in inputs):
            hint = N_("an in-place op (`x *= ...`, `x.add_(...)`) modifies the caller's tensor; use `x = x * ...`.")
            summary = _("`{name}` changed its input in place for {label}.").format(name=name, label=label)
            raise ExerciseError("changed-input", summary, hint=hint)
        return result

    def _hint_for(self, exc: BaseException) -> str | None:
        if isinstance(self.error_hints, str):
            return self.error_hints
        return hint_for(exc, self.error_hints) if self.error_hints else None

    def _off_limits_error(self, used: list[str], exc: BaseException | None) -> ExerciseError:
        summary = _("`{name}` used {used} for {label}.").format(name=self.name, used=", ".join(map(_, used)), label=self.label)  # fmt: skip
        where = exc and learner_line(exc)
        return ExerciseError("off-limits", summary, hint=self.off_limits.why or None, where=where, mistake=used[0])


def _out_of_inference(value: Any) -> Any:
    """Inference tensors cannot join a graph later; give the checker ordinary copies."""
    if isinstance(value, torch.Tensor):
        return value.clone() if value.is_inference() else value
    if isinstance(value, (tuple, list)):
        return type(value)(map(_out_of_inference, value))
    return {k: _out_of_inference(v) for k, v in value.items()} if isinstance(value, dict) else value


# --------------------------------------------------------------------------- comparing with a reference


@dataclass
class Case:
    """One input for the learner's function: positional ``args`` and a readable ``label``.

    ``context`` carries sizes a hint may need (``batch_size``, ``accum_steps``, ...).
    """

    args: tuple
    label: str
    context: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Mistake:
    """A typical wrong answer: ``compute`` has the reference's signature and returns what the slip gives.

    ``id`` is what tests compare (``ExerciseError.mistake``); ``hint`` is what the learner reads.
    """

    id: str
    hint: str
    compute: Callable[..., Any] | None = None


def mistakes(hints: Mapping[str, str], computes: Mapping[str, Callable[..., Any]]) -> tuple[Mistake, ...]:
    """One :class:`Mistake` per id of ``computes`` (id -> wrong formula), its hint from ``hints`` (id -> text).

    >>> [m.id for m in mistakes({"half": "the 2 is missing"}, {"half": lambda x: x})]
    ['half']
    """
    return tuple(Mistake(key, hints[key], compute) for key, compute in computes.items())


def named(mistake: str, summary: str, hints: Mapping[str, str], kind: str = "contract", **fields: Any) -> ExerciseError:
    """The :class:`ExerciseError` for the slip ``mistake``, its hint from the exercise's table ``hints`` (id -> text).

    >>> error = named("sign", "`f` is wrong for x = 1.", {"sign": "a sign is flipped"}, "value")
    >>> error.kind, error.mistake, error.hint
    ('value', 'sign', 'a sign is flipped')
    """
    return ExerciseError(kind, summary, hint=hints[mistake], mistake=mistake, **fields)


# Values compared for "the same": (rtol, atol) per dtype. Looser than torch.testing's defaults for
# float32 because hand-derived formulas legitimately sum in a different order than autograd; the
# 16-bit rows allow one rounding of the result. Every checker compares values with these.
TOLERANCES = {
    torch.float64: (1e-7, 1e-9),
    torch.float32: (1e-4, 1e-5),
    torch.bfloat16: (2e-2, 1e-3),
    torch.float16: (2e-3, 1e-4),
}


STEP_TOLERANCE = (1e-5, 1e-9)  # (rtol, atol) for the state training steps leave: see close()


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) used to compare values of this dtype."""
    return TOLERANCES.get(dtype, (1e-4, 1e-5))


def close(got: torch.Tensor | None, expected: torch.Tensor | None, *, after_steps: bool = False) -> bool:
    """Whether two tensors (or two Nones) hold the same values: the one "same values" test of the checkers.

    The policy: values one formula gives are compared by :data:`TOLERANCES` of ``expected``'s
    dtype. State left by training steps (parameters, ``.grad``, optimizer state: ``after_steps``)
    is compared at :data:`STEP_TOLERANCE` whatever the dtype: equivalent steps differ by more than
    one rounding (clipping by hand versus ``clip_grad_norm_``, whose denominator adds 1e-6), while a
    slip in a step (a missed ``zero_grad``, a wrong order) moves the state by far more.

    >>> close(torch.ones(2), torch.ones(2) + 1e-7), close(torch.ones(2), torch.ones(3)), close(None, None)
    (True, False, True)
    """
    if got is None or expected is None:
        return got is None and expected is None
    if got.shape != expected.shape:
        return False
    rtol, atol = STEP_TOLERANCE if after_steps else tolerance(expected.dtype)
    return torch.allclose(got.detach().double(), expected.detach().double(), rtol=rtol, atol=atol)


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return _("a tensor of shape {shape} and dtype {dtype}").format(shape=tuple(value.shape), dtype=value.dtype)
    return _("a {type}").format(type=type(value).__name__)


_SHAPE_HINTS = {  # generic shape mistakes: id -> hint
    "transposed": N_("the shape is the transpose of the expected one: check the order of the factors and which one is transposed."),
    "layout": N_("right number of elements, wrong layout: reshape or transpose back to the input's shape."),
    "batch-not-summed": N_("there is an extra leading dimension of size {batch} (the batch): sum over the batch dimension."),
    "one-number": N_("you returned a single number, but one value per input element is expected."),
    "batch-dim-missing": N_("the leading (batch) dimension is missing: did you sum or average over it too early?"),
    "shape": N_("compare the shapes above with the shapes of the inputs."),
}  # fmt: skip


def shape_hint(got: torch.Tensor, expected: torch.Tensor, context: Mapping) -> tuple[str, str]:
    """``(mistake id, hint)`` for a shape mismatch: the mistake that usually causes it."""
    g, e, batch = tuple(got.shape), tuple(expected.shape), context.get("batch_size")
    if got.dim() >= 2 and got.dim() == expected.dim() and g == e[:-2] + (e[-1], e[-2]):
        mistake = "transposed"
    elif got.numel() == expected.numel():
        mistake = "layout"
    elif batch and got.dim() == expected.dim() + 1 and g[0] == batch and g[1:] == e:
        mistake = "batch-not-summed"
    elif got.numel() == 1 and expected.numel() > 1:
        mistake = "one-number"
    elif got.dim() == expected.dim() - 1 and g == e[1:]:
        mistake = "batch-dim-missing"
    else:
        mistake = "shape"
    return mistake, _(_SHAPE_HINTS[mistake]).format(batch=batch)


def _fit_scale(got: torch.Tensor, expected: torch.Tensor) -> float | None:
    """The c that best fits got ≈ c·expected, if that fit is (almost) exact."""
    denom = float((expected * expected).sum())
    if denom == 0.0:
        return None
    c = float((got * expected).sum()) / denom
    residual = float((got - c * expected).norm())
    return c if residual <= 1e-3 * float(got.norm()) + 1e-12 else None


_NAMED_FACTORS = (
    ("batch_size", N_("a sum where a mean was meant (or a missing division by the batch size)")),
    ("accum_steps", N_("the loss was not divided by accum_steps")),
    ("num_tokens", N_("a sum over tokens where the token mean was meant")),
)


def scale_hint(got: torch.Tensor, expected: torch.Tensor, context: Mapping) -> tuple[str, str] | None:
    """``(mistake id, hint)`` when ``got`` is a constant multiple of ``expected``, else None.

    A single number is always some multiple of another, so there only a factor the context names
    (the batch size, ...) or a flipped sign counts as evidence.
    """
    c = _fit_scale(got.double(), expected.double())
    if c is None or abs(c - 1.0) < 1e-6:
        return None
    if abs(c + 1.0) < 1e-3:
        return "sign", N_("the sign is flipped: every value is the negative of the right one.")
    for key, meaning in _NAMED_FACTORS:
        n = context.get(key)
        if n and n != 1:
            if math.isclose(c, n, rel_tol=1e-3):
                return f"times-{key}", _("every value is {n}× too large ({key} = {n}): {meaning}.").format(n=n, key=key, meaning=_(meaning))  # fmt: skip
            if math.isclose(c, 1.0 / n, rel_tol=1e-3):
                hint = _("every value is {n}× too small ({key} = {n}): a mean where a sum was meant, or divided by {key} twice.").format(n=n, key=key)  # fmt: skip
                return f"over-{key}", hint
    if got.numel() == 1:
        return None
    return "factor", _("every value is off by the same factor {c:.4g}: look for a missing or extra constant.").format(c=c)  # fmt: skip


def _measure(got: torch.Tensor, expected: torch.Tensor) -> dict[str, Any]:
    diff = (got.double() - expected.double()).abs()
    flat = int(diff.argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), diff.shape)) if diff.dim() else ()
    return {
        "max_abs_error": float(diff.max()),
        "index": index,
        "got": float(got.double().reshape(-1)[flat]),
        "expected": float(expected.double().reshape(-1)[flat]),
        "max_rel_error": float(diff.max() / expected.double().abs().max().clamp_min(1e-30)),
    }


def _value_report(m: Mapping[str, Any], rtol: float, atol: float) -> str:
    return _("measured: max |error| = {max_abs_error:.3g} at index {index} (got {got:.6g}, expected {expected:.6g}), max error relative to the largest value = {max_rel_error:.3g}; tolerance rtol={rtol:g}, atol={atol:g}.").format(rtol=rtol, atol=atol, **m)  # fmt: skip


def compare(
    got: Any,
    expected: torch.Tensor,
    *,
    what: str,
    label: str,
    context: Mapping | None = None,
    mistakes: Mapping[Mistake, Any] | None = None,
    check_dtype: bool = True,
    nonfinite: Mistake | None = None,
) -> None:
    """Raise ExerciseError unless ``got`` matches ``expected``: type, then shape, dtype, values.

    ``mistakes`` maps a :class:`Mistake` to the value it gives on the same input; if ``got``
    matches one of them, that mistake is the one named. ``nonfinite`` names the slip behind an
    inf or NaN that none of them explains (typically an overflowing formula).
    """
    context = dict(context or {})
    known = [(m.id, m.hint, value) for m, value in (mistakes or {}).items()]
    head = _("{what} is wrong for {label}.").format(what=what, label=label)
    if not isinstance(got, torch.Tensor):
        extra = _(" (a Python number: `.item()` or `float()` leaves the tensor world)") * isinstance(got, (float, int))
        detail = _("Expected {expected}, got {got}{extra}.").format(expected=_describe(expected), got=_describe(got), extra=extra)  # fmt: skip
        raise ExerciseError("type", head, detail=detail)
    rtol, atol = tolerance(expected.dtype)
    if got.shape != expected.shape:
        # A known wrong formula often has its own wrong shape (a sum over the wrong dim).
        mistake, hint = _matching_mistake(got.detach(), known, rtol, atol) or shape_hint(got, expected, context)
        detail = _("Shape: got {got}, expected {expected}.").format(got=tuple(got.shape), expected=tuple(expected.shape))  # fmt: skip
        raise ExerciseError("shape", head, detail=detail, hint=hint, mistake=mistake)
    if check_dtype and got.dtype != expected.dtype:
        hint = N_("keep the input's dtype (avoid torch.tensor(...) of Python floats or .float()).")
        detail = _("Dtype: got {got}, expected {expected}.").format(got=got.dtype, expected=expected.dtype)
        raise ExerciseError("dtype", head, detail=detail, hint=hint)
    got_values = got.detach()
    if not torch.isfinite(got_values).all() and torch.isfinite(expected).all():
        found = _matching_mistake(got_values, known, rtol, atol) or (nonfinite and (nonfinite.id, nonfinite.hint))
        mistake, hint = found or (None, None)
        detail = _("Your result contains inf or NaN where the reference is finite.")
        raise ExerciseError("not-finite", head, detail=detail, hint=hint, mistake=mistake)
    if torch.allclose(got_values.double(), expected.double(), rtol=rtol, atol=atol):
        return
    measured = _measure(got_values, expected)
    found = _matching_mistake(got_values, known, rtol, atol)
    if found is None and got.dim() >= 2 and got.shape[-1] == got.shape[-2]:
        if torch.allclose(got_values.transpose(-1, -2).double(), expected.double(), rtol=rtol, atol=atol):
            found = ("transposed", N_("your result is the transpose of the right one: check which factor is transposed."))  # fmt: skip
    if found is None:
        found = scale_hint(got_values, expected, context)
    (mistake, hint), detail = found or (None, None), _value_report(measured, rtol, atol)
    raise ExerciseError("value", head, detail=detail, hint=hint, mistake=mistake, measured=measured)


def _matching_mistake(got: torch.Tensor, known: list[tuple[str, str, Any]], rtol: float, atol: float):
    """``(id, hint)`` of the first known mistake whose value ``got`` equals, or None."""
    for mistake, hint, wrong in known:
        if isinstance(wrong, torch.Tensor) and wrong.shape == got.shape:
            if torch.allclose(got.double(), wrong.detach().double(), rtol=rtol, atol=atol, equal_nan=True):
                return mistake, hint
    return None


def check_function(
    fn: Callable,
    reference: Callable,
    cases: Sequence[Case],
    *,
    name: str,
    mistakes: Sequence[Mistake] = (),
    check_dtype: bool = True,
    error_hints: str | Mapping[str, str] | None = None,
    off_limits: OffLimits = OffLimits(),
    nonfinite: Mistake | None = None,
    outputs: Sequence[str] | None = None,
) -> None:
    """Run ``fn`` (through :class:`LearnerCall`) and ``reference`` on every case and compare; print ✓ or raise.

    Both get their own copies of the inputs, so a learner's in-place change cannot alter the
    reference (and is reported). Each :class:`Mistake` is run on the same inputs to name the slip
    (one whose formula raises on an input cannot be the slip there); ``nonfinite`` names the slip behind an unexplained inf or NaN (see :func:`compare`).
    ``outputs`` names the tensors of a function that returns several, e.g. ``(dX, dW, db)``: each is
    compared on its own, so the message names the wrong one (a :class:`Mistake`'s ``compute``
    returns the whole wrong tuple).

    >>> cases = [Case((torch.arange(3.0),), "x = arange(3)")]
    >>> check_function(lambda x: (x, 2 * x), lambda x: (x, x + x), cases, name="pair", outputs=("a", "b"))
    ✓ pair matches the reference on 1 input (outputs a, b)
    """
    learner = LearnerCall(fn, name, off_limits, error_hints)
    several = outputs is not None
    for case in cases:
        expected = reference(*clones(case.args))
        got = learner.on(case.label)(*clones(case.args))
        if several:
            expected, got = tuple(expected), as_outputs(got, tuple(outputs), name)
        wrong = {m: values for m in mistakes if (values := _slip(m, case.args)) is not None}
        for i, output in enumerate(outputs or (None,)):
            compare(
                got[i] if several else got,
                expected[i] if several else expected,
                what=_("`{output}` from `{name}`").format(output=output, name=name) if several else f"`{name}`",
                label=case.label,
                context=case.context,
                mistakes={m: tuple(values)[i] if several else values for m, values in wrong.items()},
                check_dtype=check_dtype,
                nonfinite=nonfinite,
            )
    shown = _(" (outputs {names})").format(names=", ".join(outputs)) if several else ""
    message = _("{name} matches the reference on {n} inputs{shown}") if len(cases) != 1 else _("{name} matches the reference on 1 input{shown}")  # fmt: skip
    passed(message.format(name=name, n=len(cases), shown=shown))


def _slip(mistake: Mistake, args: Sequence) -> Any:
    try:
        return mistake.compute(*clones(args))
    except Exception:  # noqa: BLE001  the slip does not apply to this input
        return None


def as_outputs(got: Any, outputs: tuple, name: str) -> tuple:
    """The learner's tuple/list (or dict keyed by the output names) as a tuple in ``outputs`` order."""
    wanted = _("{n} values ({names})").format(n=len(outputs), names=", ".join(outputs))
    if isinstance(got, Mapping):
        missing = [key for key in outputs if key not in got]
        if missing:
            summary = _("`{name}` returned a dict without the key(s) {missing}; expected {wanted}.")
            raise ExerciseError("type", summary.format(name=name, missing=missing, wanted=wanted))
        return tuple(got[key] for key in outputs)
    if not isinstance(got, (tuple, list)):
        summary = _("`{name}` should return {wanted} as a tuple, but it returned {got}.")
        raise ExerciseError("type", summary.format(name=name, wanted=wanted, got=_describe(got)))
    if len(got) != len(outputs):
        summary = _("`{name}` returned {n} values; expected {wanted}, in that order.")
        raise ExerciseError("type", summary.format(name=name, n=len(got), wanted=wanted))
    return tuple(got)


def clones(args: Sequence) -> tuple:
    """Detached copies of the tensors among ``args`` (the rest as they are): inputs no call can change."""
    return tuple(a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args)


def seeded(seed: int) -> torch.Generator:
    """A CPU generator with a fixed seed, so every check sees the same inputs."""
    return torch.Generator().manual_seed(seed)
