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

from collections.abc import Callable, Mapping, Sequence

import torch

from autogradlab.checks.core import Case, ExerciseError, call_learner, compare, passed, seeded, tolerance
from autogradlab.torch_internals import TorchFunctionMode

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
        a.detach().clone().requires_grad_(i not in frozen)
        if isinstance(a, torch.Tensor) and a.is_floating_point()
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
            lines.append(
                f"the gradient of `{names[i]}` (input {i}) contains NaN or inf where the numerical one is finite"
            )
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


class _CallRecorder(TorchFunctionMode):
    """Records the name of every torch function called inside it (e.g. ``softplus``)."""

    def __init__(self):
        super().__init__()
        self.names: set[str] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.add(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


def _saved_by_forward(
    apply: Callable, leaves: list, name: str, label: str, forbidden: Mapping[str, str] | None = None
) -> tuple[object, list[tuple]]:
    """Run the learner's forward, recording the shape of every tensor it saved with ``save_for_backward``.

    ``forbidden`` maps a torch function name to the hint shown when the forward calls it.
    """
    packed: list[tuple] = []

    def pack(t):
        packed.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), _CallRecorder() as calls:
        out = call_learner(apply, leaves, name, label)
    for func, hint in (forbidden or {}).items():
        if func in calls.names:
            shown = func.removeprefix("linalg_")
            raise ExerciseError(f"The forward of `{name}` calls torch's `{shown}` for {label}.\nHint: {hint}")
    return out, packed


def _check_ctx_contract(out, packed: list[tuple], name: str, label: str, max_saved: int | None) -> None:
    """Tensors go through ``save_for_backward`` (version checks, no reference cycles, saved-tensor hooks)."""
    ctx = getattr(out[0] if isinstance(out, tuple) else out, "grad_fn", None)
    attributes = {k: v for k, v in getattr(ctx, "__dict__", {}).items() if isinstance(v, torch.Tensor)}
    if attributes:
        names = ", ".join(f"ctx.{k}" for k in attributes)
        raise ExerciseError(
            f"The forward of `{name}` stored tensors as ctx attributes ({names}) for {label}.\n"
            "Hint: save tensors with ctx.save_for_backward(...) and read them with ctx.saved_tensors: only then does "
            "autograd check their version counter, avoid a reference cycle through the output, and let "
            "saved-tensor hooks (checkpointing, offloading) see them. Plain attributes are for non-tensors."
        )
    if max_saved is not None and len(packed) > max_saved:
        raise ExerciseError(
            f"The forward of `{name}` saved {len(packed)} tensors (shapes {packed}) for {label}; its backward needs "
            f"only {max_saved}.\nHint: save only what backward reads: every saved tensor stays in memory until "
            "backward runs."
        )


