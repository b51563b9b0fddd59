"""Chapter 03 checkers: right answers in several forms pass, typical wrong ones get their hint."""

import math

import pytest
import torch

from autogradlab.checks.ch03 import check_hvp, check_mean_vjp, check_softmax_vjp, check_sum_to_shape
from autogradlab.checks.core import ExerciseError


def rejected(checker, answer, hint):
    with pytest.raises(ExerciseError) as info:
        checker(answer)
    assert hint in str(info.value), str(info.value)


# --------------------------------------------------------------------------- softmax_vjp


def softmax_vjp_by_jacobian(y, v, dim):
    """Build each slice's Jacobian diag(y) − y yᵀ explicitly: slow, but right."""
    y_last, v_last = y.movedim(dim, -1), v.movedim(dim, -1)
    J = torch.diag_embed(y_last) - y_last.unsqueeze(-1) * y_last.unsqueeze(-2)
    return (v_last.unsqueeze(-2) @ J).squeeze(-2).movedim(-1, dim)


CORRECT_SOFTMAX = {
    "keepdim": lambda y, v, dim: y * (v - (v * y).sum(dim, keepdim=True)),
    "two terms": lambda y, v, dim: y * v - y * (y * v).sum(dim=dim, keepdim=True),
    "explicit jacobian": softmax_vjp_by_jacobian,
    "autograd via log": lambda y, v, dim: torch.func.vjp(lambda t: torch.softmax(t, dim), y.log())[1](v)[0],
}

