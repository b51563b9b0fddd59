"""Checkers for chapter 03 (vector-Jacobian products): hand-written VJPs vs autograd, and a Hessian-vector product.

Each checker holds the contract its exercise states, not only the numbers:

- The two VJP rules are by hand (autograd off limits, no graph), and the built-in that would
  do the work is refused (softmax's backward kernel, ``Tensor.sum_to_size`` for the add).
- "Without building J": one input is large enough that a Jacobian (or Hessian) is hundreds of
  times bigger than any tensor the right answer needs. :class:`_Footprint` (a dispatch mode)
  watches every op the learner's function runs, the largest tensor it creates and how many
  ops; an answer that builds J or H, or loops over its rows, is rejected with the sizes.
- The upstream vectors are random, never all ones (with v = ones every softmax rule that is
  zero there looks right, and scale mistakes vanish); inputs cover several dims, size-1 dims,
  non-contiguous views, float32 as well as float64.

The exercises' right answers are tests/test_checks_ch03.py's cases, not these docstrings.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from autogradlab.checks.core import (
    Case,
    ExerciseError,
    LearnerCall,
    OffLimits,
    autograd_routines,
    check_function,
    clones,
    compare,
    mistakes,
    passed,
    routines,
    seeded,
)
from autogradlab.i18n import N_, _
from autogradlab.torch_internals import TorchDispatchMode, tree_leaves
from autogradlab.units import format_bytes

# --------------------------------------------------------------------------- shared parts


class _OverBudget(RuntimeError):
    """Raised inside the learner's code when it exceeds the checker's budget of bytes or ops."""


class _Footprint(TorchDispatchMode):
    """Watches every op a call runs (forward and backward): how many, and the largest tensor storage created.

    Exceeding a limit sets ``exceeded`` and raises at once, so a loop over the rows
    of a Hessian stops after the budget instead of running n backward passes.
    """

    def __init__(self, max_bytes: float = math.inf, max_ops: float = math.inf):
        super().__init__()
        self.max_bytes, self.max_ops = max_bytes, max_ops
        self.ops, self.largest = 0, 0
        self.exceeded = ""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.layout == torch.strided:
                self.largest = max(self.largest, t.untyped_storage().nbytes())
        if not self.exceeded:
            self.exceeded = "bytes" if self.largest > self.max_bytes else "ops" if self.ops > self.max_ops else ""
            if self.exceeded:
                raise _OverBudget(f"over the checker's budget ({self.exceeded})")
        return out


def _bytes_of(args) -> int:
    return max((t.untyped_storage().nbytes() for t in tree_leaves(args) if isinstance(t, torch.Tensor)), default=0)


def _watched(footprint: _Footprint, call: Callable, *args) -> Any:
    """``call(*args)`` under ``footprint``: an error the budget raised inside the learner's code is the footprint's to report."""
    try:
        with footprint:
            return call(*args)
    except ExerciseError as error:
        if error.kind == "off-limits" or not footprint.exceeded:
            raise


# An answer needs tensors the size of its inputs and output, a few at a time (an upcast
# doubles them); a Jacobian of the large case below is n times bigger, n ≥ 128.
_SIZE_SLACK = 16
_BY_HAND = N_("this exercise asks for the VJP rule by hand, from tensor operations; autograd is only the reference.")


def _check_vjp(fn, reference, cases, large: Case, *, name, what_not, mistakes, error_hints, no_j, refused=()) -> None:
    """A by-hand VJP checker: first the footprint on the large case, then values on every case."""
    off_limits = OffLimits(autograd=True, no_graph=True, routines=refused, why=_BY_HAND)
    needed = max(_bytes_of(large.args), _bytes_of(reference(*large.args)))
    footprint = _Footprint(max_bytes=_SIZE_SLACK * needed)
    _watched(footprint, LearnerCall(fn, name, off_limits, error_hints).on(large.label), *clones(large.args))
    if footprint.exceeded:
        summary = _("`{name}` built {what_not} for {label}: it created a tensor of {largest}, while its inputs and output take at most {needed} each.").format(name=name, what_not=what_not, label=large.label, largest=format_bytes(footprint.largest), needed=format_bytes(needed))  # fmt: skip
        measured = {"largest_bytes": footprint.largest, "needed_bytes": needed}
        hint = _("a VJP rule never needs J: {no_j}").format(no_j=no_j)
        raise ExerciseError("contract", summary, hint=hint, mistake="built-jacobian", measured=measured)
    check_function(
        fn, reference, [*cases, large], name=name, mistakes=mistakes, error_hints=error_hints, off_limits=off_limits
    )


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# --------------------------------------------------------------------------- softmax


def _softmax_reference(y, v, dim):
    # softmax(log y) = y because each slice of y sums to 1: recover an input with this output.
    # Where y underflowed to 0, log y = -inf gives y = 0 back and a zero gradient, as softmax does.
    x = y.log().detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(torch.softmax(x, dim), x, v)
    return grad


def _softmax_case(x: torch.Tensor, dim: int, label: str, seed: int) -> Case:
    y = torch.softmax(x, dim)
    v = torch.randn(y.shape, generator=seeded(seed), dtype=x.dtype)
    return Case((y, v, dim), _("{label}, softmax over dim={dim} ({dtype_name})").format(label=label, dim=dim, dtype_name=_dtype_name(x.dtype)))  # fmt: skip


def _softmax_cases() -> list[Case]:
    cases = []
    for shape, dim, dtype, seed in [
        ((4, 3), -1, torch.float64, 0),
        ((3, 5), 0, torch.float64, 1),
        ((2, 3, 4), 1, torch.float64, 2),
        ((1, 6), -1, torch.float64, 3),
        ((5, 1), -1, torch.float64, 4),
        ((3, 4), -1, torch.float32, 5),
    ]:
        x = torch.randn(*shape, generator=seeded(seed), dtype=dtype) * 1.5
        cases.append(_softmax_case(x, dim, _("y of shape {shape}").format(shape=shape), seed + 100))
    # Rows of very different ranges: the second row is almost one-hot, with entries that underflow to 0.
    x = torch.randn(2, 5, generator=seeded(6), dtype=torch.float32) * torch.tensor([[1.0], [80.0]])
    cases.append(_softmax_case(x, -1, _("y of shape (2, 5) whose rows have very different ranges"), 106))
    # A transposed view: strides that code using .view() or assuming the last dim is contiguous gets wrong.
    y, v, _dim = _softmax_case(torch.randn(5, 3, generator=seeded(7), dtype=torch.float64), 0, "", 107).args
    label = _("y of shape (3, 5), non-contiguous (a transposed view), softmax over dim=1 (float64)")
    cases.append(Case((y.mT, v.mT.contiguous(), 1), label))
    return cases


def _softmax_large() -> Case:
    x = torch.randn(2, 1024, generator=seeded(8), dtype=torch.float64)
    return _softmax_case(x, -1, _("y of shape (2, 1024)"), 108)


_SOFTMAX_HINTS = {
    "diagonal-only": N_("that is only the diagonal of the Jacobian, y ⊙ v. The Jacobian of softmax is diag(y) − y yᵀ: subtract y times (v · y summed over dim)."),
    "sum-over-all": N_("the sum (v ⊙ y).sum(...) runs over the softmax dim only, one number per slice, not over the whole tensor."),
    "last-dim": N_("you summed over the last dim; the softmax was taken over `dim`, so sum over `dim` (keepdim=True)."),
    "dim-0": N_("you summed over dim 0; the softmax was taken over `dim`, so sum over `dim` (keepdim=True)."),
    "unweighted-sum": N_("the sum needs the weights y: subtract (v ⊙ y).sum(dim), not v.sum(dim)."),
    "second-term-without-y": N_("the second term is missing its factor y: vᵀ(y yᵀ) = (v · y) yᵀ, so it is y times the sum, not the sum alone."),
    "first-term-without-y": N_("the first term needs its factor y too: vᵀ diag(y) = y ⊙ v, not v."),
}  # fmt: skip
_SOFTMAX_SLIPS = {
    "diagonal-only": lambda y, v, dim: y * v,
    "sum-over-all": lambda y, v, dim: y * (v - (v * y).sum()),
    "last-dim": lambda y, v, dim: y * (v - (v * y).sum(-1, keepdim=True)),
    "dim-0": lambda y, v, dim: y * (v - (v * y).sum(0, keepdim=True)),
    "unweighted-sum": lambda y, v, dim: y * (v - v.sum(dim, keepdim=True)),
    "second-term-without-y": lambda y, v, dim: y * v - (v * y).sum(dim, keepdim=True),
    "first-term-without-y": lambda y, v, dim: v - y * (v * y).sum(dim, keepdim=True),
}
SOFTMAX_MISTAKES = mistakes(_SOFTMAX_HINTS, _SOFTMAX_SLIPS)


def check_softmax_vjp(softmax_vjp) -> None:
    """Check ``softmax_vjp(y, v, dim)`` = vᵀJ for y = softmax(x, dim), by hand from y, without building J.

    >>> try:
    ...     check_softmax_vjp(lambda y, v, dim: torch.func.vjp(lambda x: x.softmax(dim), y.log())[1](v)[0])
    ... except ExerciseError as error:
    ...     print(f"{error.kind}: {error.hint}")
    off-limits: this exercise asks for the VJP rule by hand, from tensor operations; autograd is only the reference.
    """
    _check_vjp(
        softmax_vjp,
        _softmax_reference,
        _softmax_cases(),
        _softmax_large(),
        name="softmax_vjp",
        what_not=_("the Jacobian of each slice"),
        mistakes=SOFTMAX_MISTAKES,
        refused=(*routines(torch, "torch", "_softmax_backward_data"), *routines(torch.ops.aten, "torch.ops.aten", "_softmax_backward_data")),
        error_hints=_("work along `dim` with sums that keep it (keepdim=True), so the per-slice number broadcasts back against y; .view() fails on a non-contiguous y, reductions over `dim` do not."),
        no_j=_("expand vᵀ(diag(y) − y yᵀ) on paper; it is y ⊙ v minus y times one number per slice."),
    )  # fmt: skip


# --------------------------------------------------------------------------- broadcasting add


def _sum_to_shape_reference(grad, shape):
    b = torch.zeros(shape, dtype=grad.dtype, requires_grad=True)
    x = torch.zeros(grad.shape, dtype=grad.dtype)
    (g,) = torch.autograd.grad(x + b, b, grad)
    return g


def _sum_to_shape_case(grad: torch.Tensor, shape: tuple, note: str = "") -> Case:
    copies = grad.numel() // max(math.prod(shape), 1)
    label = _("grad of shape {shape}{note} → b of shape {shape2} ({dtype_name})").format(shape=tuple(grad.shape), note=note, shape2=shape, dtype_name=_dtype_name(grad.dtype))  # fmt: skip
    return Case((grad, shape), label, context={"batch_size": copies})


def _sum_to_shape_cases() -> list[Case]:
    cases = []
    for out_shape, shape, dtype, seed in [
        ((5, 4), (4,), torch.float64, 10),
        ((5, 4), (5, 1), torch.float64, 11),
        ((2, 3, 4), (3, 1), torch.float64, 12),
        ((3, 2, 4), (1, 2, 4), torch.float64, 13),
        ((2, 3, 4), (), torch.float64, 14),
        ((4, 3), (4, 3), torch.float64, 15),
        ((1, 5), (5,), torch.float64, 16),
        ((3, 1, 4), (1, 1, 4), torch.float64, 17),
        ((2, 3, 4, 5), (3, 1, 1), torch.float64, 18),
        ((6, 2, 3), (2, 1), torch.float32, 19),
    ]:
        cases.append(_sum_to_shape_case(torch.randn(*out_shape, generator=seeded(seed), dtype=dtype), shape))
    grad = torch.randn(4, 3, generator=seeded(20), dtype=torch.float64).mT
    cases.append(_sum_to_shape_case(grad, (3, 1), _(", non-contiguous")))
    return cases


def _sum_to_shape_large() -> Case:
    return _sum_to_shape_case(torch.randn(64, 128, generator=seeded(21), dtype=torch.float64), (128,))


def _sum_leading(grad, shape):
    return grad.sum(tuple(range(grad.dim() - len(shape)))) if grad.dim() > len(shape) else grad


def _sum_matched_from_the_left(grad, shape):
    for i, size in enumerate(shape):
        if size == 1 and grad.shape[i] != 1:
            grad = grad.sum(i, keepdim=True)
    while grad.dim() > len(shape):
        grad = grad.sum(-1)
    return grad


def _stretched_summed(grad, shape):
    """The leading dims summed away, then b's size-1 dims summed without keepdim (a slip)."""
    grad = _sum_leading(grad, shape)
    dims = tuple(i for i, size in enumerate(shape) if size == 1 and grad.shape[i] != 1)
    return grad.sum(dims) if dims else grad


