"""Chapter 05 checkers: correct custom Functions pass, typical wrong ones get their hint.

Beyond the numbers, the checkers hold the contracts the exercises state: tensors through
``save_for_backward`` (never ctx attributes), ``needs_input_grad`` honoured, only what
backward needs saved, a backward that survives a double backward (SafeNorm).
"""

import pytest
import torch

from autogradlab.checks.ch05 import (
    check_autograd_function,
    check_clipped_sign_ste,
    check_linear_relu,
    check_safe_norm_function,
    check_softplus_function,
)
from autogradlab.checks.core import Case, ExerciseError


def function_class(name, forward, backward, **extra):
    """A torch.autograd.Function subclass built from two plain functions."""
    body = {"forward": staticmethod(forward), "backward": staticmethod(backward), **extra}
    return type(name, (torch.autograd.Function,), body)


def rejected(checker, cls, mistake, kind=None):
    """The check raises and names ``mistake`` (and ``kind``), with a hint where a mistake is named."""
    with pytest.raises(ExerciseError) as info:
        checker(cls)
    error = info.value
    assert error.mistake == mistake, (error.kind, error.mistake, str(error))
    assert kind is None or error.kind == kind, (error.kind, str(error))
    assert mistake is None or error.hint, str(error)
    return error


def test_the_generic_check_passes_a_minimal_function(capsys):
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad

    square = function_class("Square", lambda ctx, x: (ctx.save_for_backward(x), x * x)[1], backward)
    cases = [Case((torch.randn(3, dtype=torch.float64),), "x of shape (3,)")]
    check_autograd_function(square, name="Square", reference=lambda x: x * x, cases=cases, input_names=("x",))
    assert capsys.readouterr().out == "✓ Square: forward, backward and gradcheck pass on 1 input\n"


# --------------------------------------------------------------------------- LinearReLU


def lr_forward(ctx, x, W, b):
    out = torch.relu(x @ W + b)
    ctx.save_for_backward(x, W, out > 0)
    return out


def lr_class(dx, dW, db, forward=lr_forward, name="LinearReLU"):
    """A backward that honours needs_input_grad, with three gradient formulas of (x, W, G ⊙ mask)."""

    def backward(ctx, G):
        x, W, mask = ctx.saved_tensors
        Gm = G * mask
        need = ctx.needs_input_grad
        return (dx(x, W, Gm) if need[0] else None), (dW(x, W, Gm) if need[1] else None), (db(Gm) if need[2] else None)

    return function_class(name, forward, backward)


def right_formulas(**wrong):
    formulas = {"dx": lambda x, W, G: G @ W.T, "dW": lambda x, W, G: x.T @ G, "db": lambda G: G.sum(0)}
    formulas.update(wrong)
    return formulas["dx"], formulas["dW"], formulas["db"]


def lr_setup_context():
    """The setup_context style (works under torch.func), saving a uint8 mask and using torch.where."""

    class LinearReLU(torch.autograd.Function):
        @staticmethod
        def forward(x, W, b):
            return torch.relu(torch.addmm(b, x, W))

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, W, _ = inputs
            ctx.save_for_backward(x, W, (output > 0).to(torch.uint8))

        @staticmethod
        def backward(ctx, G):
            x, W, mask = ctx.saved_tensors
            G = torch.where(mask.bool(), G, 0.0)
            nx, nW, nb = ctx.needs_input_grad
            return (G @ W.T if nx else None), (x.T @ G if nW else None), (G.sum(0) if nb else None)

    return LinearReLU


def lr_einsum_mask_from_pre_activation():
    def forward(ctx, x, W, b):
        z = torch.addmm(b, x, W)
        ctx.save_for_backward(x, W, z > 0)
        return z.clamp_min(0)

    def backward(ctx, G):
        x, W, mask = ctx.saved_tensors
        G = G * mask
        nx, nW, nb = ctx.needs_input_grad
        return (
            torch.einsum("ne,de->nd", G, W) if nx else None,
            torch.einsum("nd,ne->de", x, G) if nW else None,
            G.sum(dim=0) if nb else None,
        )

    return function_class("LinearReLU", forward, backward)


