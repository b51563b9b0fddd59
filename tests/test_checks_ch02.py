"""Chapter 02 checkers: right answers in several forms pass, typical wrong ones get their hint."""

import re

import pytest
import torch
import torch.nn.functional as F

from autogradlab.checks.ch02 import (
    check_batched_linear_backward,
    check_cross_entropy_grad,
    check_linear_backward,
    check_mlp_backward,
)
from autogradlab.checks.core import ExerciseError


def rejected(checker, answer, hint):
    with pytest.raises(ExerciseError) as info:
        checker(answer)
    assert hint in str(info.value), str(info.value)
    return str(info.value)


# --------------------------------------------------------------------------- linear_backward

CORRECT_LINEAR = {
    "matmul": lambda X, W, b, G: (G @ W.T, X.T @ G, G.sum(0)),
    "einsum": lambda X, W, b, G: (
        torch.einsum("ne,de->nd", G, W), torch.einsum("nd,ne->de", X, G), torch.einsum("ne->e", G)),
    "list and mT": lambda X, W, b, G: [G.matmul(W.mT), X.mT.matmul(G), G.sum(dim=0, keepdim=True).reshape(b.shape)],
    "dict": lambda X, W, b, G: {"dX": G @ W.T, "dW": X.T @ G, "db": G.sum(0)},
    "outer products": lambda X, W, b, G: (G @ W.T, sum(torch.outer(X[n], G[n]) for n in range(len(X))), G.sum(0)),
}

