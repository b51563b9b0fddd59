"""Chapter 05 checkers: correct custom Functions pass, typical wrong ones get their hint.

Beyond the numbers, the checkers hold the contracts the exercises state: tensors through
``save_for_backward`` (never ctx attributes), ``needs_input_grad`` honoured, only what
backward needs saved, a backward that survives a double backward (SafeNorm).
"""

import pytest
import torch

from autogradlab.checks.ch05 import (
    check_clipped_sign_ste,
    check_linear_function,
    check_safe_norm_function,
    check_softplus_function,
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
    """A backward that honours needs_input_grad, with the three given gradient formulas."""

    def backward(ctx, G):
        x, W = ctx.saved_tensors
        need = ctx.needs_input_grad
        return (dx(x, W, G) if need[0] else None), (dW(x, W, G) if need[1] else None), (db(G) if need[2] else None)

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


def linear_einsum():
    def forward(ctx, x, W, b):
        ctx.save_for_backward(x, W)
        return torch.addmm(b, x, W)

    def backward(ctx, G):
        x, W = ctx.saved_tensors
        nx, nW, nb = ctx.needs_input_grad
        return (
            torch.einsum("ne,de->nd", G, W) if nx else None,
            torch.einsum("nd,ne->de", x, G) if nW else None,
            G.sum(dim=0) if nb else None,
        )

    return function_class("LinearFunction", forward, backward)


def linear_ignores_needs_input_grad():
    def backward(ctx, G):
        x, W = ctx.saved_tensors
        return G @ W.T, x.T @ G, G.sum(0)

    return function_class("LinearFunction", linear_forward, backward)


def linear_saves_everything():
    def forward(ctx, x, W, b):
        out = x @ W + b
        ctx.save_for_backward(x, W, b, out)
        return out

    def backward(ctx, G):
        x, W, _, _ = ctx.saved_tensors
        nx, nW, nb = ctx.needs_input_grad
        return (G @ W.T if nx else None), (x.T @ G if nW else None), (G.sum(0) if nb else None)

    return function_class("LinearFunction", forward, backward)


CORRECT_LINEAR = {
    "needs_input_grad": linear_needs_input_grad,
    "addmm and einsum": linear_einsum,
    "formula helper": lambda: linear_class(lambda x, W, G: G @ W.T, lambda x, W, G: x.T @ G, lambda G: G.sum(0)),
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
    "ctx attributes": (linear_ctx_attributes, "stored tensors as ctx attributes (ctx.x, ctx.W)"),
    "ignores needs_input_grad": (linear_ignores_needs_input_grad, "ctx.needs_input_grad"),
    "saves b and the output": (linear_saves_everything, "saved 4 tensors"),
    "db mean": (
        lambda: linear_class(lambda x, W, G: G @ W.T, lambda x, W, G: x.T @ G, lambda G: G.mean(0)),
        "G.sum(0)",
    ),
    "dW / N": (
        lambda: linear_class(lambda x, W, G: G @ W.T, lambda x, W, G: x.T @ G / len(x), lambda G: G.sum(0)),
        "divided by the batch size",
    ),
    "dx sign": (
        lambda: linear_class(lambda x, W, G: -G @ W.T, lambda x, W, G: x.T @ G, lambda G: G.sum(0)),
        "the gradient of `x` (input 0) is wrong",
    ),
    "dx no transpose": (
        lambda: linear_class(lambda x, W, G: G @ W, lambda x, W, G: x.T @ G, lambda G: G.sum(0)),
        "one gradient per forward input",
    ),
    "two grads": (linear_two_grads, "gradients"),
    "None for b": (linear_none_for_b, "returned None for `b`"),
    "wrong forward": (
        lambda: function_class("LinearFunction", lambda ctx, x, W, b: x @ W, lambda ctx, G: (None, None, None)),
        "The forward of `LinearFunction`",
    ),
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
    cls = CORRECT_LINEAR["needs_input_grad"]()
    check_linear_function(cls.apply)
    assert capsys.readouterr().out.startswith("✓")
    for wrong in (cls(), lambda x, W, b: x @ W + b, 3):
        with pytest.raises(ExerciseError, match="should be a class deriving from torch.autograd.Function"):
            check_linear_function(wrong)


# --------------------------------------------------------------------------- StableSoftplus


def sp_forward(ctx, x):
    ctx.save_for_backward(x)
    return x.clamp_min(0) + torch.log1p(torch.exp(-x.abs()))


def sp_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return grad * torch.sigmoid(x)


def sp_forward_saves_output(ctx, x):
    y = torch.where(x > 0, x + torch.log1p(torch.exp(-x)), torch.log1p(torch.exp(x)))
    ctx.save_for_backward(x, y)
    return y


def sp_backward_exp_x_minus_y(ctx, grad):
    x, y = ctx.saved_tensors
    return grad * torch.exp(x - y)


CORRECT_SOFTPLUS = {
    "max + log1p, sigmoid": lambda: function_class("StableSoftplus", sp_forward, sp_backward),
    "two branches, exp(x − y)": lambda: function_class(
        "StableSoftplus", sp_forward_saves_output, sp_backward_exp_x_minus_y
    ),
}


def sp_naive(ctx, x):
    ctx.save_for_backward(x)
    return torch.log(1 + torch.exp(x))


def sp_no_log1p(ctx, x):
    ctx.save_for_backward(x)
    return x.clamp_min(0) + torch.log(1 + torch.exp(-x.abs()))


def sp_attribute(ctx, x):
    ctx.x = x
    return x.clamp_min(0) + torch.log1p(torch.exp(-x.abs()))


WRONG_SOFTPLUS = {
    "naive forward overflows": (lambda: function_class("StableSoftplus", sp_naive, sp_backward), "overflows"),
    "log instead of log1p": (lambda: function_class("StableSoftplus", sp_no_log1p, sp_backward), "log1p"),
    "logsumexp of [0, x]": (
        lambda: function_class(
            "StableSoftplus",
            lambda ctx, x: (ctx.save_for_backward(x), torch.logsumexp(torch.stack([torch.zeros_like(x), x]), dim=0))[1],
            sp_backward,
        ),
        "log1p",
    ),
    "forgot grad_output": (
        lambda: function_class("StableSoftplus", sp_forward, lambda ctx, g: torch.sigmoid(ctx.saved_tensors[0])),
        "forgot grad_output",
    ),
    "exp(x) as derivative": (
        lambda: function_class("StableSoftplus", sp_forward, lambda ctx, g: g * torch.exp(ctx.saved_tensors[0])),
        "not eˣ",
    ),
    "sigmoid(−x)": (
        lambda: function_class("StableSoftplus", sp_forward, lambda ctx, g: g * torch.sigmoid(-ctx.saved_tensors[0])),
        "σ(−x)",
    ),
    "softplus as its own derivative": (
        lambda: function_class(
            "StableSoftplus", sp_forward, lambda ctx, g: g * torch.nn.functional.softplus(ctx.saved_tensors[0])
        ),
        "softplus itself",
    ),
    "ctx attribute": (
        lambda: function_class("StableSoftplus", sp_attribute, lambda ctx, g: g * torch.sigmoid(ctx.x)),
        "ctx attributes",
    ),
    "calls F.softplus": (
        lambda: function_class(
            "StableSoftplus", lambda ctx, x: (ctx.save_for_backward(x), torch.nn.functional.softplus(x))[1], sp_backward
        ),
        "calls torch's `softplus`",
    ),
}


@pytest.mark.parametrize("name", CORRECT_SOFTPLUS)
def test_correct_softplus_passes(name, capsys):
    check_softplus_function(CORRECT_SOFTPLUS[name]())
    assert capsys.readouterr().out.startswith("✓ StableSoftplus")


@pytest.mark.parametrize("name", WRONG_SOFTPLUS)
def test_wrong_softplus_is_rejected_with_its_hint(name):
    make, hint = WRONG_SOFTPLUS[name]
    rejected(check_softplus_function, make(), hint)


# --------------------------------------------------------------------------- SafeNorm


def norm_forward(ctx, x):
    norm = x.pow(2).sum(-1).sqrt()
    ctx.save_for_backward(x, norm)
    return norm


def norm_backward_double_where(ctx, grad):
    x, norm = ctx.saved_tensors
    n = norm.unsqueeze(-1)
    return grad.unsqueeze(-1) * torch.where(n > 0, x / torch.where(n > 0, n, 1.0), 0.0)


def norm_backward_clamp(ctx, grad):
    x, norm = ctx.saved_tensors
    return grad.unsqueeze(-1) * x / norm.unsqueeze(-1).clamp_min(1e-12)


def norm_backward_single_where(ctx, grad):
    x, norm = ctx.saved_tensors
    n = norm.unsqueeze(-1)
    return grad.unsqueeze(-1) * torch.where(n > 0, x / n, 0.0)  # right values, NaN when differentiated at 0


def norm_backward_nan(ctx, grad):
    x, norm = ctx.saved_tensors
    return grad.unsqueeze(-1) * x / norm.unsqueeze(-1)


def norm_backward_no_grad(ctx, grad):
    x, norm = ctx.saved_tensors
    with torch.no_grad():
        d = torch.where(norm.unsqueeze(-1) > 0, x / torch.where(norm > 0, norm, 1.0).unsqueeze(-1), 0.0)
    return grad.unsqueeze(-1) * d


def norm_backward_nan_to_num(ctx, grad):
    x, norm = ctx.saved_tensors
    return grad.unsqueeze(-1) * torch.nan_to_num(x / norm.unsqueeze(-1))


def norm_backward_detached(ctx, grad):
    x, norm = ctx.saved_tensors
    n = torch.where(norm > 0, norm, 1.0).unsqueeze(-1)
    return grad.unsqueeze(-1) * torch.where(norm.unsqueeze(-1) > 0, x.detach() / n, 0.0)  # half the terms


CORRECT_NORM = {
    "double where": lambda: function_class("SafeNorm", norm_forward, norm_backward_double_where),
    "clamp_min": lambda: function_class("SafeNorm", norm_forward, norm_backward_clamp),
}

WRONG_NORM = {
    "nan at zero": (lambda: function_class("SafeNorm", norm_forward, norm_backward_nan), "0 / 0 = NaN"),
    "single where": (
        lambda: function_class("SafeNorm", norm_forward, norm_backward_single_where),
        "the branch it discards is still computed",
    ),
    "nan_to_num": (lambda: function_class("SafeNorm", norm_forward, norm_backward_nan_to_num), "gives NaN"),
    "detached saved tensors": (
        lambda: function_class("SafeNorm", norm_forward, norm_backward_detached),
        "gradgradcheck fails",
    ),
    "backward under no_grad": (
        lambda: function_class("SafeNorm", norm_forward, norm_backward_no_grad),
        "cannot be differentiated",
    ),
    "once_differentiable": (
        lambda: function_class(
            "SafeNorm", norm_forward, torch.autograd.function.once_differentiable(norm_backward_double_where)
        ),
        "cannot be differentiated",
    ),
    "forgot grad": (
        lambda: function_class(
            "SafeNorm", norm_forward, lambda ctx, g: norm_backward_double_where(ctx, torch.ones_like(g))
        ),
        "forgot grad_output",
    ),
    "x not normalised": (
        lambda: function_class("SafeNorm", norm_forward, lambda ctx, g: g.unsqueeze(-1) * ctx.saved_tensors[0]),
        "not x: divide by the norm",
    ),
    "no unsqueeze": (
        lambda: function_class("SafeNorm", norm_forward, lambda ctx, g: g * ctx.saved_tensors[0]),
        "grad_output.unsqueeze(-1)",
    ),
    "squared norm forward": (
        lambda: function_class("SafeNorm", lambda ctx, x: x.pow(2).sum(-1), lambda ctx, g: g),
        "The forward of `SafeNorm`",
    ),
    "torch.linalg.vector_norm": (
        lambda: function_class(
            "SafeNorm",
            lambda ctx, x: (ctx.save_for_backward(x), torch.linalg.vector_norm(x, dim=-1))[1],
            lambda ctx, g: g.unsqueeze(-1) * ctx.saved_tensors[0],
        ),
        "calls torch's `vector_norm`",
    ),
}


@pytest.mark.parametrize("name", CORRECT_NORM)
def test_correct_safe_norm_passes(name, capsys):
    check_safe_norm_function(CORRECT_NORM[name]())
    assert capsys.readouterr().out.startswith("✓ SafeNorm")


@pytest.mark.parametrize("name", WRONG_NORM)
def test_wrong_safe_norm_is_rejected_with_its_hint(name):
    make, hint = WRONG_NORM[name]
    rejected(check_safe_norm_function, make(), hint)


# --------------------------------------------------------------------------- ClippedSignSTE


def ste_forward_mask(ctx, x):
    ctx.save_for_backward(x.abs() <= 1)
    return torch.sign(x)


def ste_forward_x(ctx, x):
    ctx.save_for_backward(x)
    return x.sign()


CORRECT_STE = {
    "saved mask": lambda: function_class("ClippedSignSTE", ste_forward_mask, lambda ctx, g: g * ctx.saved_tensors[0]),
    "saved x, where": lambda: function_class(
        "ClippedSignSTE",
        ste_forward_x,
        lambda ctx, g: torch.where(ctx.saved_tensors[0].abs() <= 1, g, torch.zeros_like(g)),
    ),
    "saved x, hardtanh window": lambda: function_class(
        "ClippedSignSTE",
        ste_forward_x,
        lambda ctx, g: g * ((ctx.saved_tensors[0] >= -1) & (ctx.saved_tensors[0] <= 1)).to(g.dtype),
    ),
}

WRONG_STE = {
    "true derivative": (
        lambda: function_class("ClippedSignSTE", ste_forward_x, lambda ctx, g: torch.zeros_like(g)),
        "true derivative of sign",
    ),
    "plain STE": (lambda: function_class("ClippedSignSTE", ste_forward_x, lambda ctx, g: g), "plain straight-through"),
    "open window": (
        lambda: function_class("ClippedSignSTE", ste_forward_x, lambda ctx, g: g * (ctx.saved_tensors[0].abs() < 1)),
        "use <=, not <",
    ),
    "inverted window": (
        lambda: function_class("ClippedSignSTE", ste_forward_x, lambda ctx, g: g * (ctx.saved_tensors[0].abs() > 1)),
        "inverted",
    ),
    "times x": (
        lambda: function_class(
            "ClippedSignSTE", ste_forward_x, lambda ctx, g: g * ctx.saved_tensors[0] * (ctx.saved_tensors[0].abs() <= 1)
        ),
        "not grad_output ⊙ x",
    ),
    "sign(0) = 1": (
        lambda: function_class(
            "ClippedSignSTE",
            lambda ctx, x: (ctx.save_for_backward(x), torch.where(x >= 0, 1.0, -1.0).to(x.dtype))[1],
            lambda ctx, g: g * (ctx.saved_tensors[0].abs() <= 1),
        ),
        "sign(0) is 0",
    ),
    "round forward": (
        lambda: function_class(
            "ClippedSignSTE",
            lambda ctx, x: (ctx.save_for_backward(x), torch.round(x))[1],
            lambda ctx, g: g * (ctx.saved_tensors[0].abs() <= 1),
        ),
        "not round(x)",
    ),
    "None": (lambda: function_class("ClippedSignSTE", ste_forward_x, lambda ctx, g: None), "returned None"),
    "ctx attribute": (
        lambda: function_class(
            "ClippedSignSTE",
            lambda ctx, x: (setattr(ctx, "x", x), torch.sign(x))[1],
            lambda ctx, g: g * (ctx.x.abs() <= 1),
        ),
        "ctx attributes",
    ),
}


@pytest.mark.parametrize("name", CORRECT_STE)
def test_correct_ste_passes(name, capsys):
    check_clipped_sign_ste(CORRECT_STE[name]())
    assert capsys.readouterr().out.startswith("✓ ClippedSignSTE")


@pytest.mark.parametrize("name", WRONG_STE)
def test_wrong_ste_is_rejected_with_its_hint(name):
    make, hint = WRONG_STE[name]
    rejected(check_clipped_sign_ste, make(), hint)


def test_the_checker_runs_gradcheck_itself(monkeypatch):
    calls = []

    def failing_gradcheck(*args, **kwargs):
        calls.append(kwargs)
        return False

    monkeypatch.setattr(torch.autograd, "gradcheck", failing_gradcheck)
    with pytest.raises(ExerciseError, match="gradcheck fails"):
        check_linear_function(CORRECT_LINEAR["needs_input_grad"]())
    assert calls and calls[0]["raise_exception"] is False