_SUM_TO_SHAPE_HINTS = {
    "dim-0": N_("always summing over dim 0 is not enough: sum over exactly the dims along which b was broadcast (the leading dims b does not have, and its size-1 dims)."),
    "leading-only": N_("only the missing leading dims were summed: a size-1 dim of b was stretched too, so also sum over it with keepdim=True."),
    "no-keepdim": N_("a size-1 dim of b was summed away: sum over it with keepdim=True, so the result keeps b's shape."),
    "mean": N_("a mean where a sum was meant: b was added at every broadcast position, so each position adds its gradient."),
    "from-the-left": N_("broadcasting matches dims from the right: b's last dim lines up with grad's last dim, and the extra dims of grad are on the left."),
    "reshape-sum": N_("grad.reshape(-1, *shape).sum(0) regroups elements in memory order: it matches the broadcast only when b's dims are all full size. Sum over the dims where b has size 1 (keepdim=True) instead."),
    "empty-dims": N_("grad.sum(()) with an empty tuple of dims sums over every dim: when b was not broadcast at all, grad is already the answer."),
}  # fmt: skip
_SUM_TO_SHAPE_SLIPS = {
    "dim-0": lambda grad, shape: grad.sum(0),
    "leading-only": _sum_leading,
    "no-keepdim": _stretched_summed,
    "mean": lambda grad, shape: grad.sum_to_size(shape) * (math.prod(shape) / grad.numel()),
    "from-the-left": _sum_matched_from_the_left,
    "reshape-sum": lambda grad, shape: grad.reshape(-1, *shape).sum(0),
    "empty-dims": lambda grad, shape: grad.sum(()),
}
SUM_TO_SHAPE_MISTAKES = mistakes(_SUM_TO_SHAPE_HINTS, _SUM_TO_SHAPE_SLIPS)


