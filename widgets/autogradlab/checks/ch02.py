"""Checkers for chapter 02 (the chain rule in tensor form): layers the learner derives by hand.

The chapter derives the linear layer and a tanh MLP in full; the exercises ask for two layers it
does not show: a numerically stable softmax cross-entropy, and LayerNorm. Each reference is
autograd's, in the input's dtype; the learner's function runs by hand (autograd and aten's
backward kernels off limits), on non-square shapes, batches larger than one and the edges the
exercise names.

>>> check_layernorm_backward(_layernorm_manual)
✓ layernorm_backward matches the reference on 4 inputs (outputs dx, dgamma, dbeta)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from autogradlab.checks.core import Case, Mistake, OffLimits, check_function, mistakes, routines, seeded
from autogradlab.i18n import N_, _

# aten's own backward kernels compute these exercises' answers in one call.
_ATEN_BACKWARDS = routines(torch.ops.aten, "torch.ops.aten", "_softmax_backward_data", "_log_softmax_backward_data")
_ATEN_BACKWARDS += routines(torch.ops.aten, "torch.ops.aten", "native_layer_norm_backward")


def _by_hand(why: str, refused=()) -> OffLimits:
    return OffLimits(autograd=True, no_graph=True, routines=(*_ATEN_BACKWARDS, *refused), why=why)


# --------------------------------------------------------------------------- softmax cross-entropy

_SOFTMAX_OFF = _by_hand(
    N_("build the softmax and its log from exp, log, max and sum yourself."),
    (
        *routines(torch, "torch", "softmax", "log_softmax", "logsumexp"),
        *routines(torch.special, "torch.special", "softmax", "log_softmax", "logsumexp"),
        *routines(F, "F", "softmax", "log_softmax", "cross_entropy", "nll_loss"),
        *routines(torch.Tensor, "Tensor", "softmax", "log_softmax", "logsumexp"),
        *routines(torch.ops.aten, "torch.ops.aten", "_softmax", "_log_softmax", "logsumexp"),
    ),
)


def _cross_entropy_reference(z, y):
    z = z.detach().requires_grad_(True)
    loss = F.cross_entropy(z, y)
    (grad,) = torch.autograd.grad(loss, z)
    return loss.detach(), grad


def _cross_entropy_cases() -> list[Case]:
    cases = []
    gen = seeded(50)
    z = torch.randn(5, 3, generator=gen, dtype=torch.float64) * 2
    cases.append(Case((z, torch.tensor([0, 2, 1, 2, 0])), _("logits (5, 3) of moderate size (float64)")))
    # Rows with very different ranges: ordinary, ×1000, around +1000, around −1000, and a target far below its row's max.
    z = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    z[1] *= 1000
    z[2] += 1000
    z[3] -= 1000
    z[4] = torch.tensor([1000.0, -1000.0, 0.0, 3.0], dtype=torch.float64)
    y = torch.tensor([1, int(z[1].argmin()), 0, 3, 1])
    cases.append(
        Case((z, y), _("logits (5, 4): rows ordinary, ×1000, near +1000, near −1000, [1000, −1000, 0, 3] (float64)"))
    )
    z = torch.randn(6, 10, generator=gen) * 100  # exp(89) already overflows float32
    z[0, :4] = z[0].max()  # a tie for the row's max
    y = torch.randint(0, 10, (6,), generator=gen)
    cases.append(Case((z, y), _("logits (6, 10) of size ±300, with a tie for the max (float32)")))
    z = torch.randn(7, 5, generator=gen) - 50
    cases.append(Case((z, torch.randint(0, 5, (7,), generator=gen)), _("logits (7, 5) near −50 (float32)")))
    return [Case(c.args, c.label, context={"batch_size": c.args[0].shape[0]}) for c in cases]


def _softmax_ce(z, y, *, shift="row", mean=True, log_of_softmax=False, onehot=True, softmax_dim=1, pick="rows"):
    """(loss, dz) of softmax cross-entropy, right by default; the options build the usual wrong forms."""
    m = {"row": z.amax(softmax_dim, keepdim=True), "global": z.max(), "none": torch.zeros((), dtype=z.dtype)}[shift]
    e = torch.exp(z - m)
    s = e.sum(softmax_dim, keepdim=True)
    p = e / s
    rows = torch.arange(len(y)) if pick == "rows" else slice(None)
    log_p = torch.log(p) if log_of_softmax else z - m - torch.log(s)
    scale = len(z) if mean else 1
    target = F.one_hot(y, z.shape[1]).to(z.dtype) if onehot else 0
    return -log_p[rows, y].sum() / scale / (len(y) if pick == "block" else 1), (p - target) / scale


_OVERFLOW = N_("an exp overflowed or a log met 0: keep every exp argument ≤ 0 by subtracting each row's max, and never take the log of a softmax that can underflow.")  # fmt: skip

_CROSS_ENTROPY_HINTS = {
    "no-mean": N_("F.cross_entropy averages over the batch: both the loss and every row of dz carry a factor 1/B (B = z.shape[0])."),
    "no-onehot": N_("the one-hot term is missing: the logit of the target class also appears in −z_y, which adds −1 to its gradient."),
    "softmax-dim": N_("softmax over the wrong dim: the classes are dim 1, so each row of probabilities sums to 1."),
    "mean-over-BC": N_("the mean is over the B examples, not over all B·C logits: divide by z.shape[0], not z.numel()."),
    "column-block": N_("`z[:, y]` picks a (B, B) block, column y[m] of every row; the target logit of row n is `z[torch.arange(B), y]` (or `z.gather(1, y[:, None])`)."),
    "exp-overflow": N_("exp overflowed (exp(1000) is inf) or underflowed to 0: softmax(z) = softmax(z − c) for any c per row, so subtract each row's max before exp, and compute the loss as max + log Σ exp(z − max) − z_y."),
    "global-max": N_("shifting by the global max is not enough when rows have very different ranges: a row near −1000 next to a row near +1000 underflows to exp(−2000) = 0 everywhere. Subtract each ROW's max (keepdim=True)."),
    "log-of-softmax": N_("log(softmax(z)) is −inf where the softmax underflowed to 0 (a target far below its row's max). Take the log analytically: log softmax(z)_y = z_y − max − log Σ exp(z − max)."),
}  # fmt: skip
_CROSS_ENTROPY_SLIPS = {
    "no-mean": lambda z, y: _softmax_ce(z, y, mean=False),
    "no-onehot": lambda z, y: _softmax_ce(z, y, onehot=False),
    "softmax-dim": lambda z, y: _softmax_ce(z, y, softmax_dim=0),
    "mean-over-BC": lambda z, y: (_softmax_ce(z, y)[0], _softmax_ce(z, y)[1] / z.shape[1]),
    "column-block": lambda z, y: _softmax_ce(z, y, pick="block"),
    "exp-overflow": lambda z, y: _softmax_ce(z, y, shift="none"),
    "global-max": lambda z, y: _softmax_ce(z, y, shift="global"),
    "log-of-softmax": lambda z, y: _softmax_ce(z, y, log_of_softmax=True),
}
CROSS_ENTROPY_MISTAKES = mistakes(_CROSS_ENTROPY_HINTS, _CROSS_ENTROPY_SLIPS)


_KEEPDIM = N_("keep the reduced dim: z.amax(1, keepdim=True) is (B, 1) and broadcasts against z (B, C); without keepdim it is (B,), which lines up with the classes, not the rows.")  # fmt: skip


def check_softmax_cross_entropy(softmax_cross_entropy) -> None:
    """Check ``softmax_cross_entropy(z, y) -> (loss, dz)`` = ``F.cross_entropy(z, y)`` and its gradient, by hand.

    Rows with very different ranges (logits near ±1000) are part of every check,
    and the library's softmax, log-softmax and log-sum-exp are off limits.

    >>> from autogradlab.checks.core import ExerciseError
    >>> try:
    ...     check_softmax_cross_entropy(lambda z, y: (F.cross_entropy(z, y), z.softmax(1)))
    ... except ExerciseError as error:
    ...     print(f"{error.kind} {error.mistake}: {error.hint}")
    off-limits `F.cross_entropy`: build the softmax and its log from exp, log, max and sum yourself.
    """
    check_function(
        softmax_cross_entropy,
        _cross_entropy_reference,
        _cross_entropy_cases(),
        name="softmax_cross_entropy",
        outputs=("loss", "dz"),
        mistakes=CROSS_ENTROPY_MISTAKES,
        error_hints={"size_mismatch": _KEEPDIM},
        off_limits=_SOFTMAX_OFF,
        nonfinite=Mistake("overflow", _OVERFLOW),
    )


# --------------------------------------------------------------------------- LayerNorm


def _layernorm_reference(x, gamma, beta, G, eps):
    x, gamma, beta = (t.detach().requires_grad_(True) for t in (x, gamma, beta))
    y = F.layer_norm(x, (x.shape[-1],), gamma, beta, eps)
    return torch.autograd.grad(y, (x, gamma, beta), G)


def _layernorm_cases() -> list[Case]:
    cases = []
    # (x shape, eps, dtype, seed); rows are scaled from 1e-3 to 1e2, so eps matters in some rows and not in others.
    for shape, eps, dtype, seed in [
        ((3, 4, 5), 1e-5, torch.float64, 60),
        ((6, 7), 1e-3, torch.float64, 61),
        ((2, 5, 8), 1e-5, torch.float64, 62),
        ((4, 3, 6), 1e-5, torch.float32, 63),
    ]:
        gen = seeded(seed)
        dim = shape[-1]
        scales = 10.0 ** torch.empty(*shape[:-1], 1, dtype=torch.float64).uniform_(-3, 2, generator=gen)
        offsets = torch.randn(*shape[:-1], 1, generator=gen, dtype=torch.float64) * scales * 3
        x = (torch.randn(*shape, generator=gen, dtype=torch.float64) * scales + offsets).to(dtype)
        gamma = (torch.rand(dim, generator=gen, dtype=torch.float64) + 0.5).to(dtype)
        beta = torch.randn(dim, generator=gen, dtype=dtype)
        G = torch.randn(*shape, generator=gen, dtype=dtype)
        label = _("x {shape} with row scales from 1e-3 to 1e2, eps={eps:g} ({dtype})").format(shape=tuple(shape), eps=eps, dtype=str(dtype)[6:])  # fmt: skip
        cases.append(Case((x, gamma, beta, G, eps), label, context={"batch_size": x[..., 0].numel()}))
    return cases


def _layernorm_manual(x, gamma, beta, G, eps, slip=""):
    """(dx, dgamma, dbeta) by hand; ``slip`` (a key of ``_LAYERNORM_HINTS``) makes that typical mistake."""
    eps = 1e-5 if slip == "fixed-eps" else eps
    mu = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, correction=int(slip == "unbiased-var"))
    std = {"no-eps": var.sqrt(), "eps-outside": var.sqrt() + eps}.get(slip, (var + eps).sqrt())
    xhat = (x - mu) / std
    g = G if slip == "no-gamma" else G * gamma
    dx = g
    if slip not in ("no-mean-path", "constant-stats"):
        dx = dx - g.mean(-1, keepdim=True)
    if slip not in ("no-variance-path", "constant-stats"):
        dx = dx + (1 if slip == "variance-sign" else -1) * xhat * (g * xhat).mean(-1, keepdim=True)
    lead = tuple(range(x.dim() - 1))
    dgamma = {"dgamma-no-xhat": G.sum(lead), "dgamma-dim-0": (G * xhat).sum(0)}.get(slip, (G * xhat).sum(lead))
    return dx / std, dgamma, G.mean(lead) if slip == "dbeta-mean" else G.sum(lead)


_LAYERNORM_HINTS = {
    "no-variance-path": N_("dx misses the path through the variance: σ depends on every x of the row too. Follow x → var → σ → x̂ and add the gradient that flows back along that path."),
    "no-mean-path": N_("dx misses the path through the mean: μ depends on every x of the row (and var depends on μ). Add the gradient that flows back through μ."),
    "constant-stats": N_("dx treats μ and σ as constants (dx = ĝ/σ): both depend on x, so two more terms flow back through them."),
    "no-gamma": N_("dx forgot γ: the gradient reaching x̂ is ĝ = G ⊙ γ, not G."),
    "variance-sign": N_("the variance term has the wrong sign: it is −x̂ · mean(ĝ ⊙ x̂)."),
    "unbiased-var": N_("torch.var divides by D − 1 by default (the unbiased estimate); layer_norm divides by D. Use x.var(-1, keepdim=True, correction=0) or ((x − μ)²).mean(-1)."),
    "no-eps": N_("eps is missing: σ = sqrt(var + eps). In rows with a tiny spread eps dominates var."),
    "fixed-eps": N_("the checker passes its own eps (this case uses a different one): use the `eps` argument, not a constant."),
    "eps-outside": N_("eps belongs inside the square root: σ = sqrt(var + eps), not sqrt(var) + eps."),
    "dgamma-no-xhat": N_("dgamma forgot x̂: y = γ ⊙ x̂ + β, so dγ sums G ⊙ x̂ (dβ is the one that sums G alone)."),
    "dgamma-dim-0": N_("dgamma summed over dim 0 only: γ is broadcast along every leading dim, so sum over all of them."),
    "dbeta-mean": N_("dbeta is a mean: β is added at every position, so its gradient is the SUM of G over the leading dims."),
}  # fmt: skip
LAYERNORM_MISTAKES = mistakes(
    _LAYERNORM_HINTS, {slip: lambda *args, slip=slip: _layernorm_manual(*args, slip) for slip in _LAYERNORM_HINTS}
)


def check_layernorm_backward(layernorm_backward) -> None:
    """Check ``layernorm_backward(x, gamma, beta, G, eps) -> (dx, dgamma, dbeta)`` for ``F.layer_norm`` over the last dim.

    >>> from autogradlab.checks.ch02 import _layernorm_manual
    >>> check_layernorm_backward(_layernorm_manual)
    ✓ layernorm_backward matches the reference on 4 inputs (outputs dx, dgamma, dbeta)
    """
    check_function(
        layernorm_backward,
        _layernorm_reference,
        _layernorm_cases(),
        name="layernorm_backward",
        outputs=("dx", "dgamma", "dbeta"),
        mistakes=LAYERNORM_MISTAKES,
        error_hints=_("reason with shapes: μ, var and σ are (..., 1) (keepdim=True, so they broadcast back over the row); dx has x's shape; dgamma and dbeta have shape (D,): sum over every dim but the last."),
        off_limits=_by_hand(N_("derive the gradient with tensor operations: autograd and aten's backward kernels do it for you.")),
    )  # fmt: skip
