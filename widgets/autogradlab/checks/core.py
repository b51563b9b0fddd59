"""What every exercise checker needs: run the learner's function, compare, explain.

A checker is a short function in ``autogradlab.checks.chNN`` built from these parts:

>>> import torch
>>> from autogradlab.checks.core import Case, check_function
>>> cases = [Case((torch.arange(3.0),), "x = arange(3)")]
>>> check_function(lambda x: 2 * x, lambda x: 2 * x, cases, name="double")
✓ double matches the reference on 1 input

A wrong answer raises :class:`ExerciseError` naming the likely mistake and the
measured error. The hints come from two places: ``mistakes`` (wrong formulas a
learner typically writes, run on the same inputs: if the answer equals one of
them, we can name the mistake exactly) and generic shape/scale diagnostics
(transposed, off by the batch size, sign flipped, ...).
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from autogradlab import torch_internals as internals
from autogradlab.tracebacks import is_kind, learner_frame


class ExerciseError(Exception):
    """A learner's answer is wrong. The message names the likely mistake and the measured error.

    In IPython/Jupyter only the message is shown, not the checker's internal
    traceback: the learner's own code is what needs reading, and the message
    quotes the learner's line when their function raised.
    """

    def _render_traceback_(self) -> list[str]:  # IPython hook for compact errors
        return [f"\x1b[1;31mExerciseError\x1b[0m: {self}"]


@dataclass
class Case:
    """One input for the learner's function: positional ``args`` and a readable ``label``.

    ``context`` carries sizes a hint may need (``batch_size``, ``accum_steps``, ...).
    """

    args: tuple
    label: str
    context: dict = field(default_factory=dict)


# (rtol, atol) per dtype: looser than torch.testing's defaults for float32 because
# hand-derived formulas legitimately sum in a different order than autograd.
TOLERANCES = {
    torch.float64: (1e-7, 1e-9),
    torch.float32: (1e-4, 1e-5),
    torch.bfloat16: (2e-2, 1e-3),
    torch.float16: (2e-3, 1e-4),
}


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) used to compare values of this dtype."""
    return TOLERANCES.get(dtype, (1e-4, 1e-5))


def passed(message: str) -> None:
    """Print the one line that a passing check shows."""
    print(f"✓ {message}")


def _learner_line(exc: BaseException) -> str:
    """The last line of the learner's code (outside this package, torch, Python and installed libraries)."""
    last = learner_frame(exc)
    return f"\n  in your code: {last.line}  (line {last.lineno})" if last is not None and last.line else ""


class _AutogradUsed(RuntimeError):
    """Raised inside a :func:`by_hand` region when the learner's code calls autograd."""


def _autograd_entry_points() -> tuple:
    """What a learner may reach for instead of deriving, as (owner, attribute, name shown).

    Tensor.backward calls ``torch.autograd.backward``; every ``torch.func`` transform
    enters functorch's grad or jvp level through the two context managers named here;
    ``torch.autograd.functional`` would silently return zeros under inference mode.
    """
    import torch.autograd.functional as functional

    transforms, (grad_nesting, jvp_nesting) = internals.functorch_transform_entry_points()
    return (
        (torch.autograd, "backward", "`backward()`"),
        (torch.autograd, "grad", "`torch.autograd.grad`"),
        (transforms, grad_nesting, "a `torch.func` transform (grad, vjp, jacrev, hessian)"),
        (transforms, jvp_nesting, "a `torch.func` forward-mode transform (jvp, jacfwd)"),
        *(
            (functional, f, f"`torch.autograd.functional.{f}`")
            for f in ("jacobian", "hessian", "vjp", "jvp", "vhp", "hvp")
        ),
    )