def check_sum_to_shape(sum_to_shape) -> None:
    """Check ``sum_to_shape(grad, shape)``: the VJP of ``x + b`` w.r.t. a broadcast ``b``, by hand, no ``sum_to_size``.

    >>> try:
    ...     check_sum_to_shape(lambda grad, shape: grad.sum_to_size(shape))
    ... except ExerciseError as error:
    ...     print(f"{error.kind} {error.mistake}: {error.hint}")
    off-limits `Tensor.sum_to_size`: this exercise asks for the VJP rule by hand, from tensor operations; autograd is only the reference.
    """
    _check_vjp(
        sum_to_shape,
        _sum_to_shape_reference,
        _sum_to_shape_cases(),
        _sum_to_shape_large(),
        name="sum_to_shape",
        what_not=_("the Jacobian of the broadcast"),
        mistakes=SUM_TO_SHAPE_MISTAKES,
        error_hints=_("compare shapes from the right: grad's extra leading dims are summed away, and dims where b has size 1 are summed with keepdim=True. Mind `grad.sum(dim=())`: an empty tuple of dims sums over EVERY dim (a 0-dim result), so skip the sum when there is nothing to reduce."),
        no_j=_("each entry of b collects the upstream values of the positions it was copied to: a sum."),
        refused=routines(torch.Tensor, "Tensor", "sum_to_size"),
    )  # fmt: skip


