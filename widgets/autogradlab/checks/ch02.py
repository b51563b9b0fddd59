"""Checkers for chapter 02 (the chain rule in tensor form): hand-derived layer gradients vs autograd.

Every reference is computed by autograd in the input's dtype. Inputs are
non-square (a transposed factor cannot slip through), include batch 1 and
size-1 feature dims, and are drawn from several seeds.

>>> check_linear_backward(lambda X, W, b, G: (G @ W.T, X.T @ G, G.sum(0)))
✓ linear_backward matches the reference on 6 inputs (outputs dX, dW, db)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from autogradlab.checks.core import Case, check_function, check_function_outputs, seeded

# --------------------------------------------------------------------------- linear layer


def _linear_reference(X, W, b, G):
    X, W, b = (t.detach().requires_grad_(True) for t in (X, W, b))
    return torch.autograd.grad(X @ W + b, (X, W, b), G)


def _linear_cases() -> list[Case]:
    cases = []
    # (N, D, E, dtype, seed): non-square everywhere, then batch 1, then one output feature.
    for n, d, e, dtype, seed in [
        (5, 3, 4, torch.float64, 0),
        (7, 2, 6, torch.float64, 1),
        (1, 3, 2, torch.float64, 2),
        (6, 4, 1, torch.float64, 3),
        (3, 5, 2, torch.float64, 4),
        (4, 6, 3, torch.float32, 5),
    ]:
        gen = seeded(seed)
        X = torch.randn(n, d, generator=gen, dtype=dtype)
        W = torch.randn(d, e, generator=gen, dtype=dtype)
        b = torch.randn(e, generator=gen, dtype=dtype)
        G = torch.randn(n, e, generator=gen, dtype=dtype)
        label = f"X {tuple(X.shape)}, W {tuple(W.shape)}, b {tuple(b.shape)}, G {tuple(G.shape)} ({str(dtype)[6:]})"
        cases.append(Case((X, W, b, G), label, context={"batch_size": n}))
    return cases


LINEAR_SHAPES = (
    "reason with shapes: dX has X's shape (N, D), dW has W's shape (D, E), db has b's shape (E,). "
    "From X (N, D), W (D, E) and G (N, E) exactly one product gives each shape: dX = G Wᵀ, dW = Xᵀ G."
)

LINEAR_MISTAKES = {
    "db is a mean over the batch: b is added to every row, so its gradient is the SUM of G's rows, G.sum(0).":
        lambda X, W, b, G: (G @ W.T, X.T @ G, G.mean(0)),
    "db summed over the features (dim 1): b has one entry per output feature, so sum over the batch, dim 0.":
        lambda X, W, b, G: (G @ W.T, X.T @ G, G.sum(1)),
    "dW was divided by the batch size: G already carries any 1/N of the loss, so dW = Xᵀ G with no extra factor.":
        lambda X, W, b, G: (G @ W.T, X.T @ G / X.shape[0], G.sum(0)),
}


def check_linear_backward(linear_backward) -> None:
    """Check ``linear_backward(X, W, b, G) -> (dX, dW, db)`` for ``Y = X @ W + b`` with upstream ``G = ∂L/∂Y``.

    >>> check_linear_backward(lambda X, W, b, G: (G @ W.T, X.T @ G, G.sum(0)))
    ✓ linear_backward matches the reference on 6 inputs (outputs dX, dW, db)
    """
    check_function_outputs(
        linear_backward,
        _linear_reference,
        _linear_cases(),
        name="linear_backward",
        outputs=("dX", "dW", "db"),
        mistakes=LINEAR_MISTAKES,
        error_hint=LINEAR_SHAPES,
    )


# --------------------------------------------------------------------------- cross-entropy


def _cross_entropy_reference(z, y):
    z = z.detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(F.cross_entropy(z, y), z)
    return grad


def _cross_entropy_cases() -> list[Case]:
    cases = []
    for b, c, dtype, seed in [(4, 3, torch.float64, 10), (1, 5, torch.float64, 11), (6, 2, torch.float64, 12),
                              (5, 7, torch.float32, 13)]:
        gen = seeded(seed)
        z = torch.randn(b, c, generator=gen, dtype=dtype) * 2
        y = torch.randint(0, c, (b,), generator=gen)
        cases.append(Case((z, y), f"logits z {(b, c)}, targets y {(b,)} ({str(dtype)[6:]})", context={"batch_size": b}))
    return cases


def _one_hot(z, y):
    return F.one_hot(y, z.shape[1]).to(z.dtype)


CROSS_ENTROPY_MISTAKES = {
    "cross_entropy averages over the batch: divide (softmax(z) − onehot(y)) by B = z.shape[0].":
        lambda z, y: torch.softmax(z, 1) - _one_hot(z, y),
    "the mean is over the B examples, not over all B·C logits: divide by z.shape[0], not z.numel().":
        lambda z, y: (torch.softmax(z, 1) - _one_hot(z, y)) / z.numel(),
    "the softmax is missing: ∂L/∂z = (softmax(z) − onehot(y)) / B, not (z − onehot(y)) / B.":
        lambda z, y: (z - _one_hot(z, y)) / z.shape[0],
    "the one-hot term is missing: the target class gets softmax(z) − 1.":
        lambda z, y: torch.softmax(z, 1) / z.shape[0],
    "softmax over the wrong dim: the classes are dim 1 (each row sums to 1).":
        lambda z, y: (torch.softmax(z, 0) - _one_hot(z, y)) / z.shape[0],
}


def check_cross_entropy_grad(cross_entropy_grad) -> None:
    """Check ``cross_entropy_grad(z, y)`` = ∂/∂z F.cross_entropy(z, y) (mean over the batch).

    >>> check_cross_entropy_grad(lambda z, y: (torch.softmax(z, 1) - F.one_hot(y, z.shape[1]).to(z.dtype)) / len(z))
    ✓ cross_entropy_grad matches the reference on 4 inputs
    """
    check_function(
        cross_entropy_grad,
        _cross_entropy_reference,
        _cross_entropy_cases(),
        name="cross_entropy_grad",
        mistakes=CROSS_ENTROPY_MISTAKES,
    )


# --------------------------------------------------------------------------- two-layer MLP


def mlp_loss(x, W1, b1, W2, b2, y):
    """The chapter's MLP: h = tanh(x W1 + b1), z = h W2 + b2, L = cross_entropy(z, y) (mean over the batch)."""
    h = torch.tanh(x @ W1 + b1)
    return F.cross_entropy(h @ W2 + b2, y)


