"""Chapter 00 checkers: right answers in several forms pass; typical wrong ones, and autograd, get their hint."""

import re

import pytest
import torch
import torch.nn.functional as F

from autogradlab.checks.ch00 import (
    _masked_cases,
    _silu_cases,
    check_derivative,
    check_masked_mean_grad,
    check_silu_derivative,
)
from autogradlab.checks.core import ExerciseError

CORRECT_DERIVATIVES = {
    "product rule": lambda x: 2 * x * torch.sin(x) + x**2 * torch.cos(x),
    "factored": lambda x: x * (2 * torch.sin(x) + x * torch.cos(x)),
}

WRONG_DERIVATIVES = {
    "only first term": (lambda x: 2 * x * torch.sin(x), "You kept only u'·v"),
    "only second term": (lambda x: x**2 * torch.cos(x), "You kept only u·v'"),
    "sign error": (lambda x: 2 * x * torch.sin(x) - x**2 * torch.cos(x), "sign error"),
    "power rule": (lambda x: x * torch.sin(x) + x**2 * torch.cos(x), "power rule"),
    "multiplied derivatives": (lambda x: 2 * x * torch.cos(x), "multiplied the two derivatives"),
    "torch.func": (
        lambda x: torch.func.vmap(torch.func.grad(lambda t: t**2 * torch.sin(t)))(x.reshape(-1)).reshape(x.shape),
        "used autograd",
    ),
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


def sig(x):
    return torch.sigmoid(x)


CORRECT_SILU = {
    "product rule": lambda x: sig(x) + x * sig(x) * (1 - sig(x)),
    "factored": lambda x: sig(x) * (1 + x * (1 - sig(x))),
    "sigmoid(-x) form": lambda x: sig(x) * (1 + x * sig(-x)),
    "exp form": lambda x: (1 + torch.exp(-x) + x * torch.exp(-x)) / (1 + torch.exp(-x)) ** 2,
    "via silu": lambda x: sig(x) + F.silu(x) * (1 - sig(x)),
}


def silu_autograd(x):
    x = x.clone().requires_grad_(True)
    (x * sig(x)).sum().backward()
    return x.grad


def silu_torch_func(x):
    return torch.func.vmap(torch.func.grad(lambda t: t * torch.sigmoid(t)))(x.reshape(-1)).reshape(x.shape)


def silu_in_place(x):
    s = sig(x)
    x.mul_(1 - s)  # writes into the caller's x
    return s + s * x


WRONG_SILU = {
    "only sigma": (lambda x: sig(x), "You kept only σ(x)"),
    "only x sigma'": (lambda x: x * sig(x) * (1 - sig(x)), "You kept only x·σ'(x)"),
    "sigma' = sigma": (lambda x: sig(x) + x * sig(x), "σ'(x) is not σ(x)"),
    "tanh pattern": (lambda x: sig(x) + x * (1 - sig(x) ** 2), "tanh's pattern"),
    "denominator not squared": (lambda x: sig(x) + x * torch.exp(-x) / (1 + torch.exp(-x)), "squares the denominator"),
    "sign error": (lambda x: sig(x) - x * sig(x) * (1 - sig(x)), "sign error"),
    "multiplied derivatives": (lambda x: sig(x) * (1 - sig(x)), "(u·v)' is not u'·v'"),
    "autograd": (silu_autograd, "used autograd"),
    "torch.func": (silu_torch_func, "used autograd"),
    "in place": (silu_in_place, "changed its input in place"),
    "not implemented": (lambda x: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    "python float": (lambda x: float((sig(x) * (1 + x * (1 - sig(x)))).sum()), "Python number"),
    "flattened": (lambda x: (sig(x) * (1 + x * (1 - sig(x)))).reshape(-1), "layout"),
    "lost dtype": (lambda x: (sig(x) * (1 + x * (1 - sig(x)))).float(), "Dtype"),
}


@pytest.mark.parametrize("name", CORRECT_SILU)
def test_correct_silu_derivatives_pass(name, capsys):
    check_silu_derivative(CORRECT_SILU[name])
    assert capsys.readouterr().out.startswith("✓ dsilu_dx")


@pytest.mark.parametrize("name", WRONG_SILU)
def test_wrong_silu_derivatives_are_rejected_with_their_hint(name):
    answer, hint = WRONG_SILU[name]
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_silu_derivative(answer)


def test_silu_cases_cover_both_tails_and_a_non_contiguous_input():
    xs = [c.args[0] for c in _silu_cases()]
    assert min(float(x.min()) for x in xs) <= -6 and max(float(x.max()) for x in xs) >= 6
    assert any(not x.is_contiguous() for x in xs) and any(x.dtype == torch.float32 for x in xs)


CORRECT_MASKED = {
    "mask over count": lambda x, mask: 2 * x * mask / mask.sum(),
    "where": lambda x, mask: torch.where(mask, 2 * x / mask.sum(), torch.zeros_like(x)),
    "index assignment": lambda x, mask: torch.zeros_like(x).index_put_((mask,), 2 * x[mask] / mask.sum()),
    "float mask, count_nonzero": lambda x, mask: 2 * x * mask.to(x.dtype) / torch.count_nonzero(mask),
    "masked_fill": lambda x, mask: (2 * x / int(mask.sum())).masked_fill(~mask, 0.0),
}


def masked_autograd(x, mask):
    x = x.clone().requires_grad_(True)
    (x[mask] ** 2).mean().backward()
    return x.grad


def masked_zeroes_input(x, mask):
    x[~mask] = 0  # writes into the caller's x
    return 2 * x / mask.sum()


WRONG_MASKED = {
    "divide by numel": (lambda x, mask: 2 * x * mask / x.numel(), "not by x.numel()"),
    "gradient leaks to masked entries": (lambda x, mask: 2 * x / mask.sum(), "multiply by the mask"),
    "divide by rows": (lambda x, mask: 2 * x * mask / x.shape[0], "not by x.shape[0]"),
    "missing 2": (lambda x, mask: x * mask / mask.sum(), "factor 2 is missing"),
    "masked sum": (lambda x, mask: 2 * x * mask, "masked SUM"),
    "only the kept entries": (lambda x, mask: 2 * x[mask] / mask.sum(), "Shape"),
    "scalar": (lambda x, mask: (2 * x * mask / mask.sum()).sum(), "single number"),
    "autograd": (masked_autograd, "used autograd"),
    "mutates x": (masked_zeroes_input, "changed its input in place"),
}


@pytest.mark.parametrize("name", CORRECT_MASKED)
def test_correct_masked_mean_gradients_pass(name, capsys):
    check_masked_mean_grad(CORRECT_MASKED[name])
    assert capsys.readouterr().out.startswith("✓ grad_masked_mean")


@pytest.mark.parametrize("name", WRONG_MASKED)
def test_wrong_masked_mean_gradients_are_rejected_with_their_hint(name):
    answer, hint = WRONG_MASKED[name]
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_masked_mean_grad(answer)


def test_masks_keep_neither_everything_nor_a_row_count():
    for case in _masked_cases():
        x, mask = case.args
        kept = int(mask.sum())
        assert 0 < kept < x.numel() and kept != x.shape[0], case.label
    assert any((~c.args[1]).all(dim=-1).any() for c in _masked_cases() if c.args[1].dim() == 2)