# --------------------------------------------------------------------------- Hessian-vector product

_A = torch.randn(3, 5, generator=seeded(30), dtype=torch.float64)
_C = torch.tensor([0.5, -2.0], dtype=torch.float64)


def _mlp(X, y):
    def f(W1, b1, W2):
        return ((torch.tanh(X @ W1 + b1) @ W2).squeeze(-1) - y).pow(2).mean()

    return f


_X_SMALL = torch.randn(6, 3, generator=seeded(31), dtype=torch.float64)
_Y_SMALL = torch.randn(6, generator=seeded(32), dtype=torch.float64)
_X_LARGE = torch.randn(16, 48, generator=seeded(33), dtype=torch.float64)
_Y_LARGE = torch.randn(16, generator=seeded(34), dtype=torch.float64)

_MLP = "f(W1, b1, W2) = mean((tanh(X W1 + b1) W2 − y)²)"
_HVP_FUNCTIONS = {  # label (every term of f): f, parameter shapes, dtype
    "f(x) = Σ x·sin(x)": (lambda x: (x * torch.sin(x)).sum(), [(4,)], torch.float64),
    "f(x) = logsumexp(x)": (lambda x: torch.logsumexp(x, 0), [(6,)], torch.float64),
    "f(x) = Σ tanh(A x)² (A is 3 × 5)": (lambda x: (torch.tanh(_A.to(x.dtype) @ x) ** 2).sum(), [(5,)], torch.float32),
    "f(X) = Σ_rows logsumexp(X[r]) + Σ X[:, 0:1] ⊙ X (X is 2 × 3)": (lambda x: torch.logsumexp(x, 1).sum() + (x[:, :1] * x).sum(), [(2, 3)], torch.float64),
    f"{_MLP}, a 3-4-1 MLP on 6 examples": (_mlp(_X_SMALL, _Y_SMALL), [(3, 4), (4,), (4, 1)], torch.float64),
    "f(w, s) = Σ tanh(A w)² + s · c: s enters only through s · c, with constant coefficients c": (lambda w, s: (torch.tanh(_A @ w) ** 2).sum() + (s * _C).sum(), [(5,), (2,)], torch.float64),
    "f(p, q) = Σ p ⊙ q + Σ tanh(q)²: linear in p, but its gradient in p is q": (lambda p, q: (p * q).sum() + (torch.tanh(q) ** 2).sum(), [(3,), (3,)], torch.float64),
}  # fmt: skip
_HVP_LARGE = (f"{_MLP}, a 48-40-1 MLP (2,000 parameters)", _mlp(_X_LARGE, _Y_LARGE), [(48, 40), (40,), (40, 1)], torch.float64)  # fmt: skip