def _check_skips_unneeded(
    cls, out, v: torch.Tensor, frozen: Sequence[int], names: Sequence[str], name: str, label: str
) -> None:
    """Call the learner's backward directly: inputs that need no gradient must get None (nothing computed)."""
    if not frozen or not isinstance(cls, type):
        return
    ctx = out.grad_fn
    grads = call_learner(lambda: cls.backward(ctx, v), (), f"{name}.backward", label)
    grads = grads if isinstance(grads, tuple) else (grads,)
    computed = [names[i] for i in frozen if i < len(grads) and grads[i] is not None]
    if computed:
        raise ExerciseError(
            f"The backward of `{name}` computed a gradient for {', '.join(f'`{n}`' for n in computed)} for {label}, "
            "where that input does not require grad.\nHint: check ctx.needs_input_grad[i] and return None for "
            "inputs nobody asked a gradient for: that skips a whole matrix product for frozen weights or data."
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
    max_saved: int | None = None,
    forbidden: Mapping[str, str] | None = None,
    then: Callable[[], None] | None = None,
) -> None:
    """Check a learner's ``torch.autograd.Function`` subclass: forward, gradcheck, and backward vs ``reference``.

    ``reference`` is plain differentiable torch code computing the same forward.
    ``mistakes`` maps a hint to ``(*inputs, v) -> gradients`` of a typical wrong
    backward. A case's ``context["frozen"]`` lists inputs that do not require grad:
    the learner's backward must return None for them (``ctx.needs_input_grad``).
    The forward must keep tensors in ``save_for_backward``, never as ctx
    attributes, and save at most ``max_saved`` tensors when that is given; it must
    not call the torch functions named in ``forbidden``. ``then`` runs the
    exercise's own extra checks before the ✓ line is printed.
    """
    apply = _apply_of(cls, name)
    for case in cases:
        frozen = tuple(case.context.get("frozen", ()))
        label = case.label
        expected = reference(*[a.detach() if isinstance(a, torch.Tensor) else a for a in case.args])
        out, packed = _saved_by_forward(apply, _leaves(case.args, frozen), name, label, forbidden)
        _check_ctx_contract(out, packed, name, label, max_saved)
        if isinstance(out, torch.Tensor) and torch.isfinite(expected).all() and not torch.isfinite(out.detach()).all():
            raise ExerciseError(
                f"The forward of `{name}` gives inf or NaN for {label}, where the reference is finite."
                + (f"\nHint: {nonfinite_hint}" if nonfinite_hint else "")
            )
        compare(out, expected, what=f"The forward of `{name}`", label=label)
        v = torch.randn(expected.shape, generator=seeded(len(label)), dtype=expected.dtype)
        _check_skips_unneeded(cls, out, v, frozen, input_names, name, label)
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
                raise ExerciseError(
                    f"The gradient of `{input_names[i]}` has shape {tuple(g.shape)} for {label}; "
                    f"expected {tuple(r.shape)}, the shape of `{input_names[i]}`."
                )
        rtol, atol = tolerance(expected.dtype)
        grads_ok = all(
            r is None or torch.allclose(g.double(), r.double(), rtol=rtol, atol=atol) for g, r in zip(got, right)
        )
        finite = all(g is None or torch.isfinite(g).all() for g in got)
        if grads_ok and _run_gradcheck(apply, case.args, frozen, name, label):
            continue
        explanation = _explain_gradcheck(apply, case.args, input_names, frozen)
        message = f"gradcheck fails for `{name}` on {label}: {explanation}"
        hint = next(
            (h for h, wrong in (mistakes or {}).items() if _matches(got, wrong(*case.args, v), expected.dtype)), None
        )
        if hint is None and not finite and nonfinite_hint:
            hint = nonfinite_hint
        raise ExerciseError(message + (f"\nHint: {hint}" if hint else ""))
    if then is not None:
        then()
    plural = "s" if len(cases) != 1 else ""
    passed(f"{name}: forward, backward and gradcheck pass on {len(cases)} input{plural}")


def _f64(*shape, gen, scale=1.0, shift=0.0):
    return torch.randn(*shape, generator=gen, dtype=torch.float64) * scale + shift


# --------------------------------------------------------------------------- LinearFunction


def _linear_cases() -> list[Case]:
    gen = seeded(50)
    cases = []
    for n, d, e in [(3, 4, 2), (5, 2, 3), (1, 3, 2), (4, 3, 1)]:
        cases.append(
            Case((_f64(n, d, gen=gen), _f64(d, e, gen=gen), _f64(e, gen=gen)), f"x {(n, d)}, W {(d, e)}, b {(e,)}")
        )
    cases.append(
        Case(
            (_f64(4, 3, gen=gen), _f64(3, 5, gen=gen), _f64(5, gen=gen)),
            "x (4, 3), W (3, 5), b (5,), where only W requires grad",
            context={"frozen": (0, 2)},
        )
    )
    cases.append(
        Case(
            (_f64(6, 2, gen=gen), _f64(2, 3, gen=gen), _f64(3, gen=gen)),
            "x (6, 2) as data (no grad), W (2, 3), b (3,)",
            context={"frozen": (0,)},
        )
    )
    cases.append(
        Case(
            (_f64(3, 5, gen=gen).T, _f64(3, 4, gen=gen), _f64(4, gen=gen)),
            "a non-contiguous x (a transposed (3, 5) tensor), W (3, 4), b (4,)",
        )
    )
    return cases