@contextlib.contextmanager
def by_hand() -> Iterator[None]:
    """Run a "by hand" answer with autograd out of reach: any use raises with a clear message.

    Autograd's entry points and the ``torch.func`` transforms are replaced for the
    duration, and the region runs under ``torch.inference_mode()``, so a reference
    to ``torch.autograd.grad`` imported earlier cannot record a graph either.

    >>> import torch
    >>> with by_hand():
    ...     (2 * torch.ones(2)).tolist()
    [2.0, 2.0]
    """
    saved = []

    def forbid(what: str) -> Callable:
        def refuse(*args, **kwargs):
            raise _AutogradUsed(what)

        return refuse

    try:
        for owner, attr, what in _autograd_entry_points():
            saved.append((owner, attr, getattr(owner, attr)))
            setattr(owner, attr, forbid(what))
        with torch.inference_mode():
            yield
    finally:
        for owner, attr, original in saved:
            setattr(owner, attr, original)


def _global_state() -> dict[str, Any]:
    """Process-wide settings a learner's function must leave as it found them."""
    return {
        "grad mode (torch.is_grad_enabled())": torch.is_grad_enabled(),
        "inference mode": torch.is_inference_mode_enabled(),
        "the default dtype": torch.get_default_dtype(),
        "anomaly detection": torch.is_anomaly_enabled(),
        "deterministic algorithms": torch.are_deterministic_algorithms_enabled(),
        "the recursion limit": sys.getrecursionlimit(),
    }


def _autograd_hint(exc: BaseException) -> str | None:
    if isinstance(exc, _AutogradUsed):
        return (
            f"this exercise asks for the formula by hand, but your code calls {exc}. "
            "Write the gradient with plain tensor operations; autograd is only the reference the checker uses."
        )
    return None


def call_learner(fn: Callable, args: Sequence, name: str, label: str, *, no_autograd: bool = False) -> Any:
    """Call the learner's ``fn(*args)``; turn any exception into an ExerciseError that says where.

    With ``no_autograd`` the call runs inside :func:`by_hand`, and a tensor result is
    cloned out of inference mode. Global settings the function changed and did not
    restore (grad mode, default dtype, ...) are reported as a mistake.
    """
    if not callable(fn):
        raise ExerciseError(f"`{name}` should be a function, but it is a {type(fn).__name__}.")
    before = _global_state()
    try:
        if no_autograd:
            with by_hand():
                try:
                    result = fn(*args)
                except RuntimeError as exc:  # autograd reached through a name imported earlier
                    if is_kind(exc, "no_graph"):
                        raise _AutogradUsed("autograd (a graph cannot be recorded here)") from exc
                    raise
            result = _out_of_inference(result)
        else:
            result = fn(*args)
    except NotImplementedError:
        raise ExerciseError(
            f"`{name}` still raises NotImplementedError: replace `raise NotImplementedError()` "
            "with your code, run that cell, then run this check again."
        ) from None
    except Exception as exc:  # the learner's bug, reported as such
        hint = _autograd_hint(exc)
        if hint:
            raise ExerciseError(f"`{name}` used autograd for {label}.\nHint: {hint}{_learner_line(exc)}") from None
        raise ExerciseError(f"`{name}` raised {type(exc).__name__} for {label}: {exc}{_learner_line(exc)}") from None
    finally:
        changed = [what for what, value in _global_state().items() if before[what] != value]
        _restore_global_state(before)
    if changed:
        raise ExerciseError(
            f"`{name}` changed {', '.join(changed)} for {label} and left it changed. "
            "Hint: a function must leave global settings as it found them; use a `with` block "
            "(e.g. `with torch.no_grad():`) instead of a global switch."
        )
    return result


def _restore_global_state(state: Mapping[str, Any]) -> None:
    torch.set_grad_enabled(state["grad mode (torch.is_grad_enabled())"])
    torch.set_default_dtype(state["the default dtype"])
    torch.set_anomaly_enabled(state["anomaly detection"])
    torch.use_deterministic_algorithms(state["deterministic algorithms"])
    sys.setrecursionlimit(state["the recursion limit"])


