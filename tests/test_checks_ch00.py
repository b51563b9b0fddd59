"""Chapter 00 checkers: right answers in several forms pass; typical wrong ones, and autograd, are named."""

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


def rejected(checker, answer) -> ExerciseError:
    with pytest.raises(ExerciseError) as info:
        checker(answer)
    return info.value


def not_implemented(*args):
    raise NotImplementedError()


CORRECT_DERIVATIVES = {
    "product rule": lambda x: 2 * x * torch.sin(x) + x**2 * torch.cos(x),
    "factored": lambda x: x * (2 * torch.sin(x) + x * torch.cos(x)),
}

WRONG_DERIVATIVES = {  # answer, (kind, mistake)
    "only first term": (lambda x: 2 * x * torch.sin(x), ("value", "only-u'v")),
    "only second term": (lambda x: x**2 * torch.cos(x), ("value", "only-uv'")),
    "sign error": (lambda x: 2 * x * torch.sin(x) - x**2 * torch.cos(x), ("value", "sign")),
    "power rule": (lambda x: x * torch.sin(x) + x**2 * torch.cos(x), ("value", "power-rule")),
    "multiplied derivatives": (lambda x: 2 * x * torch.cos(x), ("value", "u'v'")),
    "torch.func": (
        lambda x: torch.func.vmap(torch.func.grad(lambda t: t**2 * torch.sin(t)))(x.reshape(-1)).reshape(x.shape),
        ("off-limits", None),
    ),
}


@pytest.mark.parametrize("name", CORRECT_DERIVATIVES)
def test_correct_derivatives_pass(name, capsys):
    check_derivative(CORRECT_DERIVATIVES[name])
    assert capsys.readouterr().out.startswith("✓ df_dx")


@pytest.mark.parametrize("name", WRONG_DERIVATIVES)
def test_wrong_derivatives_are_rejected_with_their_hint(name):
    answer, (kind, mistake) = WRONG_DERIVATIVES[name]
    error = rejected(check_derivative, answer)
    assert error.kind == kind and error.hint
    assert mistake is None or error.mistake == mistake


def sig(x):
    return torch.sigmoid(x)