def _mlp_reference(x, W1, b1, W2, b2, y):
    params = tuple(t.detach().requires_grad_(True) for t in (W1, b1, W2, b2))
    return torch.autograd.grad(mlp_loss(x, *params, y), params)


def _mlp_cases() -> list[Case]:
    cases = []
    for b, d, hidden, c, dtype, seed in [
        (5, 3, 4, 2, torch.float64, 20),
        (1, 4, 6, 3, torch.float64, 21),
        (7, 2, 5, 4, torch.float64, 22),
        (4, 6, 1, 3, torch.float64, 23),
        (6, 5, 3, 2, torch.float32, 24),
    ]:
        gen = seeded(seed)
        x = torch.randn(b, d, generator=gen, dtype=dtype)
        W1 = torch.randn(d, hidden, generator=gen, dtype=dtype)
        b1 = torch.randn(hidden, generator=gen, dtype=dtype) * 0.5
        W2 = torch.randn(hidden, c, generator=gen, dtype=dtype)
        b2 = torch.randn(c, generator=gen, dtype=dtype) * 0.5
        y = torch.randint(0, c, (b,), generator=gen)
        label = f"x {(b, d)}, W1 {(d, hidden)}, W2 {(hidden, c)}, {c} classes ({str(dtype)[6:]})"
        cases.append(Case((x, W1, b1, W2, b2, y), label, context={"batch_size": b}))
    return cases


def _mlp_manual(x, W1, b1, W2, b2, y, *, dphi="right", mean=True):
    a = x @ W1 + b1
    h = torch.tanh(a)
    z = h @ W2 + b2
    G_z = torch.softmax(z, 1) - F.one_hot(y, z.shape[1]).to(z.dtype)
    if mean:
        G_z = G_z / x.shape[0]
    G_h = G_z @ W2.T
    derivative = {"right": 1 - h**2, "missing": torch.ones_like(h), "of a": 1 - a**2, "at h": 1 - torch.tanh(h) ** 2}
    G_a = G_h * derivative[dphi]
    return x.T @ G_a, G_a.sum(0), h.T @ G_z, G_z.sum(0)


MLP_MISTAKES = {
    "dW1 and db1 miss the factor φ'(a): G_a = G_h ⊙ tanh'(a) = G_h ⊙ (1 − h²).":
        lambda *args: _mlp_manual(*args, dphi="missing"),
    "tanh'(a) = 1 − tanh(a)² = 1 − h², not 1 − a²: the derivative is written in terms of the OUTPUT h.":
        lambda *args: _mlp_manual(*args, dphi="of a"),
    "you applied tanh' to h (1 − tanh(h)²); it is evaluated at the pre-activation a: 1 − tanh(a)² = 1 − h².":
        lambda *args: _mlp_manual(*args, dphi="at h"),
    "cross_entropy averages over the batch: G_z = (softmax(z) − onehot(y)) / B; every gradient here is B× too large.":
        lambda *args: _mlp_manual(*args, mean=False),
}