def _hvp_reference(f, params, vs):
    return list(torch.func.jvp(torch.func.grad(lambda ps: f(*ps)), (tuple(params),), (tuple(vs),))[1])


def _two_passes(f, params, vs, *, cross_terms=True):
    """H v by reverse over reverse: the budget's yardstick, and (without cross terms) a typical mistake."""
    ps = [p.detach().requires_grad_(True) for p in params]
    grads = torch.autograd.grad(f(*ps), ps, create_graph=True)
    if cross_terms:
        dot = sum((g * v).sum() for g, v in zip(grads, vs))
        return list(torch.autograd.grad(dot, ps, materialize_grads=True))
    return [
        torch.autograd.grad((g * v).sum(), p, retain_graph=True, materialize_grads=True)[0]
        if g.requires_grad
        else torch.zeros_like(p)
        for g, v, p in zip(grads, vs, ps)
    ]


def _hvp_case(label, f, shapes, dtype, seed) -> Case:
    gen = seeded(seed)
    params = [torch.randn(*s, generator=gen, dtype=dtype) for s in shapes]
    vs = [torch.randn(*s, generator=gen, dtype=dtype) for s in shapes]
    return Case((f, params, vs), _("{label}, parameter shapes {value} ({dtype_name})").format(label=label, value=[tuple(s) for s in shapes], dtype_name=_dtype_name(dtype)))  # fmt: skip


def _hvp_cases() -> list[Case]:
    return [_hvp_case(label, *spec, seed) for seed, (label, spec) in enumerate(_HVP_FUNCTIONS.items(), 40)]


def _hvp_large() -> Case:
    return _hvp_case(*_HVP_LARGE, 49)


def _grads(f, params):
    ps = [p.detach().requires_grad_(True) for p in params]
    return list(torch.autograd.grad(f(*ps), ps, materialize_grads=True))


