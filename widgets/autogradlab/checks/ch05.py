"""Checkers for chapter 05 (custom autograd Functions): the learner passes a ``torch.autograd.Function`` class.

A checker runs the class's forward against a reference, runs
``torch.autograd.gradcheck`` on it itself, and compares its backward with
autograd's gradients of the reference. When a gradient is wrong, the message
says which input's gradient, by how much (the backward's Jacobian against a
finite-difference one), and, if it matches a typical wrong backward, which
mistake it is.

>>> class Square(torch.autograd.Function):
...     @staticmethod
...     def forward(ctx, x):
...         ctx.save_for_backward(x)
...         return x * x
...     @staticmethod
...     def backward(ctx, grad):
...         (x,) = ctx.saved_tensors
...         return 2 * x * grad
>>> cases = [Case((torch.randn(3, dtype=torch.float64),), "x of shape (3,)")]
>>> check_autograd_function(Square, name="Square", reference=lambda x: x * x, cases=cases, input_names=("x",))
✓ Square: forward, backward and gradcheck pass on 1 input
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import torch

from autogradlab.checks.core import Case, ExerciseError, call_learner, compare, passed, seeded, tolerance

Grads = Callable[..., tuple]  # (*inputs, v) -> one gradient (or None) per input


def _apply_of(cls, name: str) -> Callable:
    """``cls.apply`` for a Function subclass (``cls.apply`` itself is accepted too)."""
    if isinstance(cls, type) and issubclass(cls, torch.autograd.Function):
        return cls.apply
    owner = getattr(cls, "__self__", None)
    if isinstance(owner, type) and issubclass(owner, torch.autograd.Function):
        return cls
    raise ExerciseError(
        f"`{name}` should be a class deriving from torch.autograd.Function (pass the class itself, `{name}`), "
        f"but it is {type(cls).__name__ if not isinstance(cls, type) else 'the class ' + cls.__name__}."
    )


def _leaves(args: tuple, frozen: Sequence[int]) -> list:
    return [
        a.detach().clone().requires_grad_(i not in frozen) if isinstance(a, torch.Tensor) and a.is_floating_point()
        else a
        for i, a in enumerate(args)
    ]


def _grads_of(fn: Callable, args: tuple, frozen: Sequence[int], v: torch.Tensor) -> tuple:
    leaves = _leaves(args, frozen)
    wanted = [t for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad]
    out = fn(*leaves)
    grads = iter(torch.autograd.grad(out, wanted, v, allow_unused=True))
    return tuple(next(grads) if isinstance(t, torch.Tensor) and t.requires_grad else None for t in leaves)


def jacobians(fn: Callable, args: Sequence[torch.Tensor], eps: float = 1e-6) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """For each floating input: (the Jacobian the backward gives, a central-difference Jacobian), both 2-D.

    >>> [(analytic, numeric)] = jacobians(lambda x: x.sum(), [torch.ones(3, dtype=torch.float64)])
    >>> torch.allclose(analytic, numeric), tuple(analytic.shape)
    (True, (1, 3))
    """
    leaves = [a.detach().clone().requires_grad_(True) for a in args]
    out = fn(*leaves)
    m = out.numel()
    analytic = [torch.zeros(m, a.numel(), dtype=torch.float64) for a in args]
    for k in range(m):
        e = torch.zeros(m, dtype=out.dtype)
        e[k] = 1.0
        grads = torch.autograd.grad(out, leaves, e.reshape(out.shape), retain_graph=True, allow_unused=True)
        for i, g in enumerate(grads):
            if g is not None:
                analytic[i][k] = g.reshape(-1).double()
    numeric = []
    with torch.no_grad():
        for i, a in enumerate(args):
            cols = []
            for j in range(a.numel()):
                shifted = []
                for sign in (1.0, -1.0):
                    moved = [t.detach().clone() for t in args]
                    moved[i].view(-1)[j] += sign * eps
                    shifted.append(fn(*moved).reshape(-1).double())
                cols.append((shifted[0] - shifted[1]) / (2 * eps))
            numeric.append(torch.stack(cols, dim=1) if cols else torch.zeros(m, 0, dtype=torch.float64))
    return list(zip(analytic, numeric))


def _explain_gradcheck(fn: Callable, args: tuple, names: Sequence[str], frozen: Sequence[int]) -> str:
    lines, right = [], []
    for i, (analytic, numeric) in enumerate(jacobians(fn, args)):
        if i in frozen:
            continue
        diff = (analytic - numeric).abs()
        worst = float(diff.max()) if diff.numel() else 0.0
        scale = float(numeric.abs().max()) if numeric.numel() else 0.0
        if not torch.isfinite(analytic).all():
            lines.append(f"the gradient of `{names[i]}` (input {i}) contains NaN or inf where the numerical one is finite")
        elif worst > 1e-5 + 1e-3 * scale:
            lines.append(
                f"the gradient of `{names[i]}` (input {i}) is wrong: your backward's Jacobian and the numerical "
                f"(finite-difference) one differ by up to {worst:.3g}, where their largest entry is {scale:.3g}"
            )
        else:
            right.append(f"`{names[i]}`")
    text = "; ".join(lines) if lines else "the gradients differ from the reference beyond float64 rounding"
    if right:
        text += f". The gradient{'s' if len(right) > 1 else ''} of {', '.join(right)} {'are' if len(right) > 1 else 'is'} right"
    return text + "."


def _run_gradcheck(fn: Callable, args: tuple, frozen: Sequence[int], name: str, label: str) -> bool:
    leaves = tuple(_leaves(args, frozen))
    try:
        return torch.autograd.gradcheck(fn, leaves, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=False)
    except Exception as exc:  # a backward that raises inside gradcheck, reported like any learner error
        raise ExerciseError(f"gradcheck could not run `{name}` for {label}: {type(exc).__name__}: {exc}") from None


def _matches(got: tuple, wrong: tuple, dtype: torch.dtype) -> bool:
    rtol, atol = tolerance(dtype)
    pairs = [(g, w) for g, w in zip(got, wrong) if g is not None]
    return bool(pairs) and all(
        w is not None and g.shape == w.shape and torch.allclose(g.double(), w.double(), rtol=rtol, atol=atol)
        for g, w in pairs
    )


def check_autograd_function(
    cls,
    *,
    name: str,
    reference: Callable,
    cases: Sequence[Case],
    input_names: Sequence[str],
    mistakes: Mapping[str, Grads] | None = None,
    error_hint: str | None = None,
    nonfinite_hint: str | None = None,
) -> None:
    """Check a learner's ``torch.autograd.Function`` subclass: forward, gradcheck, and backward vs ``reference``.

    ``reference`` is plain differentiable torch code computing the same forward.
    ``mistakes`` maps a hint to ``(*inputs, v) -> gradients`` of a typical wrong
    backward. A case's ``context["frozen"]`` lists inputs that do not require grad.
    """
    apply = _apply_of(cls, name)
    for case in cases:
        frozen = tuple(case.context.get("frozen", ()))
        label = case.label
        expected = reference(*[a.detach() if isinstance(a, torch.Tensor) else a for a in case.args])
        out = call_learner(apply, _leaves(case.args, frozen), name, label)
        if isinstance(out, torch.Tensor) and torch.isfinite(expected).all() and not torch.isfinite(out.detach()).all():
            raise ExerciseError(
                f"The forward of `{name}` gives inf or NaN for {label}, where the reference is finite."
                + (f"\nHint: {nonfinite_hint}" if nonfinite_hint else "")
            )
        compare(out, expected, what=f"The forward of `{name}`", label=label)
        v = torch.randn(expected.shape, generator=seeded(len(label)), dtype=expected.dtype)
        try:
            got = call_learner(lambda: _grads_of(apply, case.args, frozen, v), (), f"{name}.backward", label)
        except ExerciseError as error:
            raise ExerciseError(f"{error}\nHint: {error_hint}" if error_hint else str(error)) from None
        right = _grads_of(reference, case.args, frozen, v)
        for i, (g, r) in enumerate(zip(got, right)):
            if r is not None and g is None:
                raise ExerciseError(
                    f"The backward of `{name}` returned None for `{input_names[i]}` (input {i}) for {label}, "
                    "but that input requires grad. Return its gradient (None is only for inputs that do not need one)."
                )
            if r is not None and g.shape != r.shape:
                raise ExerciseError(f"The gradient of `{input_names[i]}` has shape {tuple(g.shape)} for {label}; "
                                    f"expected {tuple(r.shape)}, the shape of `{input_names[i]}`.")
        rtol, atol = tolerance(expected.dtype)
        grads_ok = all(r is None or torch.allclose(g.double(), r.double(), rtol=rtol, atol=atol)
                       for g, r in zip(got, right))
        finite = all(g is None or torch.isfinite(g).all() for g in got)
        if grads_ok and _run_gradcheck(apply, case.args, frozen, name, label):
            continue
        explanation = _explain_gradcheck(apply, case.args, input_names, frozen)
        message = f"gradcheck fails for `{name}` on {label}: {explanation}"
        hint = next((h for h, wrong in (mistakes or {}).items() if _matches(got, wrong(*case.args, v), expected.dtype)),
                    None)
        if hint is None and not finite and nonfinite_hint:
            hint = nonfinite_hint
        raise ExerciseError(message + (f"\nHint: {hint}" if hint else ""))
    plural = "s" if len(cases) != 1 else ""
    passed(f"{name}: forward, backward and gradcheck pass on {len(cases)} input{plural}")


def _f64(*shape, gen, scale=1.0, shift=0.0):
    return torch.randn(*shape, generator=gen, dtype=torch.float64) * scale + shift


# --------------------------------------------------------------------------- LinearFunction


def _linear_cases() -> list[Case]:
    gen = seeded(50)
    cases = []
    for n, d, e in [(3, 4, 2), (5, 2, 3), (1, 3, 2), (4, 3, 1)]:
        cases.append(Case((_f64(n, d, gen=gen), _f64(d, e, gen=gen), _f64(e, gen=gen)),
                          f"x {(n, d)}, W {(d, e)}, b {(e,)}"))
    cases.append(Case((_f64(4, 3, gen=gen), _f64(3, 5, gen=gen), _f64(5, gen=gen)),
                      "x (4, 3), W (3, 5), b (5,), where only W requires grad", context={"frozen": (0, 2)}))
    return cases


LINEAR_MISTAKES = {
    "db averages G over the batch; b is added to every row, so its gradient is G.sum(0).":
        lambda x, W, b, G: (G @ W.T, x.T @ G, G.mean(0)),
    "dW = Xᵀ G was divided by the batch size: the upstream G already carries any 1/N of the loss.":
        lambda x, W, b, G: (G @ W.T, x.T @ G / x.shape[0], G.sum(0)),
}


def check_linear_function(LinearFunction) -> None:
    """Check ``LinearFunction.apply(x, W, b)`` = x @ W + b with a hand-written backward.

    >>> class LinearFunction(torch.autograd.Function):
    ...     @staticmethod
    ...     def forward(ctx, x, W, b):
    ...         ctx.save_for_backward(x, W)
    ...         return x @ W + b
    ...     @staticmethod
    ...     def backward(ctx, G):
    ...         x, W = ctx.saved_tensors
    ...         return G @ W.T, x.T @ G, G.sum(0)
    >>> check_linear_function(LinearFunction)
    ✓ LinearFunction: forward, backward and gradcheck pass on 5 inputs
    """
    check_autograd_function(
        LinearFunction,
        name="LinearFunction",
        reference=lambda x, W, b: x @ W + b,
        cases=_linear_cases(),
        input_names=("x", "W", "b"),
        mistakes=LINEAR_MISTAKES,
        error_hint="backward returns one gradient per forward input, in order (x, W, b), each with that input's "
                   "shape: G Wᵀ for x, xᵀ G for W, G summed over the batch for b.",
    )


# --------------------------------------------------------------------------- LogSumExp


def _logsumexp_cases() -> list[Case]:
    gen = seeded(51)
    return [
        Case((_f64(4, 5, gen=gen, scale=3),), "x of shape (4, 5)"),
        Case((_f64(1, 6, gen=gen),), "x of shape (1, 6)"),
        Case((_f64(3, 1, gen=gen),), "x of shape (3, 1)"),
        Case((_f64(2, 3, 4, gen=gen),), "x of shape (2, 3, 4)"),
        Case((_f64(3, 4, gen=gen, scale=10, shift=1000.0),), "large x (around 1000) of shape (3, 4)"),
        Case((_f64(2, 3, gen=gen, shift=-1000.0),), "very negative x (around −1000) of shape (2, 3)"),
    ]


LOGSUMEXP_MISTAKES = {
    "the backward forgot grad_output: multiply softmax(x) by grad_output.unsqueeze(-1).":
        lambda x, v: (torch.softmax(x, -1),),
    "d/dx log Σ exp(x) = exp(x) / Σ exp(x) = softmax(x), not exp(x): divide by the sum (or use exp(x − y)).":
        lambda x, v: (v.unsqueeze(-1) * torch.exp(x),),
}


def check_logsumexp_function(LogSumExp) -> None:
    """Check ``LogSumExp.apply(x)`` = log Σ exp(x) over the last dim, stable for large |x|, with its backward.

    >>> class LogSumExp(torch.autograd.Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         m = x.max(dim=-1, keepdim=True).values
    ...         y = m.squeeze(-1) + (x - m).exp().sum(-1).log()
    ...         ctx.save_for_backward(x, y)
    ...         return y
    ...     @staticmethod
    ...     def backward(ctx, grad):
    ...         x, y = ctx.saved_tensors
    ...         return grad.unsqueeze(-1) * (x - y.unsqueeze(-1)).exp()
    >>> check_logsumexp_function(LogSumExp)
    ✓ LogSumExp: forward, backward and gradcheck pass on 6 inputs
    """
    check_autograd_function(
        LogSumExp,
        name="LogSumExp",
        reference=lambda x: torch.logsumexp(x, dim=-1),
        cases=_logsumexp_cases(),
        input_names=("x",),
        mistakes=LOGSUMEXP_MISTAKES,
        error_hint="grad_output has one value per row (the last dim was reduced): grad_output.unsqueeze(-1) "
                   "broadcasts it back over the last dim.",
        nonfinite_hint="exp(x) overflows to inf for x around 1000 (and underflows to 0 for x around −1000, so the "
                       "log gives −inf). Subtract the row maximum m first: log Σ exp(x) = m + log Σ exp(x − m). "
                       "In backward, softmax(x) = exp(x − y) is stable too.",
    )


# --------------------------------------------------------------------------- SafeNorm


def _norm_cases() -> list[Case]:
    gen = seeded(52)
    with_zero_row = _f64(4, 3, gen=gen)
    with_zero_row[2] = 0.0
    three_d = _f64(2, 3, 4, gen=gen)
    three_d[1, 0] = 0.0
    column = _f64(3, 1, gen=gen)
    column[1] = 0.0
    return [
        Case((_f64(5, 3, gen=gen),), "x of shape (5, 3)"),
        Case((with_zero_row,), "x of shape (4, 3) whose row 2 is all zeros"),
        Case((_f64(1, 5, gen=gen),), "x of shape (1, 5)"),
        Case((column,), "x of shape (3, 1) with a zero in row 1"),
        Case((three_d,), "x of shape (2, 3, 4) with one all-zero row"),
    ]


def _norm_grad(x, v):
    norm = x.norm(dim=-1, keepdim=True)
    return v.unsqueeze(-1) * torch.where(norm > 0, x / norm.clamp_min(1e-300), 0.0)


NORM_MISTAKES = {
    "the backward forgot grad_output: multiply x / ‖x‖ by grad_output.unsqueeze(-1).":
        lambda x, v: (_norm_grad(x, torch.ones_like(v)),),
    "d‖x‖/dx = x / ‖x‖, not x: divide by the norm (and return 0 where the norm is 0).":
        lambda x, v: (v.unsqueeze(-1) * x,),
}


def check_safe_norm_function(SafeNorm) -> None:
    """Check ``SafeNorm.apply(x)`` = ‖x‖ over the last dim, whose gradient is 0 (not NaN) where x is all zeros.

    >>> class SafeNorm(torch.autograd.Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         norm = x.pow(2).sum(-1).sqrt()
    ...         ctx.save_for_backward(x, norm)
    ...         return norm
    ...     @staticmethod
    ...     def backward(ctx, grad):
    ...         x, norm = ctx.saved_tensors
    ...         safe = torch.where(norm > 0, norm, 1.0).unsqueeze(-1)
    ...         return grad.unsqueeze(-1) * torch.where(norm.unsqueeze(-1) > 0, x / safe, 0.0)
    >>> check_safe_norm_function(SafeNorm)
    ✓ SafeNorm: forward, backward and gradcheck pass on 5 inputs
    """
    check_autograd_function(
        SafeNorm,
        name="SafeNorm",
        reference=lambda x: torch.linalg.vector_norm(x, dim=-1),
        cases=_norm_cases(),
        input_names=("x",),
        mistakes=NORM_MISTAKES,
        error_hint="grad_output has one value per row: grad_output.unsqueeze(-1) broadcasts it over the last dim.",
        nonfinite_hint="at an all-zero row x / ‖x‖ is 0 / 0 = NaN. Return 0 there, e.g. "
                       "torch.where(norm > 0, x / safe_norm, 0) with safe_norm = torch.where(norm > 0, norm, 1).",
    )


# --------------------------------------------------------------------------- straight-through estimator


def _ste_cases() -> list[Case]:
    gen = seeded(53)
    return [
        Case((_f64(4, 5, gen=gen, scale=3),), "x of shape (4, 5), values around ±3"),
        Case((_f64(7, gen=gen, scale=0.4),), "x of shape (7,), values within about ±1"),
        Case((_f64(2, 1, 3, gen=gen, scale=5),), "x of shape (2, 1, 3)"),
    ]


STE_MISTAKES = {
    "that is the true derivative of round (0 almost everywhere), which stops all learning: a straight-through "
    "estimator passes grad_output through unchanged.":
        lambda x, v: torch.zeros_like(v),
    "you zeroed the gradient where |x| > 1 (the 'clipped' straight-through estimator); this exercise asks for the "
    "plain one: return grad_output unchanged.":
        lambda x, v: v * (x.abs() <= 1),
    "the gradient is grad_output itself, not grad_output ⊙ x.":
        lambda x, v: v * x,
}


def check_straight_through_round(StraightThroughRound) -> None:
    """Check ``StraightThroughRound.apply(x)``: forward ``torch.round(x)``, backward passes grad_output unchanged.

    gradcheck does not apply here: the backward is deliberately not the derivative of the forward.

    >>> class StraightThroughRound(torch.autograd.Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         return torch.round(x)
    ...     @staticmethod
    ...     def backward(ctx, grad):
    ...         return grad
    >>> check_straight_through_round(StraightThroughRound)
    ✓ StraightThroughRound: forward rounds, backward passes the gradient straight through on 3 inputs
    """
    name = "StraightThroughRound"
    apply = _apply_of(StraightThroughRound, name)
    cases = _ste_cases()
    for case in cases:
        (x,) = case.args
        out = call_learner(apply, _leaves(case.args, ()), name, case.label)
        compare(out, torch.round(x), what=f"The forward of `{name}`", label=case.label, mistakes={
            "round to the nearest integer (torch.round), not down (torch.floor).": torch.floor(x),
            "round to the nearest integer (torch.round), not up (torch.ceil).": torch.ceil(x),
            "round to the nearest integer (torch.round), not towards zero (torch.trunc).": torch.trunc(x),
        })
        v = torch.randn(x.shape, generator=seeded(x.numel()), dtype=x.dtype)
        (got,) = call_learner(lambda: _grads_of(apply, case.args, (), v), (), f"{name}.backward", case.label)
        if got is None:
            raise ExerciseError(
                f"The backward of `{name}` returned None for {case.label}: then x gets no gradient at all. "
                "Return grad_output."
            )
        compare(got, v, what=f"The gradient that `{name}` passes back", label=case.label,
                mistakes={hint: wrong(x, v) for hint, wrong in STE_MISTAKES.items()})
    passed(f"{name}: forward rounds, backward passes the gradient straight through on {len(cases)} inputs")