CORRECT_LINEAR = {
    "mask, needs_input_grad": lambda: lr_class(*right_formulas()),
    "setup_context, uint8 mask": lr_setup_context,
    "addmm and einsum, mask from z": lr_einsum_mask_from_pre_activation,
}


def lr_saves_output():
    def forward(ctx, x, W, b):
        out = torch.relu(x @ W + b)
        ctx.save_for_backward(x, W, out)  # the float output: 4-8 bytes per element where a bool mask needs 1
        return out

    def backward(ctx, G):
        x, W, out = ctx.saved_tensors
        G = G * (out > 0)
        return G @ W.T, x.T @ G, G.sum(0)

    return function_class("LinearReLU", forward, backward)


def lr_ctx_attributes():
    def forward(ctx, x, W, b):
        out = torch.relu(x @ W + b)
        ctx.x, ctx.W, ctx.mask = x, W, out > 0
        return out

    def backward(ctx, G):
        G = G * ctx.mask
        return G @ ctx.W.T, ctx.x.T @ G, G.sum(0)

    return function_class("LinearReLU", forward, backward)


def lr_ignores_needs_input_grad():
    def backward(ctx, G):
        x, W, mask = ctx.saved_tensors
        G = G * mask
        return G @ W.T, x.T @ G, G.sum(0)

    return function_class("LinearReLU", lr_forward, backward)


def lr_saves_everything():
    def forward(ctx, x, W, b):
        z = x @ W + b
        out = torch.relu(z)
        ctx.save_for_backward(x, W, b, z > 0)
        return out

    def backward(ctx, G):
        x, W, _, mask = ctx.saved_tensors
        return lr_class(*right_formulas()).backward(
            type("C", (), {"saved_tensors": (x, W, mask), "needs_input_grad": ctx.needs_input_grad})(), G
        )

    return function_class("LinearReLU", forward, backward)


def lr_two_grads():
    def backward(ctx, G):
        x, W, mask = ctx.saved_tensors
        return (G * mask) @ W.T, x.T @ (G * mask)

    return function_class("LinearReLU", lr_forward, backward)


def lr_none_for_b():
    def backward(ctx, G):
        x, W, mask = ctx.saved_tensors
        return (G * mask) @ W.T, x.T @ (G * mask), None

    return function_class("LinearReLU", lr_forward, backward)


def lr_no_mask():
    def backward(ctx, G):
        x, W, _ = ctx.saved_tensors
        nx, nW, nb = ctx.needs_input_grad
        return (G @ W.T if nx else None), (x.T @ G if nW else None), (G.sum(0) if nb else None)

    return function_class("LinearReLU", lr_forward, backward)


WRONG_LINEAR = {
    "saves the float output": (lr_saves_output, "saves-float-output"),
    "ctx attributes": (lr_ctx_attributes, "ctx-attribute"),
    "ignores needs_input_grad": (lr_ignores_needs_input_grad, "ignores-needs-input-grad"),
    "saves b too": (lr_saves_everything, "saves-too-much"),
    "db = G, unsummed (autograd would sum it silently)": (
        lambda: lr_class(*right_formulas(db=lambda G: G)),
        "batch-not-summed",
    ),
    "db mean": (lambda: lr_class(*right_formulas(db=lambda G: G.mean(0))), "db-mean"),
    "dW / N": (lambda: lr_class(*right_formulas(dW=lambda x, W, G: x.T @ G / len(x))), "dW-over-batch"),
    "dW transposed": (lambda: lr_class(*right_formulas(dW=lambda x, W, G: G.T @ x)), "transposed"),
    "no mask in backward": (lr_no_mask, "no-mask"),
    "dx sign": (lambda: lr_class(*right_formulas(dx=lambda x, W, G: -G @ W.T)), "sign"),
    "dx no transpose": (lambda: lr_class(*right_formulas(dx=lambda x, W, G: G @ W)), None),
    "two grads": (lr_two_grads, "arity"),
    "None for b": (lr_none_for_b, "none-gradient"),
    "no relu in forward": (
        lambda: lr_class(
            *right_formulas(), forward=lambda ctx, x, W, b: (ctx.save_for_backward(x, W, x @ W + b > 0), x @ W + b)[1]
        ),
        None,
    ),
}


