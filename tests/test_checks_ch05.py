"""Chapter 05 checkers: correct custom Functions pass, typical wrong ones get their hint."""

import pytest
import torch

from autogradlab.checks.ch05 import (
    check_linear_function,
    check_logsumexp_function,
    check_safe_norm_function,
    check_straight_through_round,
)
from autogradlab.checks.core import ExerciseError


def function_class(name, forward, backward, **extra):
    """A torch.autograd.Function subclass built from two plain functions."""
    body = {"forward": staticmethod(forward), "backward": staticmethod(backward), **extra}
    return type(name, (torch.autograd.Function,), body)


def rejected(checker, cls, hint):
    with pytest.raises(ExerciseError) as info:
        checker(cls)
    assert hint in str(info.value), str(info.value)
    return str(info.value)


# --------------------------------------------------------------------------- LinearFunction


def linear_forward(ctx, x, W, b):
    ctx.save_for_backward(x, W)
    return x @ W + b


def linear_class(dx, dW, db):
    def backward(ctx, G):
        x, W = ctx.saved_tensors
        return dx(x, W, G), dW(x, W, G), db(G)
    return function_class("LinearFunction", linear_forward, backward)


def linear_needs_input_grad():
    def backward(ctx, G):
        x, W = ctx.saved_tensors
        dx = G @ W.T if ctx.needs_input_grad[0] else None
        dW = x.T @ G if ctx.needs_input_grad[1] else None
        db = G.sum(0) if ctx.needs_input_grad[2] else None
        return dx, dW, db
    return function_class("LinearFunction", linear_forward, backward)


def linear_ctx_attributes():
    def forward(ctx, x, W, b):
        ctx.x, ctx.W = x, W  # works, but skips the in-place safety checks of save_for_backward
        return torch.addmm(b, x, W)

    def backward(ctx, G):
        return torch.einsum("ne,de->nd", G, ctx.W), torch.einsum("nd,ne->de", ctx.x, G), G.sum(dim=0)
    return function_class("LinearFunction", forward, backward)


CORRECT_LINEAR = {
    "plain": lambda: linear_class(lambda x, W, G: G @ W.T, lambda x, W, G: x.T @ G, lambda G: G.sum(0)),
    "needs_input_grad": linear_needs_input_grad,
    "ctx attributes and einsum": linear_ctx_attributes,
}


def linear_two_grads():
    def backward(ctx, G):
        x, W = ctx.saved_tensors
        return G @ W.T, x.T @ G
    return function_class("LinearFunction", linear_forward, backward)


def linear_none_for_b():
    def backward(ctx, G):
        x, W = ctx.saved_tensors
        return G @ W.T, x.T @ G, None
    return function_class("LinearFunction", linear_forward, backward)


WRONG_LINEAR = {
    "db mean": (lambda: linear_class(lambda x, W, G: G @ W.T, lambda x, W, G: x.T @ G, lambda G: G.mean(0)),
                "G.sum(0)"),
    "dW / N": (lambda: linear_class(lambda x, W, G: G @ W.T, lambda x, W, G: x.T @ G / len(x), lambda G: G.sum(0)),
               "divided by the batch size"),
    "dx sign": (lambda: linear_class(lambda x, W, G: -G @ W.T, lambda x, W, G: x.T @ G, lambda G: G.sum(0)),
                "the gradient of `x` (input 0) is wrong"),
    "dx no transpose": (lambda: linear_class(lambda x, W, G: G @ W, lambda x, W, G: x.T @ G, lambda G: G.sum(0)),
                        "one gradient per forward input"),
    "two grads": (linear_two_grads, "incorrect number of gradients"),
    "None for b": (linear_none_for_b, "returned None for `b`"),
    "wrong forward": (lambda: function_class("LinearFunction", lambda ctx, x, W, b: x @ W,
                                             lambda ctx, G: (None, None, None)), "The forward of `LinearFunction`"),
}


@pytest.mark.parametrize("name", CORRECT_LINEAR)
def test_correct_linear_function_passes(name, capsys):
    check_linear_function(CORRECT_LINEAR[name]())
    assert capsys.readouterr().out.startswith("✓ LinearFunction")


@pytest.mark.parametrize("name", WRONG_LINEAR)
def test_wrong_linear_function_is_rejected_with_its_hint(name):
    make, hint = WRONG_LINEAR[name]
    rejected(check_linear_function, make(), hint)


