"""Checkers for chapter 00 (welcome): derivatives by hand, checked against autograd.

The chapter works out d/dx [x² sin x] (:func:`check_derivative` is the demo of what a check
prints); the exercises ask for what the page does not show, SiLU's derivative (also where
exp overflows) and the gradient of a masked mean. Every learner function runs ``BY_HAND``.
The exercises' right answers are tests/test_checks_ch00.py's cases, not these docstrings.
"""

from __future__ import annotations

import torch

from autogradlab.checks.core import BY_HAND, Case, Mistake, check_function, mistakes, seeded
from autogradlab.i18n import N_, _


def _autograd_derivative(f):
    """The element-wise derivative of ``f`` by autograd (the gradient of sum(f(x)) is f' at every element)."""

    def derivative(x: torch.Tensor, *rest) -> torch.Tensor:
        x = x.detach().requires_grad_(True)
        return torch.autograd.grad(f(x, *rest).sum(), x)[0]

    return derivative


def _floats(values, label: str) -> Case:
    return Case((torch.tensor(values, dtype=torch.float64),), label)


# --------------------------------------------------------------------------- the worked example


def f(x: torch.Tensor) -> torch.Tensor:
    """The chapter's worked example f(x) = x² · sin(x), applied element-wise."""
    return x**2 * torch.sin(x)


_DERIVATIVE_HINTS = {
    "only-u'v": N_("the product rule has two terms: (u·v)' = u'·v + u·v'. You kept only u'·v = 2x·sin(x)."),
    "only-uv'": N_("the product rule has two terms: (u·v)' = u'·v + u·v'. You kept only u·v' = x²·cos(x)."),
    "sign": N_("sign error: d/dx sin(x) = +cos(x), so both terms are added."),
    "power-rule": N_("power rule: d/dx x² = 2x (you used x)."),
    "u'v'": N_("(u·v)' is not u'·v': you multiplied the two derivatives (2x·cos(x))."),
}
_DERIVATIVE_SLIPS = {
    "only-u'v": lambda x: 2 * x * torch.sin(x),
    "only-uv'": lambda x: x**2 * torch.cos(x),
    "sign": lambda x: 2 * x * torch.sin(x) - x**2 * torch.cos(x),
    "power-rule": lambda x: x * torch.sin(x) + x**2 * torch.cos(x),
    "u'v'": lambda x: 2 * x * torch.cos(x),
}
DERIVATIVE_MISTAKES = mistakes(_DERIVATIVE_HINTS, _DERIVATIVE_SLIPS)


def check_derivative(df_dx) -> None:
    """Check ``df_dx(x)`` = d/dx [x² sin x], element-wise and by hand, against autograd.

    >>> check_derivative(lambda x: 2 * x * torch.sin(x) + x**2 * torch.cos(x))
    ✓ df_dx matches the reference on 4 inputs
    """
    gen = seeded(0)
    cases = [
        _floats([0.0, 1.0, -2.0, 3.5], "x = [0, 1, -2, 3.5] (float64)"),
        Case((torch.randn(7, generator=gen, dtype=torch.float64) * 3,), _("7 random x in float64")),
        Case((torch.randn(3, 5, generator=gen) * 3,), _("x of shape (3, 5) in float32")),
        _floats(0.7, "a 0-dim x = 0.7"),
    ]
    check_function(
        df_dx, _autograd_derivative(f), cases, name="df_dx", mistakes=DERIVATIVE_MISTAKES, off_limits=BY_HAND
    )


# --------------------------------------------------------------------------- Exercise 1: SiLU


def silu(x: torch.Tensor) -> torch.Tensor:
    """SiLU (also called swish), x · sigmoid(x), applied element-wise; ``F.silu`` computes the same."""
    return x * torch.sigmoid(x)