@pytest.mark.parametrize("name", CORRECT_LINEAR)
def test_correct_linear_relu_passes(name, capsys):
    check_linear_relu(CORRECT_LINEAR[name]())
    assert capsys.readouterr().out.startswith("✓ LinearReLU")


@pytest.mark.parametrize("name", WRONG_LINEAR)
def test_wrong_linear_relu_is_rejected_with_its_mistake(name):
    make, mistake = WRONG_LINEAR[name]
    rejected(check_linear_relu, make(), mistake)


def test_an_unsummed_bias_gradient_is_caught_before_autograd_sums_it():
    error = rejected(
        check_linear_relu, WRONG_LINEAR["db = G, unsummed (autograd would sum it silently)"][0](), "batch-not-summed"
    )
    assert error.kind == "shape"


@pytest.mark.filterwarnings("ignore:.*should not be instantiated")
def test_class_apply_is_accepted_and_other_things_are_explained(capsys):
    cls = CORRECT_LINEAR["mask, needs_input_grad"]()
    check_linear_relu(cls.apply)
    assert capsys.readouterr().out.startswith("✓")
    for wrong in (cls(), lambda x, W, b: torch.relu(x @ W + b), 3):
        rejected(check_linear_relu, wrong, "not-a-function-class", kind="type")


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
    "naive forward overflows": (lambda: function_class("StableSoftplus", sp_naive, sp_backward), "overflow"),
    "log instead of log1p": (lambda: function_class("StableSoftplus", sp_no_log1p, sp_backward), "log-not-log1p"),
    "logsumexp of [0, x]": (
        lambda: function_class(
            "StableSoftplus",
            lambda ctx, x: (ctx.save_for_backward(x), torch.logsumexp(torch.stack([torch.zeros_like(x), x]), dim=0))[1],
            sp_backward,
        ),
        "log-not-log1p",
    ),
    "forgot grad_output": (
        lambda: function_class("StableSoftplus", sp_forward, lambda ctx, g: torch.sigmoid(ctx.saved_tensors[0])),
        "no-grad-output",
    ),
    "exp(x) as derivative": (
        lambda: function_class("StableSoftplus", sp_forward, lambda ctx, g: g * torch.exp(ctx.saved_tensors[0])),
        "exp-derivative",
    ),
    "sigmoid(−x)": (
        lambda: function_class("StableSoftplus", sp_forward, lambda ctx, g: g * torch.sigmoid(-ctx.saved_tensors[0])),
        "sigmoid-of-minus-x",
    ),
    "softplus as its own derivative": (
        lambda: function_class(
            "StableSoftplus", sp_forward, lambda ctx, g: g * torch.nn.functional.softplus(ctx.saved_tensors[0])
        ),
        "softplus-as-derivative",
    ),
    "ctx attribute": (
        lambda: function_class("StableSoftplus", sp_attribute, lambda ctx, g: g * torch.sigmoid(ctx.x)),
        "ctx-attribute",
    ),
    "calls F.softplus": (
        lambda: function_class(
            "StableSoftplus", lambda ctx, x: (ctx.save_for_backward(x), torch.nn.functional.softplus(x))[1], sp_backward
        ),
        "`F.softplus`",
    ),
    "calls torch.logaddexp": (
        lambda: function_class(
            "StableSoftplus",
            lambda ctx, x: (ctx.save_for_backward(x), torch.logaddexp(torch.zeros_like(x), x))[1],
            sp_backward,
        ),
        "`torch.logaddexp`",
    ),
}