CORRECT_SILU = {
    "product rule": lambda x: sig(x) + x * sig(x) * (1 - sig(x)),
    "factored": lambda x: sig(x) * (1 + x * (1 - sig(x))),
    "sigmoid(-x) form": lambda x: sig(x) * (1 + x * sig(-x)),
    "via silu": lambda x: sig(x) + F.silu(x) * (1 - sig(x)),
    "sigmoid by hand, then sigma itself": lambda x: (lambda s: s * (1 + x * (1 - s)))(1 / (1 + torch.exp(-x))),
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


def silu_exp_quotient(x):
    e = torch.exp(-x)
    return (1 + e + x * e) / (1 + e) ** 2  # inf/inf = NaN where exp(-x) overflows


WRONG_SILU = {  # answer, (kind, mistake or None)
    "only sigma": (lambda x: sig(x), ("value", "only-sigma")),
    "only x sigma'": (lambda x: x * sig(x) * (1 - sig(x)), ("value", "only-x-sigma'")),
    "sigma' = sigma": (lambda x: sig(x) + x * sig(x), ("value", "sigma'-is-sigma")),
    "tanh pattern": (lambda x: sig(x) + x * (1 - sig(x) ** 2), ("value", "tanh-pattern")),
    "denominator not squared": (
        lambda x: sig(x) + x * torch.exp(-x) / (1 + torch.exp(-x)),
        ("value", "denominator-not-squared"),
    ),
    "sign error": (lambda x: sig(x) - x * sig(x) * (1 - sig(x)), ("value", "sign")),
    "multiplied derivatives": (lambda x: sig(x) * (1 - sig(x)), ("value", "u'v'")),
    "x missing in the second term": (lambda x: sig(x) + sig(x) * (1 - sig(x)), ("value", "x-missing")),
    "exp form, overflows": (
        lambda x: 1 / (1 + torch.exp(-x)) + x * torch.exp(-x) / (1 + torch.exp(-x)) ** 2,
        ("not-finite", "overflow"),
    ),
    "exp quotient, overflows": (silu_exp_quotient, ("not-finite", "overflow")),
    "autograd": (silu_autograd, ("off-limits", None)),
    "torch.func": (silu_torch_func, ("off-limits", None)),
    "in place": (silu_in_place, ("changed-input", None)),
    "not implemented": (not_implemented, ("not-implemented", None)),
    "python float": (lambda x: float((sig(x) * (1 + x * (1 - sig(x)))).sum()), ("type", None)),
    "flattened": (lambda x: (sig(x) * (1 + x * (1 - sig(x)))).reshape(-1), ("shape", "layout")),
    "lost dtype": (lambda x: (sig(x) * (1 + x * (1 - sig(x)))).float(), ("dtype", None)),
}


@pytest.mark.parametrize("name", CORRECT_SILU)
def test_correct_silu_derivatives_pass(name, capsys):
    check_silu_derivative(CORRECT_SILU[name])
    assert capsys.readouterr().out.startswith("✓ dsilu_dx")


@pytest.mark.parametrize("name", WRONG_SILU)
def test_wrong_silu_derivatives_are_rejected_with_their_hint(name):
    answer, (kind, mistake) = WRONG_SILU[name]
    error = rejected(check_silu_derivative, answer)
    assert error.kind == kind
    assert mistake is None or (error.mistake, error.hint is not None) == (mistake, True)


def test_silu_cases_cover_both_tails_overflow_and_a_non_contiguous_input():
    xs = [c.args[0] for c in _silu_cases()]
    assert min(float(x.min()) for x in xs) <= -1000 and max(float(x.max()) for x in xs) >= 1000
    assert any(not torch.isfinite(torch.exp(-x)).all() for x in xs if x.dtype == torch.float32)
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


def per_row_mean(x, mask):
    return 2 * x * mask / mask.sum(-1, keepdim=True).clamp_min(1)


def per_row_mean_nan(x, mask):
    return 2 * x * mask / mask.sum(-1, keepdim=True)  # 0/0 in an all-False row


WRONG_MASKED = {
    "divide by numel": (lambda x, mask: 2 * x * mask / x.numel(), ("value", "divided-by-numel")),
    "gradient leaks to masked entries": (lambda x, mask: 2 * x / mask.sum(), ("value", "mask-missing")),
    "divide by rows": (lambda x, mask: 2 * x * mask / x.shape[0], ("value", "divided-by-rows")),
    "a mean per row": (per_row_mean, ("value", "per-row-mean")),
    "a mean per row, NaN in an empty row": (per_row_mean_nan, (None, "per-row-mean")),
    "missing 2": (lambda x, mask: x * mask / mask.sum(), ("value", "factor-2")),
    "masked sum": (lambda x, mask: 2 * x * mask, ("value", "masked-sum")),
    "only the kept entries": (lambda x, mask: 2 * x[mask] / mask.sum(), ("shape", None)),
    "scalar": (lambda x, mask: (2 * x * mask / mask.sum()).sum(), ("shape", "one-number")),
    "autograd": (masked_autograd, ("off-limits", None)),
    "mutates x": (masked_zeroes_input, ("changed-input", None)),
}


@pytest.mark.parametrize("name", CORRECT_MASKED)
def test_correct_masked_mean_gradients_pass(name, capsys):
    check_masked_mean_grad(CORRECT_MASKED[name])
    assert capsys.readouterr().out.startswith("✓ grad_masked_mean")


@pytest.mark.parametrize("name", WRONG_MASKED)
def test_wrong_masked_mean_gradients_are_rejected_with_their_hint(name):
    answer, (kind, mistake) = WRONG_MASKED[name]
    error = rejected(check_masked_mean_grad, answer)
    assert kind is None or error.kind == kind
    assert mistake is None or (error.mistake, error.hint is not None) == (mistake, True)


def test_masks_keep_neither_everything_nor_a_row_count():
    for case in _masked_cases():
        x, mask = case.args
        kept = int(mask.sum())
        assert 0 < kept < x.numel() and kept != x.shape[0], case.label
    assert any((~c.args[1]).all(dim=-1).any() for c in _masked_cases() if c.args[1].dim() == 2)


def test_a_wrong_derivative_is_explained_in_chinese(monkeypatch):
    monkeypatch.setenv("AUTOGRADLAB_LANG", "zh")
    error = rejected(check_derivative, lambda x: 2 * x * torch.sin(x))
    assert (error.kind, error.mistake) == ("value", "only-u'v")
    assert "`df_dx` 不对（x = [0, 1, -2, 3.5] (float64)）。" in str(error) and "提示：乘积法则有两项" in str(error)
