"""Checkers for chapter 03 (vector-Jacobian products): hand-written VJPs vs autograd, and a Hessian-vector product.

The upstream vectors are random, never all ones: with v = ones the VJP of
softmax is zero for every formula that keeps the structure, and scale
mistakes vanish. Reductions are checked over several dims, with size-1 dims
and float32 as well as float64.

>>> check_mean_vjp(lambda v, x_shape, dim: v.unsqueeze(dim).expand(x_shape) / x_shape[dim])
✓ mean_vjp matches the reference on 6 inputs
"""

from __future__ import annotations

import math

import torch

from autogradlab.checks.core import Case, check_function, seeded

# --------------------------------------------------------------------------- softmax


def _softmax_reference(y, v, dim):
    # softmax(log y) = y because each slice of y sums to 1: recover an input with this output.
    x = y.log().requires_grad_(True)
    (grad,) = torch.autograd.grad(torch.softmax(x, dim), x, v)
    return grad


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
        gen = seeded(seed)
        y = torch.softmax(torch.randn(*shape, generator=gen, dtype=dtype) * 1.5, dim)
        v = torch.randn(*shape, generator=gen, dtype=dtype)
        cases.append(Case((y, v, dim), f"y of shape {shape}, softmax over dim={dim} ({str(dtype)[6:]})"))
    return cases


SOFTMAX_MISTAKES = {
    "that is only the diagonal of the Jacobian, y ⊙ v. The Jacobian of softmax is diag(y) − y yᵀ: "
    "subtract y ⊙ (v·y summed over dim).":
        lambda y, v, dim: y * v,
    "the sum (v ⊙ y).sum(...) runs over the softmax dim only, one number per slice, not over the whole tensor.":
        lambda y, v, dim: y * (v - (v * y).sum()),
    "you summed over the last dim; the softmax was taken over `dim`, so sum over `dim` (keepdim=True).":
        lambda y, v, dim: y * (v - (v * y).sum(-1, keepdim=True)),
    "you summed over dim 0; the softmax was taken over `dim`, so sum over `dim` (keepdim=True).":
        lambda y, v, dim: y * (v - (v * y).sum(0, keepdim=True)),
    "the sum needs the weights y: subtract (v ⊙ y).sum(dim), not v.sum(dim).":
        lambda y, v, dim: y * (v - v.sum(dim, keepdim=True)),
}


def check_softmax_vjp(softmax_vjp) -> None:
    """Check ``softmax_vjp(y, v, dim)`` = vᵀJ for y = softmax(x, dim), computed from y without building J.

    >>> check_softmax_vjp(lambda y, v, dim: y * (v - (v * y).sum(dim, keepdim=True)))
    ✓ softmax_vjp matches the reference on 6 inputs
    """
    check_function(
        softmax_vjp,
        _softmax_reference,
        _softmax_cases(),
        name="softmax_vjp",
        mistakes=SOFTMAX_MISTAKES,
        error_hint="sum with keepdim=True, so the per-slice sum keeps a size-1 dim and broadcasts back against y.",
    )


# --------------------------------------------------------------------------- broadcasting add


def _sum_to_shape_reference(grad, shape):
    b = torch.zeros(shape, dtype=grad.dtype, requires_grad=True)
    x = torch.zeros(grad.shape, dtype=grad.dtype)
    (g,) = torch.autograd.grad(x + b, b, grad)
    return g


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
        ((6, 2, 3), (2, 1), torch.float32, 17),
    ]:
        grad = torch.randn(*out_shape, generator=seeded(seed), dtype=dtype)
        copies = math.prod(out_shape) // max(math.prod(shape), 1)
        cases.append(Case((grad, shape), f"grad of shape {out_shape} → b of shape {shape} ({str(dtype)[6:]})",
                          context={"batch_size": copies}))
    return cases


def _sum_leading(grad, shape):
    return grad.sum(tuple(range(grad.dim() - len(shape)))) if grad.dim() > len(shape) else grad


SUM_TO_SHAPE_MISTAKES = {
    "always summing over dim 0 is not enough: sum over exactly the dims along which b was broadcast "
    "(the leading dims b does not have, and its size-1 dims).":
        lambda grad, shape: grad.sum(0),
    "only the missing leading dims were summed: a size-1 dim of b was stretched too, so also sum over it "
    "with keepdim=True.":
        lambda grad, shape: _sum_leading(grad, shape),
    "a mean where a sum was meant: b was added at every broadcast position, so each position adds its gradient.":
        lambda grad, shape: grad.sum_to_size(shape) * (math.prod(shape) / grad.numel()),
}


def check_sum_to_shape(sum_to_shape) -> None:
    """Check ``sum_to_shape(grad, shape)``: the VJP of ``x + b`` with respect to a broadcast ``b`` of ``shape``.

    >>> check_sum_to_shape(lambda grad, shape: grad.sum_to_size(shape))
    ✓ sum_to_shape matches the reference on 8 inputs
    """
    check_function(
        sum_to_shape,
        _sum_to_shape_reference,
        _sum_to_shape_cases(),
        name="sum_to_shape",
        mistakes=SUM_TO_SHAPE_MISTAKES,
        error_hint="compare shapes from the right: grad's extra leading dims are summed away, "
                   "and dims where b has size 1 are summed with keepdim=True.",
    )