@pytest.mark.parametrize("name", CORRECT_SOFTPLUS)
def test_correct_softplus_passes(name, capsys):
    check_softplus_function(CORRECT_SOFTPLUS[name]())
    assert capsys.readouterr().out.startswith("✓ StableSoftplus")


@pytest.mark.parametrize("name", WRONG_SOFTPLUS)
def test_wrong_softplus_is_rejected_with_its_hint(name):
    make, mistake = WRONG_SOFTPLUS[name]
    rejected(check_softplus_function, make(), mistake)


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


def norm_backward_recomputed(ctx, grad):
    x, _ = ctx.saved_tensors
    n = x.pow(2).sum(-1).sqrt().unsqueeze(-1)  # recomputed: sqrt's backward at 0 is NaN when differentiated
    zero = n == 0
    return grad.unsqueeze(-1) * torch.where(zero, 0.0, x / torch.where(zero, 1.0, n))


def norm_backward_detached(ctx, grad):
    x, norm = ctx.saved_tensors
    n = torch.where(norm > 0, norm, 1.0).unsqueeze(-1)
    return grad.unsqueeze(-1) * torch.where(norm.unsqueeze(-1) > 0, x.detach() / n, 0.0)  # half the terms


CORRECT_NORM = {
    "double where": lambda: function_class("SafeNorm", norm_forward, norm_backward_double_where),
    "clamp_min": lambda: function_class("SafeNorm", norm_forward, norm_backward_clamp),
}

WRONG_NORM = {
    "nan at zero": (lambda: function_class("SafeNorm", norm_forward, norm_backward_nan), "zero-division"),
    "single where": (lambda: function_class("SafeNorm", norm_forward, norm_backward_single_where), "where-branch"),
    "recomputes the norm with sqrt in backward (errata §5b)": (
        lambda: function_class("SafeNorm", norm_forward, norm_backward_recomputed),
        "sqrt-in-backward",
    ),
    "nan_to_num": (lambda: function_class("SafeNorm", norm_forward, norm_backward_nan_to_num), "where-branch"),
    "detached saved tensors": (
        lambda: function_class("SafeNorm", norm_forward, norm_backward_detached),
        "gradgradcheck",
    ),
    "backward under no_grad": (
        lambda: function_class("SafeNorm", norm_forward, norm_backward_no_grad),
        "not-differentiable",
    ),
    "once_differentiable": (
        lambda: function_class(
            "SafeNorm", norm_forward, torch.autograd.function.once_differentiable(norm_backward_double_where)
        ),
        "not-differentiable",
    ),
    "forgot grad": (
        lambda: function_class(
            "SafeNorm", norm_forward, lambda ctx, g: norm_backward_double_where(ctx, torch.ones_like(g))
        ),
        "no-grad-output",
    ),
    "x not normalised": (
        lambda: function_class("SafeNorm", norm_forward, lambda ctx, g: g.unsqueeze(-1) * ctx.saved_tensors[0]),
        "not-normalised",
    ),
    "no unsqueeze": (
        lambda: function_class("SafeNorm", norm_forward, lambda ctx, g: g * ctx.saved_tensors[0]),
        "size_mismatch",
    ),
    "squared norm forward": (
        lambda: function_class("SafeNorm", lambda ctx, x: x.pow(2).sum(-1), lambda ctx, g: g),
        None,
    ),
    "torch.linalg.vector_norm": (
        lambda: function_class(
            "SafeNorm",
            lambda ctx, x: (ctx.save_for_backward(x), torch.linalg.vector_norm(x, dim=-1))[1],
            lambda ctx, g: g.unsqueeze(-1) * ctx.saved_tensors[0],
        ),
        "`torch.linalg.vector_norm`",
    ),
}