def test_gradcheck_failure_names_the_input_and_the_size_of_the_error():
    make, _ = WRONG_LINEAR["db mean"]
    message = rejected(check_linear_function, make(), "gradcheck fails for `LinearFunction`")
    assert "the gradient of `b` (input 2) is wrong" in message and "differ by up to" in message
    assert "The gradients of `x`, `W` are right" in message


@pytest.mark.filterwarnings("ignore:.*should not be instantiated")
def test_class_apply_is_accepted_and_other_things_are_explained(capsys):
    cls = CORRECT_LINEAR["plain"]()
    check_linear_function(cls.apply)
    assert capsys.readouterr().out.startswith("✓")
    for wrong in (cls(), lambda x, W, b: x @ W + b, 3):
        with pytest.raises(ExerciseError, match="should be a class deriving from torch.autograd.Function"):
            check_linear_function(wrong)


# --------------------------------------------------------------------------- LogSumExp


def lse_stable_forward(ctx, x):
    m = x.max(dim=-1, keepdim=True).values
    y = m.squeeze(-1) + (x - m).exp().sum(-1).log()
    ctx.save_for_backward(x, y)
    return y


def lse_naive_forward(ctx, x):
    y = x.exp().sum(-1).log()
    ctx.save_for_backward(x, y)
    return y


def lse_backward(ctx, grad):
    x, y = ctx.saved_tensors
    return grad.unsqueeze(-1) * (x - y.unsqueeze(-1)).exp()


def lse_backward_softmax(ctx, grad):
    x, _ = ctx.saved_tensors
    return grad[..., None] * torch.softmax(x, dim=-1)


CORRECT_LSE = {
    "stable, exp(x - y)": lambda: function_class("LogSumExp", lse_stable_forward, lse_backward),
    "torch.logsumexp, softmax": lambda: function_class(
        "LogSumExp", lambda ctx, x: (ctx.save_for_backward(x, x) or torch.logsumexp(x, -1)), lse_backward_softmax),
}

WRONG_LSE = {
    "naive forward": (lambda: function_class("LogSumExp", lse_naive_forward, lse_backward), "Subtract the row maximum"),
    "forgot grad": (lambda: function_class("LogSumExp", lse_stable_forward,
                                           lambda ctx, g: torch.softmax(ctx.saved_tensors[0], -1)), "forgot grad_output"),
    "exp not softmax": (lambda: function_class("LogSumExp", lse_stable_forward,
                                               lambda ctx, g: g.unsqueeze(-1) * ctx.saved_tensors[0].exp()),
                        "not exp(x)"),
    "no unsqueeze": (lambda: function_class("LogSumExp", lse_stable_forward,
                                            lambda ctx, g: g * torch.softmax(ctx.saved_tensors[0], -1)),
                     "grad_output.unsqueeze(-1)"),
    "softmax wrong dim": (lambda: function_class("LogSumExp", lse_stable_forward,
                                                 lambda ctx, g: g.unsqueeze(-1) * torch.softmax(ctx.saved_tensors[0], 0)),
                          "the gradient of `x` (input 0) is wrong"),
}


@pytest.mark.parametrize("name", CORRECT_LSE)
def test_correct_logsumexp_passes(name, capsys):
    check_logsumexp_function(CORRECT_LSE[name]())
    assert capsys.readouterr().out.startswith("✓ LogSumExp")


@pytest.mark.parametrize("name", WRONG_LSE)
def test_wrong_logsumexp_is_rejected_with_its_hint(name):
    make, hint = WRONG_LSE[name]
    rejected(check_logsumexp_function, make(), hint)


# --------------------------------------------------------------------------- SafeNorm


def norm_forward(ctx, x):
    norm = x.pow(2).sum(-1).sqrt()
    ctx.save_for_backward(x, norm)
    return norm


def norm_backward_where(ctx, grad):
    x, norm = ctx.saved_tensors
    n = norm.unsqueeze(-1)
    return grad.unsqueeze(-1) * torch.where(n > 0, x / torch.where(n > 0, n, 1.0), 0.0)


def norm_backward_clamp(ctx, grad):
    x, norm = ctx.saved_tensors
    return grad.unsqueeze(-1) * x / norm.unsqueeze(-1).clamp_min(1e-12)