def _silu_cases() -> list[Case]:
    gen = seeded(0)
    return [
        _floats([0.0, 1.0, -2.0, 3.5, -6.0], "x = [0, 1, -2, 3.5, -6] (float64)"),
        Case((torch.randn(7, generator=gen, dtype=torch.float64) * 4,), _("7 random x in float64")),
        Case((torch.randn(3, 5, generator=gen) * 4,), _("x of shape (3, 5) in float32")),
        Case(
            (torch.linspace(-12, 12, 9, dtype=torch.float64).reshape(3, 3).T,),
            _("a transposed (3, 3) view, x from -12 to 12"),
        ),
        _floats(0.7, "a 0-dim x = 0.7"),
        # exp(-x) overflows to inf: at x = -1000 in float64, from x ≈ -89 in float32.
        Case((torch.tensor([-1000.0, -100.0, 40.0, 1000.0]),), _("large |x|: [-1000, -100, 40, 1000] (float32)")),
    ]


_sig = torch.sigmoid


def _exp_form(x):
    e = torch.exp(-x)
    return 1 / (1 + e) + x * e / (1 + e) ** 2


_OVERFLOW = N_("exp(−x) overflows to inf for large negative x (float32 from x ≈ −89), and inf/inf is NaN: write σ' with σ itself, σ'(x) = σ(x)(1 − σ(x)), which stays finite for every x.")  # fmt: skip

_SILU_HINTS = {
    "only-sigma": N_("the product rule has two terms: (x·σ(x))' = 1·σ(x) + x·σ'(x). You kept only σ(x)."),
    "only-x-sigma'": N_("the product rule has two terms: (x·σ(x))' = 1·σ(x) + x·σ'(x). You kept only x·σ'(x)."),
    "sigma'-is-sigma": N_("σ'(x) is not σ(x) (that is exp's rule): apply the chain rule to 1 / (1 + e^(−x))."),
    "tanh-pattern": N_("1 − σ² is tanh's pattern, not sigmoid's: differentiate 1 / (1 + e^(−x)) and write the result with σ itself."),
    "denominator-not-squared": N_("the quotient rule squares the denominator: d/dx (1 + e^(−x))^(−1) = e^(−x) / (1 + e^(−x))²."),
    "sign": N_("sign error: the chain rule through e^(−x) gives −e^(−x), and the two minus signs cancel: σ' is positive."),
    "u'v'": N_("(u·v)' is not u'·v': that gives 1·σ'(x) = σ(x)(1 − σ(x)), one factor short of the product rule."),
    "x-missing": N_("the second term of the product rule is x·σ'(x): the factor x is missing (σ'(x) alone is σ(x)(1 − σ(x)))."),
    "overflow": _OVERFLOW,
}  # fmt: skip
_SILU_SLIPS = {
    "only-sigma": _sig,
    "only-x-sigma'": lambda x: x * _sig(x) * (1 - _sig(x)),
    "sigma'-is-sigma": lambda x: _sig(x) + x * _sig(x),
    "tanh-pattern": lambda x: _sig(x) + x * (1 - _sig(x) ** 2),
    "denominator-not-squared": lambda x: _sig(x) + x * (1 - _sig(x)),
    "sign": lambda x: _sig(x) - x * _sig(x) * (1 - _sig(x)),
    "u'v'": lambda x: _sig(x) * (1 - _sig(x)),
    "x-missing": lambda x: _sig(x) + _sig(x) * (1 - _sig(x)),
    "overflow": _exp_form,
}
SILU_MISTAKES = mistakes(_SILU_HINTS, _SILU_SLIPS)


def check_silu_derivative(dsilu_dx) -> None:
    """Check ``dsilu_dx(x)`` = d/dx [x · sigmoid(x)], element-wise, by hand and finite for every x, against autograd.

    >>> from autogradlab.checks.core import ExerciseError
    >>> try:
    ...     check_silu_derivative(torch.sigmoid)
    ... except ExerciseError as error:
    ...     print(f"{error.mistake}: {error.hint}")
    only-sigma: the product rule has two terms: (x·σ(x))' = 1·σ(x) + x·σ'(x). You kept only σ(x).
    """
    check_function(
        dsilu_dx,
        _autograd_derivative(silu),
        _silu_cases(),
        name="dsilu_dx",
        mistakes=SILU_MISTAKES,
        off_limits=BY_HAND,
        nonfinite=SILU_MISTAKES[-1],  # another overflowing form
    )


