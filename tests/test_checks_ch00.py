"""Chapter 00 checkers: right answers in several forms pass, typical wrong ones get their hint."""

import re

import pytest
import torch

from autogradlab.checks.ch00 import check_derivative, check_grad_of_mean_square
from autogradlab.checks.core import ExerciseError

CORRECT_DERIVATIVES = {
    "product rule": lambda x: 2 * x * torch.sin(x) + x**2 * torch.cos(x),
    "factored": lambda x: x * (2 * torch.sin(x) + x * torch.cos(x)),
    "torch.func": lambda x: torch.func.vmap(torch.func.grad(lambda t: t**2 * torch.sin(t)))(x.reshape(-1)).reshape(
        x.shape
    ),
}

WRONG_DERIVATIVES = {
    "only first term": (lambda x: 2 * x * torch.sin(x), "You kept only u'·v"),
    "only second term": (lambda x: x**2 * torch.cos(x), "You kept only u·v'"),
    "sign error": (lambda x: 2 * x * torch.sin(x) - x**2 * torch.cos(x), "sign error"),
    "power rule": (lambda x: x * torch.sin(x) + x**2 * torch.cos(x), "power rule"),
    "multiplied derivatives": (lambda x: 2 * x * torch.cos(x), "multiplied the two derivatives"),
    "not implemented": (lambda x: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    "python float": (lambda x: float((2 * x * torch.sin(x) + x**2 * torch.cos(x)).sum()), "Python number"),
    "flattened": (lambda x: (2 * x * torch.sin(x) + x**2 * torch.cos(x)).reshape(-1), "layout"),
    "lost dtype": (lambda x: (2 * x * torch.sin(x) + x**2 * torch.cos(x)).float(), "Dtype"),
}


@pytest.mark.parametrize("name", CORRECT_DERIVATIVES)
def test_correct_derivatives_pass(name, capsys):
    check_derivative(CORRECT_DERIVATIVES[name])
    assert capsys.readouterr().out.startswith("✓ df_dx")


@pytest.mark.parametrize("name", WRONG_DERIVATIVES)
def test_wrong_derivatives_are_rejected_with_their_hint(name):
    answer, hint = WRONG_DERIVATIVES[name]
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_derivative(answer)


CORRECT_MEAN_SQUARE = {
    "divide by numel": lambda x: 2 * x / x.numel(),
    "mean of 2x over ones": lambda x: (2 * x) * torch.full_like(x, 1.0 / x.numel()),
}

WRONG_MEAN_SQUARE = {
    "sum not mean": (lambda x: 2 * x, "too large"),
    "rows only": (lambda x: 2 * x / x.shape[0], "not by x.shape[0]"),
    "missing 2": (lambda x: x / x.numel(), "factor 2 is missing"),
    "scalar": (lambda x: (2 * x / x.numel()).sum(), "single number"),
}


@pytest.mark.parametrize("name", CORRECT_MEAN_SQUARE)
def test_correct_mean_square_gradients_pass(name, capsys):
    check_grad_of_mean_square(CORRECT_MEAN_SQUARE[name])
    assert capsys.readouterr().out.startswith("✓ grad_mean_square")


@pytest.mark.parametrize("name", WRONG_MEAN_SQUARE)
def test_wrong_mean_square_gradients_are_rejected_with_their_hint(name):
    answer, hint = WRONG_MEAN_SQUARE[name]
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_grad_of_mean_square(answer)