@pytest.mark.parametrize("name", CORRECT_NORM)
def test_correct_safe_norm_passes(name, capsys):
    check_safe_norm_function(CORRECT_NORM[name]())
    assert capsys.readouterr().out.startswith("✓ SafeNorm")


@pytest.mark.parametrize("name", WRONG_NORM)
def test_wrong_safe_norm_is_rejected_with_its_hint(name):
    make, mistake = WRONG_NORM[name]
    rejected(check_safe_norm_function, make(), mistake)


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
        "true-derivative",
    ),
    "plain STE": (lambda: function_class("ClippedSignSTE", ste_forward_x, lambda ctx, g: g), "plain-ste"),
    "open window": (
        lambda: function_class("ClippedSignSTE", ste_forward_x, lambda ctx, g: g * (ctx.saved_tensors[0].abs() < 1)),
        "open-window",
    ),
    "inverted window": (
        lambda: function_class("ClippedSignSTE", ste_forward_x, lambda ctx, g: g * (ctx.saved_tensors[0].abs() > 1)),
        "inverted-window",
    ),
    "times x": (
        lambda: function_class(
            "ClippedSignSTE", ste_forward_x, lambda ctx, g: g * ctx.saved_tensors[0] * (ctx.saved_tensors[0].abs() <= 1)
        ),
        "times-x",
    ),
    "sign(0) = 1": (
        lambda: function_class(
            "ClippedSignSTE",
            lambda ctx, x: (ctx.save_for_backward(x), torch.where(x >= 0, 1.0, -1.0).to(x.dtype))[1],
            lambda ctx, g: g * (ctx.saved_tensors[0].abs() <= 1),
        ),
        "sign-of-zero",
    ),
    "round forward": (
        lambda: function_class(
            "ClippedSignSTE",
            lambda ctx, x: (ctx.save_for_backward(x), torch.round(x))[1],
            lambda ctx, g: g * (ctx.saved_tensors[0].abs() <= 1),
        ),
        "round",
    ),
    "None": (lambda: function_class("ClippedSignSTE", ste_forward_x, lambda ctx, g: None), "none-gradient"),
    "ctx attribute": (
        lambda: function_class(
            "ClippedSignSTE",
            lambda ctx, x: (setattr(ctx, "x", x), torch.sign(x))[1],
            lambda ctx, g: g * (ctx.x.abs() <= 1),
        ),
        "ctx-attribute",
    ),
}


@pytest.mark.parametrize("name", CORRECT_STE)
def test_correct_ste_passes(name, capsys):
    check_clipped_sign_ste(CORRECT_STE[name]())
    assert capsys.readouterr().out.startswith("✓ ClippedSignSTE")


@pytest.mark.parametrize("name", WRONG_STE)
def test_wrong_ste_is_rejected_with_its_hint(name):
    make, mistake = WRONG_STE[name]
    rejected(check_clipped_sign_ste, make(), mistake)


def test_the_checker_runs_gradcheck_itself(monkeypatch):
    calls = []

    def failing_gradcheck(*args, **kwargs):
        calls.append(kwargs)
        return False

    monkeypatch.setattr(torch.autograd, "gradcheck", failing_gradcheck)
    rejected(check_linear_relu, CORRECT_LINEAR["mask, needs_input_grad"](), "gradcheck", kind="value")
    assert calls and calls[0]["raise_exception"] is False


def test_a_wrong_function_is_explained_in_chinese(monkeypatch):
    monkeypatch.setenv("AUTOGRADLAB_LANG", "zh")
    make, mistake = WRONG_SOFTPLUS["log instead of log1p"]
    error = rejected(check_softplus_function, make(), mistake, "value")
    assert "`StableSoftplus` 的 forward 丢失了极小的值" in str(error) and "提示：在 float64 中" in str(error)