# --------------------------------------------------------------------------- Exercise 2: masked mean


def _masked_cases() -> list[Case]:
    gen = seeded(1)
    cases = []
    # Masks keep neither all entries nor one row's worth: a count of N, or of rows, would hide a wrong divisor.
    for shape, keep, dtype in [
        ((4, 3), 0.5, torch.float64),
        ((6,), 0.6, torch.float64),
        ((2, 5, 3), 0.7, torch.float64),
        ((5, 4), 0.4, torch.float32),
    ]:
        x = torch.randn(*shape, generator=gen, dtype=dtype)
        mask = torch.rand(*shape, generator=gen) < keep
        mask.view(-1)[:2] = torch.tensor([True, False])  # at least one kept, one masked
        count = int(mask.sum())
        label = _("x of shape {shape}, mask keeping {count} of {numel} ({dtype})").format(shape=shape, count=count, numel=x.numel(), dtype=str(dtype)[6:])  # fmt: skip
        cases.append(Case((x, mask), label, context={"num_tokens": count}))
    # A whole row masked out, as padding does to an empty sequence.
    x = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    mask = torch.tensor([[True, True, False, True], [False] * 4, [True, False, False, False]])
    cases.append(Case((x, mask), _("x of shape (3, 4) with row 1 fully masked (float64)"), context={"num_tokens": 5}))
    return cases


_MASKED_MEAN_HINTS = {
    "divided-by-numel": N_("the mean divides by the number of KEPT entries, mask.sum(), not by x.numel()."),
    "mask-missing": N_("masked-out entries do not reach the loss, so their gradient is 0: multiply by the mask."),
    "divided-by-rows": N_("the mean divides by the number of kept entries, not by x.shape[0] (the rows)."),
    "per-row-mean": N_("L is ONE mean over all kept entries of x, not a mean per row: divide by mask.sum() over the whole tensor, not by each row's count (an all-False row then needs no special case: its entries get 0)."),
    "factor-2": N_("d/dx x² = 2x: the factor 2 is missing."),
    "masked-sum": N_("this is the gradient of the masked SUM: the mean also divides by the number of kept entries."),
}  # fmt: skip
_MASKED_MEAN_SLIPS = {
    "divided-by-numel": lambda x, m: 2 * x * m / x.numel(),
    "mask-missing": lambda x, m: 2 * x / m.sum(),
    "divided-by-rows": lambda x, m: 2 * x * m / x.shape[0],
    "per-row-mean": lambda x, m: 2 * x * m / m.sum(-1, keepdim=True),  # an all-False row: 0/0 = NaN
    "factor-2": lambda x, m: x * m / m.sum(),
    "masked-sum": lambda x, m: 2 * x * m,
}
MASKED_MEAN_MISTAKES = (
    *mistakes(_MASKED_MEAN_HINTS, _MASKED_MEAN_SLIPS),
    Mistake("per-row-mean", _MASKED_MEAN_HINTS["per-row-mean"], lambda x, m: 2 * x * m / m.sum(-1, keepdim=True).clamp_min(1)),
)  # fmt: skip


def check_masked_mean_grad(grad_masked_mean) -> None:
    """Check ``grad_masked_mean(x, mask)`` = ∂/∂x of the mean of x² over the entries where ``mask`` is True, by hand.

    >>> from autogradlab.checks.core import ExerciseError
    >>> try:
    ...     check_masked_mean_grad(lambda x, mask: torch.func.grad(lambda t: (t[mask] ** 2).mean())(x))
    ... except ExerciseError as error:
    ...     print(f"{error.kind}: {error.hint}")
    off-limits: this exercise asks for the formula by hand: write the gradient with plain tensor operations; autograd is only the reference the checker uses.
    """
    check_function(
        grad_masked_mean,
        _autograd_derivative(lambda x, mask: x[mask] ** 2 / mask.sum()),
        _masked_cases(),
        name="grad_masked_mean",
        mistakes=MASKED_MEAN_MISTAKES,
        off_limits=BY_HAND,
    )