LINEAR_MISTAKES = {
    "db averages G over the batch; b is added to every row, so its gradient is G.sum(0).": lambda x, W, b, G: (
        G @ W.T,
        x.T @ G,
        G.mean(0),
    ),
    "dW = Xᵀ G was divided by the batch size: the upstream G already carries any 1/N of the loss.": lambda x, W, b, G: (
        G @ W.T,
        x.T @ G / x.shape[0],
        G.sum(0),
    ),
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
    ...         need_x, need_W, need_b = ctx.needs_input_grad
    ...         return (G @ W.T if need_x else None), (x.T @ G if need_W else None), (G.sum(0) if need_b else None)
    >>> check_linear_function(LinearFunction)
    ✓ LinearFunction: forward, backward and gradcheck pass on 7 inputs
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
        max_saved=2,
    )


# --------------------------------------------------------------------------- StableSoftplus


def _softplus_cases() -> list[Case]:
    gen = seeded(51)
    return [
        Case((_f64(4, 5, gen=gen, scale=3),), "x of shape (4, 5), values around ±3"),
        Case((_f64(2, 3, 4, gen=gen),), "x of shape (2, 3, 4)"),
        Case((_f64(3, 4, gen=gen, scale=10, shift=1000.0),), "large x (around +1000) of shape (3, 4)"),
        Case((_f64(2, 3, gen=gen, scale=5, shift=-60.0),), "very negative x (around −60) of shape (2, 3)"),
        Case((_f64(5, 3, gen=gen, scale=2).T,), "a non-contiguous x (a transposed (5, 3) tensor)"),
    ]


def _softplus_grad(x, v):
    return (v * torch.sigmoid(x),)


SOFTPLUS_MISTAKES = {
    "the backward forgot grad_output: multiply σ(x) by grad_output.": lambda x, v: (torch.sigmoid(x),),
    "d/dx log(1 + eˣ) = eˣ / (1 + eˣ) = σ(x), not eˣ: the 1 + eˣ of the log's derivative is missing.": lambda x, v: (
        v * torch.exp(x),
    ),
    "σ(x) = 1 / (1 + e⁻ˣ) is the derivative; 1 / (1 + eˣ) = σ(−x) is the derivative of softplus(−x).": lambda x, v: (
        v * torch.sigmoid(-x),
    ),
    "that is the softplus itself, not its derivative σ(x).": lambda x, v: (v * torch.nn.functional.softplus(x),),
}


def _check_softplus_precision(apply: Callable, name: str) -> None:
    """For very negative x, softplus(x) ≈ eˣ is tiny: an answer off by 100% of it hides under any absolute tolerance."""
    x = torch.tensor([-20.0, -40.0, -300.0], dtype=torch.float64)
    got = call_learner(apply, (x,), name, "x = [−20, −40, −300]")
    expected = torch.nn.functional.softplus(x)
    relative = float(((got.detach() - expected).abs() / expected).max())
    if not relative <= 1e-12:
        raise ExerciseError(
            f"The forward of `{name}` loses the tiny values: for x = [−20, −40, −300] the true values are about "
            f"[2.1e−9, 4.2e−18, 5.1e−131]; yours are {[float(f'{v:.3g}') for v in got.detach()]} "
            f"(relative error {relative:.3g}).\nHint: 1 + e⁻⁴⁰ rounds to exactly 1 in float64, so log(1 + u) "
            "returns 0; torch.log1p(u) computes log(1 + u) without forming 1 + u."
        )


