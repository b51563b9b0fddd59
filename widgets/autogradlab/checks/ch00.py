"""Checkers for chapter 00 (welcome): two warm-up derivatives, checked against autograd."""

from __future__ import annotations

import torch

from autogradlab.checks.core import Case, check_function, seeded


def f(x: torch.Tensor) -> torch.Tensor:
    """The warm-up function f(x) = x² · sin(x), applied element-wise."""
    return x**2 * torch.sin(x)


def _autograd_derivative(x: torch.Tensor) -> torch.Tensor:
    # Element-wise f, so the gradient of sum(f(x)) is f'(x) at every element.
    x = x.detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(f(x).sum(), x)
    return grad


def _derivative_cases() -> list[Case]:
    gen = seeded(0)
    return [
        Case((torch.tensor([0.0, 1.0, -2.0, 3.5], dtype=torch.float64),), "x = [0, 1, -2, 3.5] (float64)"),
        Case((torch.randn(7, generator=gen, dtype=torch.float64) * 3,), "7 random x in float64"),
        Case((torch.randn(3, 5, generator=gen) * 3,), "x of shape (3, 5) in float32"),
        Case((torch.tensor(0.7, dtype=torch.float64),), "a 0-dim x = 0.7"),
    ]


DERIVATIVE_MISTAKES = {
    "the product rule has two terms: (u·v)' = u'·v + u·v'. You kept only u'·v = 2x·sin(x).":
        lambda x: 2 * x * torch.sin(x),
    "the product rule has two terms: (u·v)' = u'·v + u·v'. You kept only u·v' = x²·cos(x).":
        lambda x: x**2 * torch.cos(x),
    "sign error: d/dx sin(x) = +cos(x), so both terms are added.":
        lambda x: 2 * x * torch.sin(x) - x**2 * torch.cos(x),
    "power rule: d/dx x² = 2x (you used x).":
        lambda x: x * torch.sin(x) + x**2 * torch.cos(x),
    "(u·v)' is not u'·v': you multiplied the two derivatives (2x·cos(x)).":
        lambda x: 2 * x * torch.cos(x),
}


def check_derivative(df_dx) -> None:
    """Check ``df_dx(x)`` = d/dx [x² sin x], element-wise, against autograd.

    >>> check_derivative(lambda x: 2 * x * torch.sin(x) + x**2 * torch.cos(x))
    ✓ df_dx matches the reference on 4 inputs
    """
    check_function(df_dx, _autograd_derivative, _derivative_cases(), name="df_dx", mistakes=DERIVATIVE_MISTAKES)


def _autograd_grad_of_mean_square(x: torch.Tensor) -> torch.Tensor:
    x = x.detach().requires_grad_(True)
    (grad,) = torch.autograd.grad((x**2).mean(), x)
    return grad


def _mean_square_cases() -> list[Case]:
    gen = seeded(1)
    shapes = [(6,), (4, 3), (2, 5, 3)]
    cases = []
    for shape in shapes:
        x = torch.randn(*shape, generator=gen, dtype=torch.float64)
        n = x.numel()
        cases.append(Case((x,), f"x of shape {shape}", context={"batch_size": n}))
    return cases


MEAN_SQUARE_MISTAKES = {
    "the mean divides by the number of elements x.numel(), not by x.shape[0] (the rows).":
        lambda x: 2 * x / x.shape[0],
    "d/dx x² = 2x: the factor 2 is missing.":
        lambda x: x / x.numel(),
}


def check_grad_of_mean_square(grad_mean_square) -> None:
    """Check ``grad_mean_square(x)`` = ∂/∂x mean(x²) = 2x / N against autograd.

    >>> check_grad_of_mean_square(lambda x: 2 * x / x.numel())
    ✓ grad_mean_square matches the reference on 3 inputs
    """
    check_function(
        grad_mean_square,
        _autograd_grad_of_mean_square,
        _mean_square_cases(),
        name="grad_mean_square",
        mistakes=MEAN_SQUARE_MISTAKES,
    )