WRONG_SOFTMAX = {
    "diagonal only": (lambda y, v, dim: y * v, "only the diagonal"),
    "sum over everything": (lambda y, v, dim: y * (v - (v * y).sum()), "runs over the softmax dim only"),
    "hard-coded last dim": (lambda y, v, dim: y * (v - (v * y).sum(-1, keepdim=True)), "you summed over the last dim"),
    "hard-coded dim 0": (lambda y, v, dim: y * (v - (v * y).sum(0, keepdim=True)), "you summed over dim 0"),
    "unweighted sum": (lambda y, v, dim: y * (v - v.sum(dim, keepdim=True)), "needs the weights y"),
    "no keepdim": (lambda y, v, dim: y * (v - (v * y).sum(dim)), "keepdim=True"),
    "sign": (lambda y, v, dim: y * ((v * y).sum(dim, keepdim=True) - v), "sign is flipped"),
    "not implemented": (lambda y, v, dim: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
}


@pytest.mark.parametrize("name", CORRECT_SOFTMAX)
def test_correct_softmax_vjp_passes(name, capsys):
    check_softmax_vjp(CORRECT_SOFTMAX[name])
    assert capsys.readouterr().out.startswith("✓ softmax_vjp")


@pytest.mark.parametrize("name", WRONG_SOFTMAX)
def test_wrong_softmax_vjp_is_rejected_with_its_hint(name):
    rejected(check_softmax_vjp, *WRONG_SOFTMAX[name])


# --------------------------------------------------------------------------- sum_to_shape


def sum_to_shape_by_loop(grad, shape):
    """Sum the leading dims away, then every dim where b has size 1, keeping it."""
    while grad.dim() > len(shape):
        grad = grad.sum(0)
    for i, size in enumerate(shape):
        if size == 1 and grad.shape[i] != 1:
            grad = grad.sum(i, keepdim=True)
    return grad


CORRECT_SUM_TO_SHAPE = {
    "sum_to_size": lambda grad, shape: grad.sum_to_size(shape),
    "loop": sum_to_shape_by_loop,
    "autograd": lambda grad, shape: torch.func.vjp(lambda b: torch.zeros_like(grad) + b, torch.zeros(shape, dtype=grad.dtype))[1](grad)[0],
}

WRONG_SUM_TO_SHAPE = {
    "always dim 0": (lambda grad, shape: grad.sum(0), "always summing over dim 0"),
    "leading only": (lambda grad, shape: grad.sum(0) if grad.dim() > len(shape) else grad, "size-1 dim of b"),
    "mean": (lambda grad, shape: grad.sum_to_size(shape) * math.prod(shape) / grad.numel(), "a mean where a sum"),
    "no keepdim": (lambda grad, shape: sum_to_shape_by_loop(grad, shape).reshape(-1), "shape"),
    "returns grad": (lambda grad, shape: grad, "Shape: got"),
}


@pytest.mark.parametrize("name", CORRECT_SUM_TO_SHAPE)
def test_correct_sum_to_shape_passes(name, capsys):
    check_sum_to_shape(CORRECT_SUM_TO_SHAPE[name])
    assert capsys.readouterr().out.startswith("✓ sum_to_shape")


@pytest.mark.parametrize("name", WRONG_SUM_TO_SHAPE)
def test_wrong_sum_to_shape_is_rejected_with_its_hint(name):
    rejected(check_sum_to_shape, *WRONG_SUM_TO_SHAPE[name])


# --------------------------------------------------------------------------- mean_vjp

CORRECT_MEAN = {
    "unsqueeze expand": lambda v, x_shape, dim: v.unsqueeze(dim).expand(x_shape) / x_shape[dim],
    "ones times": lambda v, x_shape, dim: torch.ones(x_shape, dtype=v.dtype) * v.unsqueeze(dim) / x_shape[dim],
    "repeat_interleave": lambda v, x_shape, dim: (v.unsqueeze(dim).repeat_interleave(x_shape[dim], dim)
                                                  / x_shape[dim]),
}

WRONG_MEAN = {
    "no division": (lambda v, x_shape, dim: v.unsqueeze(dim).expand(x_shape), "divides by x_shape[dim]"),
    "divided by numel": (lambda v, x_shape, dim: v.unsqueeze(dim).expand(x_shape) / math.prod(x_shape),
                         "not by the number of elements"),
    "no unsqueeze": (lambda v, x_shape, dim: v.expand(x_shape) / x_shape[dim], "v.unsqueeze(dim) puts it back"),
    "unsqueeze last": (lambda v, x_shape, dim: v.unsqueeze(-1).expand(x_shape) / x_shape[dim], "unsqueeze(dim)"),
    "lost dtype": (lambda v, x_shape, dim: (v.unsqueeze(dim).expand(x_shape) / x_shape[dim]).float(), "Dtype"),
}


@pytest.mark.parametrize("name", CORRECT_MEAN)
def test_correct_mean_vjp_passes(name, capsys):
    check_mean_vjp(CORRECT_MEAN[name])
    assert capsys.readouterr().out.startswith("✓ mean_vjp")


@pytest.mark.parametrize("name", WRONG_MEAN)
def test_wrong_mean_vjp_is_rejected_with_its_hint(name):
    rejected(check_mean_vjp, *WRONG_MEAN[name])


# --------------------------------------------------------------------------- hvp


def hvp_double_backward(f, x, v):
    x = x.detach().requires_grad_(True)
    (g,) = torch.autograd.grad(f(x), x, create_graph=True)
    return torch.autograd.grad((g * v).sum(), x)[0]


def hvp_backward_with_gradient(f, x, v):
    x = x.detach().requires_grad_(True)
    (g,) = torch.autograd.grad(f(x), x, create_graph=True)
    g.backward(v)
    return x.grad


def hvp_full_hessian(f, x, v):
    H = torch.autograd.functional.hessian(f, x)
    return (H.reshape(x.numel(), x.numel()) @ v.reshape(-1)).reshape(x.shape)


CORRECT_HVP = {
    "double backward": hvp_double_backward,
    "backward(gradient=v)": hvp_backward_with_gradient,
    "full hessian": hvp_full_hessian,
    "autograd.functional.hvp": lambda f, x, v: torch.autograd.functional.hvp(f, x, v)[1],
}


def hvp_no_create_graph(f, x, v):
    x = x.detach().requires_grad_(True)
    (g,) = torch.autograd.grad(f(x), x)
    return torch.autograd.grad((g * v).sum(), x)[0]


WRONG_HVP = {
    "gradient": (lambda f, x, v: torch.func.grad(f)(x), "that is the gradient"),
    "gradient times v": (lambda f, x, v: torch.func.grad(f)(x) * v, "element-wise"),
    "no create_graph": (hvp_no_create_graph, "create_graph=True"),
    "v H v scalar": (lambda f, x, v: (hvp_double_backward(f, x, v) * v).sum(), "single number"),
}


@pytest.mark.parametrize("name", CORRECT_HVP)
def test_correct_hvp_passes(name, capsys):
    check_hvp(CORRECT_HVP[name])
    assert capsys.readouterr().out.startswith("✓ hvp")


@pytest.mark.parametrize("name", WRONG_HVP)
def test_wrong_hvp_is_rejected_with_its_hint(name):
    rejected(check_hvp, *WRONG_HVP[name])


def test_cases_are_not_trivial():
    from autogradlab.checks.ch03 import _hvp_cases, _softmax_cases

    # a Hessian that is not diagonal, so H v is not an element-wise product
    f, x, _ = _hvp_cases()[2].args
    H = torch.autograd.functional.hessian(f, x)
    assert (H - torch.diag(torch.diag(H))).abs().max() > 1e-3
    dims = {c.args[2] for c in _softmax_cases()}
    assert {-1, 0, 1} <= dims