WRONG_LINEAR = {
    "dW transposed": (lambda X, W, b, G: (G @ W.T, G.T @ X, G.sum(0)), "transpose of the expected one"),
    "dX without transpose": (lambda X, W, b, G: (G @ W, X.T @ G, G.sum(0)), "dX = G Wᵀ, dW = Xᵀ G"),
    "dW without transpose": (lambda X, W, b, G: (G @ W.T, X @ G, G.sum(0)), "reason with shapes"),
    "db mean": (lambda X, W, b, G: (G @ W.T, X.T @ G, G.mean(0)), "SUM of G's rows"),
    "db no sum": (lambda X, W, b, G: (G @ W.T, X.T @ G, G), "sum over the batch dimension"),
    "db wrong dim": (lambda X, W, b, G: (G @ W.T, X.T @ G, G.sum(1)), "sum over the batch, dim 0"),
    "dW divided by N": (lambda X, W, b, G: (G @ W.T, X.T @ G / len(X), G.sum(0)), "no extra factor"),
    "dX sign": (lambda X, W, b, G: (-(G @ W.T), X.T @ G, G.sum(0)), "sign is flipped"),
    "two outputs": (lambda X, W, b, G: (G @ W.T, X.T @ G), "returned 2 values"),
    "float32 answer": (lambda X, W, b, G: (G @ W.T, (X.T @ G).float(), G.sum(0)), "Dtype"),
    "not implemented": (lambda X, W, b, G: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
}


@pytest.mark.parametrize("name", CORRECT_LINEAR)
def test_correct_linear_backward_passes(name, capsys):
    check_linear_backward(CORRECT_LINEAR[name])
    assert capsys.readouterr().out.startswith("✓ linear_backward")


@pytest.mark.parametrize("name", WRONG_LINEAR)
def test_wrong_linear_backward_is_rejected_with_its_hint(name):
    rejected(check_linear_backward, *WRONG_LINEAR[name])


def test_linear_message_names_the_wrong_output():
    message = rejected(check_linear_backward, WRONG_LINEAR["db mean"][0], "`db` from `linear_backward`")
    assert "max |error|" in message


# --------------------------------------------------------------------------- cross_entropy_grad


def onehot(z, y):
    return F.one_hot(y, z.shape[1]).to(z.dtype)


CORRECT_CE = {
    "softmax minus onehot": lambda z, y: (torch.softmax(z, 1) - onehot(z, y)) / z.shape[0],
    "scatter": lambda z, y: (torch.softmax(z, -1).scatter_add(
        1, y[:, None], -torch.ones(len(y), 1, dtype=z.dtype))) / len(y),
    "exp normalised": lambda z, y: ((z - z.max(1, keepdim=True).values).exp()
                                    / (z - z.max(1, keepdim=True).values).exp().sum(1, keepdim=True)
                                    - onehot(z, y)) / len(z),
}

WRONG_CE = {
    "no mean": (lambda z, y: torch.softmax(z, 1) - onehot(z, y), "divide (softmax(z) − onehot(y)) by B"),
    "numel": (lambda z, y: (torch.softmax(z, 1) - onehot(z, y)) / z.numel(), "not z.numel()"),
    "no softmax": (lambda z, y: (z - onehot(z, y)) / len(z), "the softmax is missing"),
    "no onehot": (lambda z, y: torch.softmax(z, 1) / len(z), "one-hot term is missing"),
    "softmax dim 0": (lambda z, y: (torch.softmax(z, 0) - onehot(z, y)) / len(z), "wrong dim"),
    "sign": (lambda z, y: (onehot(z, y) - torch.softmax(z, 1)) / len(z), "sign is flipped"),
}


@pytest.mark.parametrize("name", CORRECT_CE)
def test_correct_cross_entropy_grad_passes(name, capsys):
    check_cross_entropy_grad(CORRECT_CE[name])
    assert capsys.readouterr().out.startswith("✓ cross_entropy_grad")


@pytest.mark.parametrize("name", WRONG_CE)
def test_wrong_cross_entropy_grad_is_rejected_with_its_hint(name):
    rejected(check_cross_entropy_grad, *WRONG_CE[name])


# --------------------------------------------------------------------------- mlp_backward


def mlp(x, W1, b1, W2, b2, y, dphi=lambda a, h: 1 - h**2, scale=None, dw2_no_transpose=False):
    a = x @ W1 + b1
    h = torch.tanh(a)
    z = h @ W2 + b2
    G_z = (torch.softmax(z, 1) - onehot(z, y)) / (len(x) if scale is None else scale)
    G_a = (G_z @ W2.T) * dphi(a, h)
    dW2 = (G_z.T @ h) if dw2_no_transpose else h.T @ G_z
    return x.T @ G_a, G_a.sum(0), dW2, G_z.sum(0)


def mlp_torch_func(x, W1, b1, W2, b2, y):
    from autogradlab.checks.ch02 import mlp_loss

    return torch.func.grad(lambda p: mlp_loss(x, *p, y))((W1, b1, W2, b2))


def mlp_sech(x, W1, b1, W2, b2, y):
    return mlp(x, W1, b1, W2, b2, y, dphi=lambda a, h: 1 / torch.cosh(a) ** 2)


CORRECT_MLP = {"by hand": mlp, "sech² form": mlp_sech, "torch.func.grad": mlp_torch_func}

WRONG_MLP = {
    "no dphi": (lambda *a: mlp(*a, dphi=lambda a, h: torch.ones_like(h)), "miss the factor φ'(a)"),
    "1 - a^2": (lambda *a: mlp(*a, dphi=lambda a, h: 1 - a**2), "not 1 − a²"),
    "tanh' at h": (lambda *a: mlp(*a, dphi=lambda a, h: 1 - torch.tanh(h) ** 2), "evaluated at the pre-activation"),
    "sum not mean": (lambda *a: mlp(*a, scale=1), "B× too large"),
    "dW2 transposed": (lambda *a: mlp(*a, dw2_no_transpose=True), "transpose"),
    "three outputs": (lambda *a: mlp(*a)[:3], "returned 3 values"),
}


@pytest.mark.parametrize("name", CORRECT_MLP)
def test_correct_mlp_backward_passes(name, capsys):
    check_mlp_backward(CORRECT_MLP[name])
    assert capsys.readouterr().out.startswith("✓ mlp_backward")


@pytest.mark.parametrize("name", WRONG_MLP)
def test_wrong_mlp_backward_is_rejected_with_its_hint(name):
    rejected(check_mlp_backward, *WRONG_MLP[name])


def test_mlp_shape_error_gets_the_shape_reasoning_hint():
    def no_transpose(x, W1, b1, W2, b2, y):
        a = x @ W1 + b1
        h = torch.tanh(a)
        G_z = (torch.softmax(h @ W2 + b2, 1) - onehot(h @ W2, y)) / len(x)
        G_a = (G_z @ W2) * (1 - h**2)  # W2 not transposed
        return x.T @ G_a, G_a.sum(0), h.T @ G_z, G_z.sum(0)

    message = rejected(check_mlp_backward, no_transpose, "G_h = G_z W2ᵀ is (B, H)")
    assert "G_z @ W2" in message  # the learner's line is quoted


# --------------------------------------------------------------------------- batched_linear_backward

CORRECT_BATCHED = {
    "reshape": lambda X, W, b, G: (
        G @ W.T, X.reshape(-1, X.shape[-1]).T @ G.reshape(-1, G.shape[-1]), G.reshape(-1, G.shape[-1]).sum(0)),
    "einsum": lambda X, W, b, G: (
        torch.einsum("bte,de->btd", G, W), torch.einsum("btd,bte->de", X, G), G.sum((0, 1))),
    "per-example stack summed": lambda X, W, b, G: (G @ W.T, (X.mT @ G).sum(0), G.sum(1).sum(0)),
    "flatten": lambda X, W, b, G: (G @ W.T, X.flatten(0, 1).T @ G.flatten(0, 1), G.flatten(0, 1).sum(0)),
}

WRONG_BATCHED = {
    "dW per example": (lambda X, W, b, G: (G @ W.T, X.mT @ G, G.sum((0, 1))), "(B, D, E) stack"),
    "db sum 0": (lambda X, W, b, G: (G @ W.T, torch.einsum("btd,bte->de", X, G), G.sum(0)), "only over the batch dim 0"),
    "db sum 1": (lambda X, W, b, G: (G @ W.T, torch.einsum("btd,bte->de", X, G), G.sum(1)), "only over dim 1"),
    "db mean": (lambda X, W, b, G: (G @ W.T, torch.einsum("btd,bte->de", X, G), G.mean((0, 1))), "their SUM"),
    "dW only last example": (lambda X, W, b, G: (G @ W.T, X[-1].T @ G[-1], G.sum((0, 1))), "max |error|"),
    "dX 2-D transpose": (lambda X, W, b, G: (G @ W.T, X.T @ G, G.sum((0, 1))), "reason with shapes"),
}


@pytest.mark.parametrize("name", CORRECT_BATCHED)
def test_correct_batched_linear_backward_passes(name, capsys):
    check_batched_linear_backward(CORRECT_BATCHED[name])
    assert capsys.readouterr().out.startswith("✓ batched_linear_backward")


@pytest.mark.filterwarnings("ignore:The use of `x.T`")
@pytest.mark.parametrize("name", WRONG_BATCHED)
def test_wrong_batched_linear_backward_is_rejected_with_its_hint(name):
    rejected(check_batched_linear_backward, *WRONG_BATCHED[name])


def test_checks_use_non_square_batched_float64_inputs():
    from autogradlab.checks.ch02 import _batched_cases, _linear_cases

    linear = _linear_cases()
    assert any(c.args[0].shape[0] == 1 for c in linear) and any(c.args[1].shape[1] == 1 for c in linear)
    assert all(c.args[1].shape[0] != c.args[1].shape[1] for c in linear)
    assert sum(c.args[0].dtype == torch.float64 for c in linear) >= 4
    batched = _batched_cases()
    assert all(c.args[0].shape[0] != c.args[0].shape[1] for c in batched)
    assert re.search(r"float32", " ".join(c.label for c in batched))