_HVP_HINTS = {
    "gradient": N_("that is the gradient ∇f, not H v: differentiate the scalar Σᵢ ∇ᵢf · vᵢ with respect to the parameters a second time."),
    "gradient-times-v": N_("∇f ⊙ v multiplies the gradient by v element-wise; H v needs a second derivative: differentiate Σᵢ ∇ᵢf · vᵢ with respect to the parameters."),
    "no-cross-terms": N_("the cross terms are missing: H couples the parameters (∂²f/∂pᵢ∂pⱼ), so differentiate ONE scalar, Σᵢ ∇ᵢf · vᵢ over all parameters, with respect to all of them, not each block on its own."),
    "zero-block": N_("this block is not zero. Linear in a parameter does not make its block zero: a block of H v is zero only when its parameter p enters f through terms with constant coefficients, f = cᵀp + g(other parameters): then ∇ₚf = c depends on nothing. For Σ p ⊙ q, ∇ₚf = q, so the p-block is v_q."),
}  # fmt: skip
_HVP_SLIPS = {
    "gradient": lambda f, params, vs: _grads(f, params),
    "gradient-times-v": lambda f, params, vs: [g * v for g, v in zip(_grads(f, params), vs)],
    "zero-block": lambda f, params, vs: [torch.zeros_like(p) for p in params],
    "no-cross-terms": lambda f, params, vs: _two_passes(f, params, vs, cross_terms=False),
}
HVP_MISTAKES = mistakes(_HVP_HINTS, _HVP_SLIPS)

_HVP_SHORTCUTS = OffLimits(
    routines=tuple(r for r in autograd_routines() if r.attr not in ("backward", "grad")),
    why=N_("this exercise asks for two reverse passes of torch.autograd.grad (or backward): torch.func and torch.autograd.functional do it for you."),
)  # fmt: skip

_HVP_ERRORS = {  # kinds of autogradlab.tracebacks.ERROR_KINDS
    "no_graph": N_("the first torch.autograd.grad needs create_graph=True: without it the gradients are plain tensors with no graph, and they cannot be differentiated again."),
    "unused": N_("the second pass finds no path to a parameter when a block of H v is zero only when its parameter p enters f through terms with constant coefficients, f = cᵀp + g(other parameters): then ∇ₚf = c depends on nothing. That zero is real: pass materialize_grads=True (or allow_unused=True and put zeros where you get None)."),
    "freed": N_("run the second pass once, on one scalar and all parameters together, or keep the graph with retain_graph=True between passes."),
}  # fmt: skip


def check_hvp(hvp) -> None:
    """Check ``hvp(f, params, vs)`` = H v for a scalar ``f(*params)`` and H its Hessian over all parameters.

    Two reverse passes of torch.autograd.grad; no torch.func or torch.autograd.functional, no
    Hessian (n × n) and no loop over its rows: a 2,000-parameter case has a budget of ops and bytes
    set by the double backward itself. The blocks come back as plain tensors, without a graph.

    >>> try:
    ...     check_hvp(lambda f, params, vs: torch.autograd.functional.hvp(f, tuple(params), tuple(vs))[1])
    ... except ExerciseError as error:
    ...     print(f"{error.kind} {error.mistake}: {error.hint}")
    off-limits `torch.autograd.functional.hvp`: this exercise asks for two reverse passes of torch.autograd.grad (or backward): torch.func and torch.autograd.functional do it for you.
    """
    learner = LearnerCall(hvp, "hvp", _HVP_SHORTCUTS, _HVP_ERRORS)
    cases = [*_hvp_cases(), _hvp_large()]
    for case in cases:
        f, params, vs = case.args
        yardstick = _Footprint()
        with yardstick:
            _two_passes(f, params, vs)
        # Generous: a few extra passes or flat copies pass; n passes or an n × n tensor (n = 2,000) do not.
        footprint = _Footprint(max_bytes=max(8 * yardstick.largest, 64 * 2**10), max_ops=4 * yardstick.ops + 200)
        learner_params, learner_vs = [p.clone() for p in params], [v.clone() for v in vs]
        got = _watched(footprint, learner.on(case.label), f, learner_params, learner_vs)
        if footprint.exceeded:
            what = _("created a tensor of {largest}").format(largest=format_bytes(footprint.largest))
            what = what if footprint.exceeded == "bytes" else _("ran more than {ops:,} tensor ops").format(ops=footprint.ops)  # fmt: skip
            summary = _("`hvp` {what} for {label}; two reverse passes take {ops:,} ops and at most {largest} per tensor.").format(what=what, label=case.label, ops=yardstick.ops, largest=format_bytes(yardstick.largest))  # fmt: skip
            hint = _("H v never needs H (n × n) or one backward pass per row of H: differentiate the single scalar Σᵢ ∇ᵢf · vᵢ (built with create_graph=True) once more.")  # fmt: skip
            raise ExerciseError("contract", summary, hint=hint, mistake="built-hessian")
        _check_hvp_inputs(params, vs, learner_params, learner_vs, case.label)
        _compare_blocks(got, _hvp_reference(f, params, vs), f, params, vs, case.label)
    passed(_("hvp matches the reference on {n} inputs").format(n=len(cases)))