def _out_of_inference(value: Any) -> Any:
    """Inference tensors cannot join a graph later; give the checker ordinary copies."""
    if isinstance(value, torch.Tensor):
        return value.clone() if value.is_inference() else value
    if isinstance(value, (tuple, list)):
        return type(value)(_out_of_inference(v) for v in value)
    if isinstance(value, dict):
        return {k: _out_of_inference(v) for k, v in value.items()}
    return value


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    return f"a {type(value).__name__}"


def shape_hint(got: torch.Tensor, expected: torch.Tensor, context: Mapping) -> str:
    """Explain a shape mismatch with the mistake that usually causes it."""
    g, e = tuple(got.shape), tuple(expected.shape)
    if got.dim() >= 2 and got.dim() == expected.dim() and g == e[:-2] + (e[-1], e[-2]):
        return "the shape is the transpose of the expected one: check the order of the factors and which one is transposed."
    if got.numel() == expected.numel():
        return "right number of elements, wrong layout: reshape or transpose back to the input's shape."
    batch = context.get("batch_size")
    if batch and got.dim() == expected.dim() + 1 and g[0] == batch and g[1:] == e:
        return f"there is an extra leading dimension of size {batch} (the batch): sum over the batch dimension."
    if got.numel() == 1 and expected.numel() > 1:
        return "you returned a single number, but one value per input element is expected."
    if got.dim() == expected.dim() - 1 and g == e[1:]:
        return "the leading (batch) dimension is missing: did you sum or average over it too early?"
    return "compare the shapes above with the shapes of the inputs."


def _fit_scale(got: torch.Tensor, expected: torch.Tensor) -> float | None:
    """The c that best fits got ≈ c·expected, if that fit is (almost) exact."""
    denom = float((expected * expected).sum())
    if denom == 0.0:
        return None
    c = float((got * expected).sum()) / denom
    residual = float((got - c * expected).norm())
    return c if residual <= 1e-3 * float(got.norm()) + 1e-12 else None


def scale_hint(got: torch.Tensor, expected: torch.Tensor, context: Mapping) -> str | None:
    """Name the mistake when ``got`` is a constant multiple of ``expected``."""
    c = _fit_scale(got.double(), expected.double())
    if c is None or abs(c - 1.0) < 1e-6:
        return None
    if abs(c + 1.0) < 1e-3:
        return "the sign is flipped: every value is the negative of the right one."
    named = [
        ("batch_size", "a sum where a mean was meant (or a missing division by the batch size)"),
        ("accum_steps", "the loss was not divided by accum_steps"),
        ("num_tokens", "a sum over tokens where the token mean was meant"),
    ]
    for key, meaning in named:
        n = context.get(key)
        if n and n != 1:
            if math.isclose(c, n, rel_tol=1e-3):
                return f"every value is {n}× too large ({key} = {n}): {meaning}."
            if math.isclose(c, 1.0 / n, rel_tol=1e-3):
                return f"every value is {n}× too small ({key} = {n}): a mean where a sum was meant, or divided by {key} twice."
    return f"every value is off by the same factor {c:.4g}: look for a missing or extra constant."


def _value_report(got: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> str:
    diff = (got.double() - expected.double()).abs()
    flat = int(diff.argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), diff.shape)) if diff.dim() else ()
    rel = float(diff.max() / expected.double().abs().max().clamp_min(1e-30))
    return (
        f"measured: max |error| = {float(diff.max()):.3g} at index {index} "
        f"(got {float(got.double().reshape(-1)[flat]):.6g}, expected {float(expected.double().reshape(-1)[flat]):.6g}), "
        f"max error relative to the largest value = {rel:.3g}; tolerance rtol={rtol:g}, atol={atol:g}."
    )