def check_softplus_function(StableSoftplus) -> None:
    """Check ``StableSoftplus.apply(x)`` = log(1 + eˣ) element-wise: stable and precise for any x, with its backward.

    >>> class StableSoftplus(torch.autograd.Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         ctx.save_for_backward(x)
    ...         return x.clamp_min(0) + torch.log1p(torch.exp(-x.abs()))
    ...     @staticmethod
    ...     def backward(ctx, grad):
    ...         (x,) = ctx.saved_tensors
    ...         return grad * torch.sigmoid(x)
    >>> check_softplus_function(StableSoftplus)
    ✓ StableSoftplus: forward, backward and gradcheck pass on 5 inputs
    """
    name = "StableSoftplus"
    check_autograd_function(
        StableSoftplus,
        name=name,
        reference=torch.nn.functional.softplus,
        cases=_softplus_cases(),
        input_names=("x",),
        mistakes=SOFTPLUS_MISTAKES,
        nonfinite_hint="eˣ overflows to inf for x around 1000, and inf / inf = NaN in the backward. Split off the "
        "large part: log(1 + eˣ) = max(x, 0) + log(1 + e^(−|x|)), where the exponent is never "
        "positive; σ(x) = torch.sigmoid(x) is stable.",
        max_saved=2,
        forbidden={
            f: "this exercise is to build the stable formula yourself; torch's softplus and logaddexp already are one."
            for f in ("softplus", "logaddexp")
        },
        then=lambda: _check_softplus_precision(_apply_of(StableSoftplus, name), name),
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
    "the backward forgot grad_output: multiply x / ‖x‖ by grad_output.unsqueeze(-1).": lambda x, v: (
        _norm_grad(x, torch.ones_like(v)),
    ),
    "d‖x‖/dx = x / ‖x‖, not x: divide by the norm (and return 0 where the norm is 0).": lambda x, v: (
        v.unsqueeze(-1) * x,
    ),
}


def _check_norm_double_backward(apply: Callable, name: str) -> None:
    """A gradient penalty differentiates the backward: it must be differentiable and stay finite at x = 0."""
    gen = seeded(54)
    with_zero = _f64(3, 4, gen=gen)
    with_zero[1] = 0.0
    leaf = with_zero.clone().requires_grad_()
    try:
        (g,) = torch.autograd.grad(apply(leaf).sum(), leaf, create_graph=True)
        (gg,) = torch.autograd.grad((g**2).sum() + g.sum(), leaf)
    except RuntimeError as exc:
        raise ExerciseError(
            f"The backward of `{name}` cannot be differentiated ({str(exc).splitlines()[0]}).\nHint: this exercise "
            "needs a backward made of differentiable torch ops (no @once_differentiable, no torch.no_grad(), "
            "no .detach()): "
            "a gradient penalty differentiates it."
        ) from None
    if not torch.isfinite(gg).all():
        raise ExerciseError(
            f"Differentiating the backward of `{name}` (a gradient penalty) gives NaN at the all-zero row of x.\n"
            "Hint: torch.where picks values, but the branch it discards is still computed and still differentiated: "
            "0 · (NaN from x / 0) is NaN. Make the discarded branch finite too: divide by a denominator that is "
            "never 0 (torch.where(norm > 0, norm, 1)) before the where."
        )
    x = _f64(3, 4, gen=gen).requires_grad_()
    if not torch.autograd.gradgradcheck(apply, (x,), eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=False):
        raise ExerciseError(
            f"gradgradcheck fails for `{name}` on x of shape (3, 4): the second derivatives through your backward are "
            "wrong.\nHint: compute the backward with differentiable torch ops on the saved tensors, not under "
            "torch.no_grad() or on .detach()ed copies, so autograd can differentiate it."
        )


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
        nonfinite_hint="at an all-zero row x / ‖x‖ is 0 / 0 = NaN. Return 0 there, and never divide by 0, "
        "even in a branch torch.where discards.",
        max_saved=2,
        forbidden={
            f: "this exercise is to write the norm's backward yourself; torch's norms bring their own."
            for f in ("norm", "linalg_vector_norm", "linalg_norm")
        },
        then=lambda: _check_norm_double_backward(_apply_of(SafeNorm, "SafeNorm"), "SafeNorm"),
    )