def _check_hvp_inputs(params, vs, learner_params, learner_vs, label) -> None:
    if any(p.requires_grad for p in learner_params):
        hint = _("that changes the caller's parameters; work on copies: p.detach().requires_grad_(True).")
        summary = _("`hvp` switched on requires_grad of the tensors it was given, for {label}.").format(label=label)
        raise ExerciseError("changed-input", summary, hint=hint, mistake="requires-grad-switched-on")
    if not all(torch.equal(a, b.detach()) for a, b in zip([*params, *vs], [*learner_params, *learner_vs])):
        hint = _("an in-place op (`p -= ...`, `v.mul_(...)`) modifies the caller's tensor.")
        raise ExerciseError("changed-input", _("`hvp` changed its input in place for {label}.").format(label=label), hint=hint)  # fmt: skip


def _compare_blocks(got, expected, f, params, vs, label) -> None:
    if isinstance(got, torch.Tensor) and len(params) > 1:
        hint = _("return a list with one block of H v per parameter, each shaped like its parameter.")
        summary = _("`hvp` returned one tensor for {label}, which has {n} parameters.").format(label=label, n=len(params))  # fmt: skip
        raise ExerciseError("type", summary, hint=hint)
    got = [got] if isinstance(got, torch.Tensor) else got
    if not isinstance(got, (list, tuple)) or len(got) != len(params):
        length = f" of length {len(got)}" if isinstance(got, (list, tuple)) else ""
        summary = _("`hvp` should return a list of {n} tensor(s) for {label}, one per parameter; it returned {type}{length}.").format(n=len(params), label=label, type=type(got).__name__, length=length)  # fmt: skip
        hint = _("torch.autograd.grad returns a tuple with one gradient per input: that is the right shape.")
        raise ExerciseError("type", summary, hint=hint)
    wrong = {m: m.compute(f, params, vs) for m in HVP_MISTAKES}
    for i, (block, reference) in enumerate(zip(got, expected)):
        what = _("block {i} of `hvp` (the parameter of shape {shape})").format(i=i, shape=tuple(params[i].shape))
        if block is None:
            hint = _("allow_unused=True gives None where the second pass finds no path, here because a block of H v is zero only when its parameter p enters f through terms with constant coefficients, f = cᵀp + g(other parameters): then ∇ₚf = c depends on nothing: that block of H v is truly zero, so return zeros (materialize_grads=True does that).")  # fmt: skip
            raise ExerciseError("type", _("`hvp` returned None for {what} for {label}.").format(what=what, label=label), hint=hint, mistake="none-block")  # fmt: skip
        if isinstance(block, torch.Tensor) and block.requires_grad:
            summary = _("{what} carries a graph of its own (grad_fn={node}) for {label}.").format(what=what, node=block.grad_fn and block.grad_fn.name(), label=label)  # fmt: skip
            hint = _("only the first pass needs create_graph=True (its gradient is differentiated again); the second pass returns the answer: without create_graph its blocks are plain tensors, and no graph of two backward passes stays alive in memory.")  # fmt: skip
            raise ExerciseError("contract", summary, hint=hint, mistake="keeps-graph")
        compare(block, reference, what=what, label=label, mistakes={m: values[i] for m, values in wrong.items()})