def norm_backward_nan(ctx, grad):
    x, norm = ctx.saved_tensors
    return grad.unsqueeze(-1) * x / norm.unsqueeze(-1)


CORRECT_NORM = {
    "where": lambda: function_class("SafeNorm", norm_forward, norm_backward_where),
    "clamp": lambda: function_class("SafeNorm", norm_forward, norm_backward_clamp),
}

WRONG_NORM = {
    "nan at zero": (lambda: function_class("SafeNorm", norm_forward, norm_backward_nan), "0 / 0 = NaN"),
    "forgot grad": (lambda: function_class("SafeNorm", norm_forward, lambda ctx, g: norm_backward_where(
        ctx, torch.ones_like(g))), "forgot grad_output"),
    "x not normalised": (lambda: function_class("SafeNorm", norm_forward,
                                                lambda ctx, g: g.unsqueeze(-1) * ctx.saved_tensors[0]),
                         "not x: divide by the norm"),
    "no unsqueeze": (lambda: function_class("SafeNorm", norm_forward, lambda ctx, g: g * ctx.saved_tensors[0]),
                     "grad_output.unsqueeze(-1)"),
    "squared norm forward": (lambda: function_class("SafeNorm", lambda ctx, x: x.pow(2).sum(-1),
                                                    lambda ctx, g: g), "The forward of `SafeNorm`"),
}


@pytest.mark.parametrize("name", CORRECT_NORM)
def test_correct_safe_norm_passes(name, capsys):
    check_safe_norm_function(CORRECT_NORM[name]())
    assert capsys.readouterr().out.startswith("✓ SafeNorm")


@pytest.mark.parametrize("name", WRONG_NORM)
def test_wrong_safe_norm_is_rejected_with_its_hint(name):
    make, hint = WRONG_NORM[name]
    rejected(check_safe_norm_function, make(), hint)


# --------------------------------------------------------------------------- StraightThroughRound

CORRECT_STE = {
    "identity": lambda: function_class("StraightThroughRound", lambda ctx, x: torch.round(x), lambda ctx, g: g),
    "clone": lambda: function_class("StraightThroughRound", lambda ctx, x: x.round(), lambda ctx, g: g.clone()),
}

WRONG_STE = {
    "true derivative": (lambda: function_class("StraightThroughRound", lambda ctx, x: torch.round(x),
                                               lambda ctx, g: torch.zeros_like(g)), "true derivative of round"),
    "clipped": (lambda: function_class("StraightThroughRound",
                                       lambda ctx, x: (ctx.save_for_backward(x), torch.round(x))[1],
                                       lambda ctx, g: g * (ctx.saved_tensors[0].abs() <= 1)), "'clipped'"),
    "floor": (lambda: function_class("StraightThroughRound", lambda ctx, x: torch.floor(x), lambda ctx, g: g),
              "not down (torch.floor)"),
    "None": (lambda: function_class("StraightThroughRound", lambda ctx, x: torch.round(x), lambda ctx, g: None),
             "returned None"),
    "times x": (lambda: function_class("StraightThroughRound",
                                       lambda ctx, x: (ctx.save_for_backward(x), torch.round(x))[1],
                                       lambda ctx, g: g * ctx.saved_tensors[0]), "not grad_output ⊙ x"),
}


@pytest.mark.parametrize("name", CORRECT_STE)
def test_correct_ste_passes(name, capsys):
    check_straight_through_round(CORRECT_STE[name]())
    assert capsys.readouterr().out.startswith("✓ StraightThroughRound")


@pytest.mark.parametrize("name", WRONG_STE)
def test_wrong_ste_is_rejected_with_its_hint(name):
    make, hint = WRONG_STE[name]
    rejected(check_straight_through_round, make(), hint)


def test_the_checker_runs_gradcheck_itself(monkeypatch):
    calls = []

    def failing_gradcheck(*args, **kwargs):
        calls.append(kwargs)
        return False

    monkeypatch.setattr(torch.autograd, "gradcheck", failing_gradcheck)
    with pytest.raises(ExerciseError, match="gradcheck fails"):
        check_linear_function(CORRECT_LINEAR["plain"]())
    assert calls and calls[0]["raise_exception"] is False