# --------------------------------------------------------------------------- mean over a dim


def _mean_reference(v, x_shape, dim):
    x = torch.zeros(x_shape, dtype=v.dtype, requires_grad=True)
    (g,) = torch.autograd.grad(x.mean(dim), x, v)
    return g


def _mean_cases() -> list[Case]:
    cases = []
    for x_shape, dim, dtype, seed in [
        ((4, 3), 0, torch.float64, 20),
        ((4, 3), 1, torch.float64, 21),
        ((2, 3, 5), 1, torch.float64, 22),
        ((2, 3, 5), -1, torch.float64, 23),
        ((1, 4), 0, torch.float64, 24),
        ((3, 4), 0, torch.float32, 25),
    ]:
        out_shape = tuple(s for i, s in enumerate(x_shape) if i != dim % len(x_shape))
        v = torch.randn(*out_shape, generator=seeded(seed), dtype=dtype)
        cases.append(Case((v, x_shape, dim), f"x of shape {x_shape}, mean over dim={dim} ({str(dtype)[6:]})",
                          context={"batch_size": x_shape[dim]}))
    return cases


MEAN_MISTAKES = {
    "x.mean(dim) divides by x_shape[dim], and so does its VJP: each input element gets v / x_shape[dim].":
        lambda v, x_shape, dim: v.unsqueeze(dim).expand(x_shape).clone(),
    "the mean is over `dim` only: divide by x_shape[dim], not by the number of elements of x.":
        lambda v, x_shape, dim: v.unsqueeze(dim).expand(x_shape) / math.prod(x_shape),
}


def check_mean_vjp(mean_vjp) -> None:
    """Check ``mean_vjp(v, x_shape, dim)``: the VJP of ``x.mean(dim)`` (no keepdim), shaped like x.

    >>> check_mean_vjp(lambda v, x_shape, dim: v.unsqueeze(dim).expand(x_shape) / x_shape[dim])
    ✓ mean_vjp matches the reference on 6 inputs
    """
    check_function(
        mean_vjp,
        _mean_reference,
        _mean_cases(),
        name="mean_vjp",
        mistakes=MEAN_MISTAKES,
        error_hint="v has lost the reduced dim: v.unsqueeze(dim) puts it back with size 1, "
                   "so it broadcasts (expand) along that dim and nowhere else.",
    )


# --------------------------------------------------------------------------- Hessian-vector product

_A = torch.randn(3, 5, generator=seeded(30), dtype=torch.float64)

_HVP_FUNCTIONS = {
    "f(x) = Σ x·sin(x)": lambda x: (x * torch.sin(x)).sum(),
    "f(x) = logsumexp(x)": lambda x: torch.logsumexp(x.reshape(-1), 0),
    "f(x) = Σ tanh(A x)² (A is 3 × 5)": lambda x: (torch.tanh(_A.to(x.dtype) @ x) ** 2).sum(),
    "f(x) = Σ log Σ exp(x) over rows": lambda x: torch.logsumexp(x, 1).sum() + (x[:, :1] * x).sum(),
}


def _hvp_reference(f, x, v):
    return torch.func.jvp(torch.func.grad(f), (x,), (v,))[1]


def _hvp_cases() -> list[Case]:
    cases = []
    for (label, f), shape, seed in zip(_HVP_FUNCTIONS.items(), [(4,), (6,), (5,), (2, 3)], [40, 41, 42, 43]):
        gen = seeded(seed)
        x = torch.randn(*shape, generator=gen, dtype=torch.float64)
        v = torch.randn(*shape, generator=gen, dtype=torch.float64)
        cases.append(Case((f, x, v), f"{label}, x of shape {shape}"))
    return cases


def _grad(f, x):
    x = x.detach().requires_grad_(True)
    return torch.autograd.grad(f(x), x)[0]


HVP_MISTAKES = {
    "that is the gradient ∇f(x), not H v: differentiate (∇f(x) · v).sum() with respect to x a second time.":
        lambda f, x, v: _grad(f, x),
    "∇f(x) ⊙ v multiplies the gradient by v element-wise; H v needs a second derivative: "
    "differentiate (∇f(x) · v).sum() with respect to x.":
        lambda f, x, v: _grad(f, x) * v,
}


def check_hvp(hvp) -> None:
    """Check ``hvp(f, x, v)`` = ∇²f(x) v, for scalar ``f``, against torch.func (forward-over-reverse).

    >>> def hvp(f, x, v):
    ...     x = x.detach().requires_grad_(True)
    ...     (g,) = torch.autograd.grad(f(x), x, create_graph=True)
    ...     return torch.autograd.grad((g * v).sum(), x)[0]
    >>> check_hvp(hvp)
    ✓ hvp matches the reference on 4 inputs
    """
    check_function(
        hvp,
        _hvp_reference,
        _hvp_cases(),
        name="hvp",
        mistakes=HVP_MISTAKES,
        error_hint="the first torch.autograd.grad needs create_graph=True: without it the gradient is a plain "
                   "tensor with no graph, and it cannot be differentiated again.",
    )