MLP_SHAPES = (
    "reason with shapes: G_z is (B, C), h is (B, H), W2 is (H, C). dW2 = hᵀ G_z is (H, C); "
    "G_h = G_z W2ᵀ is (B, H); G_a = G_h ⊙ (1 − h²) is (B, H); dW1 = xᵀ G_a is (D, H)."
)


def check_mlp_backward(mlp_backward) -> None:
    """Check ``mlp_backward(x, W1, b1, W2, b2, y) -> (dW1, db1, dW2, db2)`` for :func:`mlp_loss`.

    >>> from autogradlab.checks.ch02 import _mlp_manual
    >>> check_mlp_backward(_mlp_manual)
    ✓ mlp_backward matches the reference on 5 inputs (outputs dW1, db1, dW2, db2)
    """
    check_function_outputs(
        mlp_backward,
        _mlp_reference,
        _mlp_cases(),
        name="mlp_backward",
        outputs=("dW1", "db1", "dW2", "db2"),
        mistakes=MLP_MISTAKES,
        error_hint=MLP_SHAPES,
    )


# --------------------------------------------------------------------------- batched linear layer


def _batched_cases() -> list[Case]:
    cases = []
    for b, t, d, e, dtype, seed in [
        (2, 3, 4, 5, torch.float64, 30),
        (3, 5, 2, 4, torch.float64, 31),
        (1, 4, 3, 2, torch.float64, 32),
        (4, 1, 2, 3, torch.float64, 33),
        (3, 2, 5, 1, torch.float64, 34),
        (2, 6, 3, 4, torch.float32, 35),
    ]:
        gen = seeded(seed)
        X = torch.randn(b, t, d, generator=gen, dtype=dtype)
        W = torch.randn(d, e, generator=gen, dtype=dtype)
        bias = torch.randn(e, generator=gen, dtype=dtype)
        G = torch.randn(b, t, e, generator=gen, dtype=dtype)
        label = f"X {(b, t, d)}, W {(d, e)}, b {(e,)}, G {(b, t, e)} ({str(dtype)[6:]})"
        cases.append(Case((X, W, bias, G), label, context={"batch_size": b, "num_tokens": b * t}))
    return cases


def _batched_right(X, W, b, G):
    return G @ W.T, X.reshape(-1, X.shape[-1]).T @ G.reshape(-1, G.shape[-1]), G.sum((0, 1))


BATCHED_MISTAKES = {
    "dW = Xᵀ G per example gives a (B, D, E) stack: W is shared by every example, so sum it over the batch "
    "(or reshape X to (B·T, D) and G to (B·T, E) first).":
        lambda X, W, b, G: (G @ W.T, X.transpose(1, 2) @ G, G.sum((0, 1))),
    "db summed only over the batch dim 0: b is added at every position too, so sum over every non-feature dim, (0, 1).":
        lambda X, W, b, G: (G @ W.T, _batched_right(X, W, b, G)[1], G.sum(0)),
    "db summed only over dim 1 (positions): b is shared by every example too, so sum over dims (0, 1).":
        lambda X, W, b, G: (G @ W.T, _batched_right(X, W, b, G)[1], G.sum(1)),
    "db is a mean over the B·T positions: the bias is added at each of them, so its gradient is their SUM.":
        lambda X, W, b, G: (G @ W.T, _batched_right(X, W, b, G)[1], G.mean((0, 1))),
}

BATCHED_SHAPES = (
    "reason with shapes: flatten the leading dims, X.reshape(-1, D) is (B·T, D) and G.reshape(-1, E) is (B·T, E); "
    "then it is the 2-D linear layer: dW = Xᵀ G (D, E), dX = G Wᵀ reshaped back to (B, T, D), db sums over (0, 1)."
)


def check_batched_linear_backward(batched_linear_backward) -> None:
    """Check ``batched_linear_backward(X, W, b, G) -> (dX, dW, db)`` for ``Y = X @ W + b`` with X of shape (B, T, D).

    >>> check_batched_linear_backward(lambda X, W, b, G: (G @ W.T, torch.einsum("btd,bte->de", X, G), G.sum((0, 1))))
    ✓ batched_linear_backward matches the reference on 6 inputs (outputs dX, dW, db)
    """
    check_function_outputs(
        batched_linear_backward,
        _linear_reference,
        _batched_cases(),
        name="batched_linear_backward",
        outputs=("dX", "dW", "db"),
        mistakes=BATCHED_MISTAKES,
        error_hint=BATCHED_SHAPES,
    )