# --------------------------------------------------------------------------- clipped straight-through sign


def _ste_cases() -> list[Case]:
    gen = seeded(53)
    edges = torch.tensor([-1.5, -1.0, -0.5, 0.0, 0.25, 1.0, 1.0001, 3.0], dtype=torch.float64)
    return [
        Case((_f64(4, 5, gen=gen, scale=1.5),), "x of shape (4, 5), values around ±1.5"),
        Case((edges,), "x = [−1.5, −1, −0.5, 0, 0.25, 1, 1.0001, 3] (the edges: 0 and exactly ±1)"),
        Case((_f64(2, 1, 3, gen=gen, scale=2),), "x of shape (2, 1, 3)"),
        Case((_f64(3, 4, gen=gen).T,), "a non-contiguous x (a transposed (3, 4) tensor)"),
    ]


STE_MISTAKES = {
    "that is the true derivative of sign (0 almost everywhere), which stops all learning: pass grad_output through "
    "where |x| ≤ 1.": lambda x, v: torch.zeros_like(v),
    "that is the plain straight-through estimator: the clipped one passes the gradient only where |x| ≤ 1 and "
    "returns 0 outside.": lambda x, v: v,
    "the window is closed: |x| ≤ 1 includes x = ±1 (use <=, not <).": lambda x, v: v * (x.abs() < 1),
    "the gradient is grad_output where |x| ≤ 1, not grad_output ⊙ x.": lambda x, v: v * x * (x.abs() <= 1),
    "the window is inverted: pass the gradient where |x| ≤ 1, zero it outside.": lambda x, v: v * (x.abs() > 1),
}


def check_clipped_sign_ste(ClippedSignSTE) -> None:
    """Check ``ClippedSignSTE.apply(x)``: forward ``torch.sign(x)``, backward grad_output where |x| ≤ 1, else 0.

    gradcheck does not apply: the backward is deliberately not the derivative of the forward.

    >>> class ClippedSignSTE(torch.autograd.Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         ctx.save_for_backward(x.abs() <= 1)
    ...         return torch.sign(x)
    ...     @staticmethod
    ...     def backward(ctx, grad):
    ...         (inside,) = ctx.saved_tensors
    ...         return grad * inside
    >>> check_clipped_sign_ste(ClippedSignSTE)
    ✓ ClippedSignSTE: forward is sign(x), backward passes the gradient where |x| ≤ 1 on 4 inputs
    """
    name = "ClippedSignSTE"
    apply = _apply_of(ClippedSignSTE, name)
    cases = _ste_cases()
    for case in cases:
        (x,) = case.args
        out, packed = _saved_by_forward(apply, _leaves(case.args, ()), name, case.label)
        _check_ctx_contract(out, packed, name, case.label, max_saved=1)
        compare(
            out,
            torch.sign(x),
            what=f"The forward of `{name}`",
            label=case.label,
            mistakes={
                "sign(0) is 0: torch.sign(x), not 1 for x ≥ 0 (torch.where(x >= 0, 1, −1)).": torch.where(
                    x >= 0, 1.0, -1.0
                ).to(x.dtype),
                "the forward is sign(x), not round(x).": torch.round(x),
                "the forward is sign(x), not the clamp (hardtanh) of x.": x.clamp(-1, 1),
            },
        )
        v = torch.randn(x.shape, generator=seeded(x.numel()), dtype=x.dtype)
        (got,) = call_learner(lambda: _grads_of(apply, case.args, (), v), (), f"{name}.backward", case.label)
        if got is None:
            raise ExerciseError(
                f"The backward of `{name}` returned None for {case.label}: then x gets no gradient at all."
            )
        compare(
            got,
            v * (x.abs() <= 1),
            what=f"The gradient that `{name}` passes back",
            label=case.label,
            mistakes={hint: wrong(x, v) for hint, wrong in STE_MISTAKES.items()},
        )
    passed(f"{name}: forward is sign(x), backward passes the gradient where |x| ≤ 1 on {len(cases)} inputs")