def compare(
    got: Any,
    expected: torch.Tensor,
    *,
    what: str,
    label: str,
    context: Mapping | None = None,
    mistakes: Mapping[str, torch.Tensor] | None = None,
    check_dtype: bool = True,
) -> None:
    """Raise ExerciseError unless ``got`` matches ``expected``: type, then shape, dtype, values.

    ``mistakes`` maps a hint to the value a typical wrong formula gives on the same
    input; if ``got`` matches one of them, that hint is the one shown.
    """
    context = dict(context or {})
    head = f"{what} is wrong for {label}."
    if not isinstance(got, torch.Tensor):
        extra = ""
        if isinstance(got, (float, int)):
            extra = " (a Python number: `.item()` or `float()` leaves the tensor world)"
        raise ExerciseError(f"{head}\nExpected {_describe(expected)}, got {_describe(got)}{extra}.")
    if got.shape != expected.shape:
        rtol, atol = tolerance(expected.dtype)
        # A known wrong formula often has its own wrong shape (a sum over the wrong dim).
        hint = _matching_mistake(got.detach(), mistakes or {}, rtol, atol) or shape_hint(got, expected, context)
        raise ExerciseError(f"{head}\nShape: got {tuple(got.shape)}, expected {tuple(expected.shape)}.\nHint: {hint}")
    if check_dtype and got.dtype != expected.dtype:
        raise ExerciseError(
            f"{head}\nDtype: got {got.dtype}, expected {expected.dtype}. "
            "Hint: keep the input's dtype (avoid torch.tensor(...) of Python floats or .float())."
        )
    got_values = got.detach()
    if not torch.isfinite(got_values).all() and torch.isfinite(expected).all():
        raise ExerciseError(f"{head}\nYour result contains inf or NaN where the reference is finite.")
    rtol, atol = tolerance(expected.dtype)
    if torch.allclose(got_values.double(), expected.double(), rtol=rtol, atol=atol):
        return
    report = _value_report(got_values, expected, rtol, atol)
    hint = _matching_mistake(got_values, mistakes or {}, rtol, atol)
    if hint is None and got.dim() >= 2 and got.shape[-1] == got.shape[-2]:
        if torch.allclose(got_values.transpose(-1, -2).double(), expected.double(), rtol=rtol, atol=atol):
            hint = "your result is the transpose of the right one: check which factor is transposed."
    if hint is None:
        hint = scale_hint(got_values, expected, context)
    message = f"{head}\n{report}"
    if hint:
        message += f"\nHint: {hint}"
    raise ExerciseError(message)


def _matching_mistake(got: torch.Tensor, mistakes: Mapping[str, torch.Tensor], rtol: float, atol: float) -> str | None:
    for hint, wrong in mistakes.items():
        if isinstance(wrong, torch.Tensor) and wrong.shape == got.shape:
            if torch.allclose(got.double(), wrong.detach().double(), rtol=rtol, atol=atol):
                return hint
    return None


def check_function(
    fn: Callable,
    reference: Callable,
    cases: Sequence[Case],
    *,
    name: str,
    mistakes: Mapping[str, Callable] | None = None,
    check_dtype: bool = True,
    error_hint: str | None = None,
    no_autograd: bool = False,
) -> None:
    """Run ``fn`` and ``reference`` on every case and compare; print ✓ or raise ExerciseError.

    Inputs are cloned before each call, so a learner's in-place change cannot
    alter the reference (and is reported if it happens). ``mistakes`` maps a hint
    to a function with the reference's signature computing a typical wrong answer.
    ``error_hint`` is added to the message when the learner's function raises.
    ``no_autograd`` enforces an exercise's "by hand" contract (see :func:`by_hand`).
    """
    for case in cases:
        expected = reference(*_clone(case.args))
        learner_args = _clone(case.args)
        got = _call_with_hint(fn, learner_args, name, case.label, error_hint, no_autograd)
        _check_inputs_untouched(case.args, learner_args, name, case.label)
        wrong = {hint: wrong_fn(*_clone(case.args)) for hint, wrong_fn in (mistakes or {}).items()}
        compare(
            got,
            expected,
            what=f"`{name}`",
            label=case.label,
            context=case.context,
            mistakes=wrong,
            check_dtype=check_dtype,
        )
    plural = "s" if len(cases) != 1 else ""
    passed(f"{name} matches the reference on {len(cases)} input{plural}")


def check_function_outputs(
    fn: Callable,
    reference: Callable,
    cases: Sequence[Case],
    *,
    name: str,
    outputs: Sequence[str],
    mistakes: Mapping[str, Callable] | None = None,
    error_hint: str | None = None,
    check_dtype: bool = True,
    no_autograd: bool = False,
) -> None:
    """Like :func:`check_function` for a function that returns several tensors, e.g. ``(dX, dW, db)``.

    Each output is compared on its own, so the message names the wrong one.
    ``mistakes`` maps a hint to a function returning the whole wrong tuple;
    ``error_hint`` is added when the learner's function raises (typically a
    shape error inside a matmul).

    >>> import torch
    >>> cases = [Case((torch.arange(3.0),), "x = arange(3)")]
    >>> check_function_outputs(lambda x: (x, 2 * x), lambda x: (x, x + x), cases, name="pair", outputs=("a", "b"))
    ✓ pair matches the reference on 1 input (outputs a, b)
    """
    outputs = tuple(outputs)
    for case in cases:
        expected = tuple(reference(*_clone(case.args)))
        learner_args = _clone(case.args)
        got = _call_with_hint(fn, learner_args, name, case.label, error_hint, no_autograd)
        _check_inputs_untouched(case.args, learner_args, name, case.label)
        got = _as_outputs(got, outputs, name)
        wrong = {hint: tuple(wrong_fn(*_clone(case.args))) for hint, wrong_fn in (mistakes or {}).items()}
        for i, output in enumerate(outputs):
            compare(
                got[i],
                expected[i],
                what=f"`{output}` from `{name}`",
                label=case.label,
                context=case.context,
                mistakes={hint: values[i] for hint, values in wrong.items()},
                check_dtype=check_dtype,
            )
    plural = "s" if len(cases) != 1 else ""
    passed(f"{name} matches the reference on {len(cases)} input{plural} (outputs {', '.join(outputs)})")


def _call_with_hint(
    fn: Callable, args: tuple, name: str, label: str, error_hint: str | None, no_autograd: bool = False
) -> Any:
    """call_learner, adding ``error_hint`` when the learner's own code raised."""
    try:
        return call_learner(fn, args, name, label, no_autograd=no_autograd)
    except ExerciseError as error:
        if error_hint and " raised " in str(error) and "used autograd" not in str(error):
            raise ExerciseError(f"{error}\nHint: {error_hint}") from None
        raise


def _as_outputs(got: Any, outputs: tuple, name: str) -> tuple:
    """The learner's tuple/list (or dict keyed by the output names) as a tuple in ``outputs`` order."""
    wanted = f"{len(outputs)} values ({', '.join(outputs)})"
    if isinstance(got, Mapping):
        missing = [key for key in outputs if key not in got]
        if missing:
            raise ExerciseError(f"`{name}` returned a dict without the key(s) {missing}; expected {wanted}.")
        return tuple(got[key] for key in outputs)
    if not isinstance(got, (tuple, list)):
        raise ExerciseError(f"`{name}` should return {wanted} as a tuple, but it returned {_describe(got)}.")
    if len(got) != len(outputs):
        raise ExerciseError(f"`{name}` returned {len(got)} values; expected {wanted}, in that order.")
    return tuple(got)


def _clone(args: tuple) -> tuple:
    return tuple(a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args)


def _check_inputs_untouched(original: tuple, used: tuple, name: str, label: str) -> None:
    for before, after in zip(original, used):
        if isinstance(before, torch.Tensor) and not torch.equal(before, after.detach()):
            raise ExerciseError(
                f"`{name}` changed its input in place for {label}. "
                "Hint: an in-place op (`x *= ...`, `x.add_(...)`) modifies the caller's tensor; use `x = x * ...`."
            )


def seeded(seed: int) -> torch.Generator:
    """A CPU generator with a fixed seed, so every check sees the same inputs."""
    return torch.Generator().manual_seed(seed)
