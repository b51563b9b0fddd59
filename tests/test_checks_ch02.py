"""Chapter 02 checkers: right answers in several forms pass; plausible wrong ones, autograd and the
library routines that would do the work are rejected, each with a hint that names the mistake."""

import pytest
import torch
import torch.nn.functional as F

from autogradlab.checks.ch02 import (
    _cross_entropy_cases,
    _layernorm_cases,
    check_layernorm_backward,
    check_softmax_cross_entropy,
)
from autogradlab.checks.core import ExerciseError


def rejected(checker, answer, expected) -> ExerciseError:
    """Reject ``answer`` as ``expected`` = (kind, mistake); a mistake of None only requires the kind."""
    kind, mistake = expected
    with pytest.raises(ExerciseError) as info:
        checker(answer)
    error = info.value
    assert error.kind == kind, (error.kind, str(error))
    if mistake is not None:
        assert error.mistake == mistake and error.hint, (error.mistake, str(error))
    return error


# --------------------------------------------------------------------------- softmax_cross_entropy


def onehot(z, y):
    return F.one_hot(y, z.shape[1]).to(z.dtype)


def ce_stable(z, y):
    m = z.amax(1, keepdim=True)
    e = torch.exp(z - m)
    s = e.sum(1, keepdim=True)
    rows = torch.arange(len(y))
    loss = (m[:, 0] + torch.log(s[:, 0]) - z[rows, y]).mean()
    return loss, (e / s - onehot(z, y)) / len(z)


def ce_gather_log_softmax(z, y):
    shifted = z - z.max(dim=-1, keepdim=True).values
    log_p = shifted - shifted.exp().sum(-1, keepdim=True).log()
    loss = -log_p.gather(1, y[:, None]).mean()
    dz = log_p.exp()
    dz[torch.arange(len(y)), y] -= 1  # dz is a fresh tensor: writing into it is fine
    return loss, dz / z.shape[0]


def ce_scatter(z, y):
    shifted = z - z.max(1, keepdim=True)[0]
    p = shifted.exp() / shifted.exp().sum(1, keepdim=True)
    loss = torch.mean(torch.log(shifted.exp().sum(1)) - shifted[torch.arange(len(y)), y])
    return [loss, p.scatter_add(1, y[:, None], -torch.ones(len(y), 1, dtype=z.dtype)) / len(y)]


CORRECT_CE = {
    "stable with amax": ce_stable,
    "gather of log-softmax": ce_gather_log_softmax,
    "scatter, as a list": ce_scatter,
}


def ce_naive(z, y):
    e = torch.exp(z)
    p = e / e.sum(1, keepdim=True)
    return -torch.log(p[torch.arange(len(y)), y]).mean(), (p - onehot(z, y)) / len(z)


def ce_global_max(z, y):
    shifted = z - z.max()
    e = shifted.exp()
    s = e.sum(1, keepdim=True)
    loss = (torch.log(s[:, 0]) - shifted[torch.arange(len(y)), y]).mean()
    return loss, (e / s - onehot(z, y)) / len(z)


def ce_log_of_softmax(z, y):
    _, dz = ce_stable(z, y)
    p = dz * len(z) + onehot(z, y)
    return -torch.log(p[torch.arange(len(y)), y]).mean(), dz


def ce_library_softmax(z, y):
    p = torch.softmax(z, 1)
    return -torch.log(p[torch.arange(len(y)), y]).mean(), (p - onehot(z, y)) / len(z)


def ce_library_loss(z, y):
    return F.cross_entropy(z, y), ce_stable(z, y)[1]


def ce_method_logsumexp(z, y):
    loss = (z.logsumexp(1) - z[torch.arange(len(y)), y]).mean()
    return loss, ce_stable(z, y)[1]


def ce_torch_func(z, y):
    loss = ce_stable(z, y)[0]
    return loss, torch.func.grad(lambda t: ce_stable(t, y)[0])(z)


def ce_column_block(z, y):
    m = z.amax(1, keepdim=True)
    lse = (m + (z - m).exp().sum(1, keepdim=True).log())[:, 0]
    return (lse - z[:, y]).mean(), ce_stable(z, y)[1]  # z[:, y] is a (B, B) block


def ce_max_without_keepdim(z, y):
    shifted = z - z.amax(1)  # (B, C) - (B,): lines up with the classes
    return ce_stable(shifted, y)


def ce_aten_softmax(z, y):
    p = torch.ops.aten._softmax(z, 1, False)
    return -torch.log(p[torch.arange(len(y)), y]).mean(), (p - onehot(z, y)) / len(z)


def ce_aten_log_softmax(z, y):
    log_p = torch.ops.aten._log_softmax(z, 1, False)
    return -log_p[torch.arange(len(y)), y].mean(), (log_p.exp() - onehot(z, y)) / len(z)


def ce_in_place(z, y):
    z -= z.amax(1, keepdim=True)  # shifting the caller's logits
    return ce_stable(z, y)


WRONG_CE = {
    "naive exp": (ce_naive, ("not-finite", "exp-overflow")),
    "global max": (ce_global_max, ("not-finite", "global-max")),
    "log of softmax": (ce_log_of_softmax, ("not-finite", "log-of-softmax")),
    "no mean": (lambda z, y: tuple(t * len(z) for t in ce_stable(z, y)), ("value", "no-mean")),
    "no one-hot": (
        lambda z, y: (ce_stable(z, y)[0], ce_stable(z, y)[1] + onehot(z, y) / len(z)),
        ("value", "no-onehot"),
    ),
    "softmax dim 0": (
        lambda z, y: (
            ce_stable(z, y)[0],
            (torch.exp(z - z.amax(0)) / torch.exp(z - z.amax(0)).sum(0) - onehot(z, y)) / len(z),
        ),
        ("value", "softmax-dim"),
    ),
    "dz sign": (lambda z, y: (ce_stable(z, y)[0], -ce_stable(z, y)[1]), ("value", "sign")),
    "mean over B·C": (lambda z, y: (ce_stable(z, y)[0], ce_stable(z, y)[1] / z.shape[1]), ("value", "mean-over-BC")),
    "torch.softmax": (ce_library_softmax, ("off-limits", "`torch.softmax`")),
    "F.cross_entropy": (ce_library_loss, ("off-limits", "`F.cross_entropy`")),
    "Tensor.logsumexp": (ce_method_logsumexp, ("off-limits", "`Tensor.logsumexp`")),
    "z[:, y] instead of z[arange(B), y]": (ce_column_block, ("value", "column-block")),
    "max without keepdim": (ce_max_without_keepdim, ("raised", "size_mismatch")),
    "torch.ops.aten._softmax": (ce_aten_softmax, ("off-limits", "`torch.ops.aten._softmax`")),
    "torch.ops.aten._log_softmax": (ce_aten_log_softmax, ("off-limits", "`torch.ops.aten._log_softmax`")),
    "torch.func": (ce_torch_func, ("off-limits", None)),
    "shifts the caller's logits": (ce_in_place, ("changed-input", None)),
    "only the gradient": (lambda z, y: ce_stable(z, y)[1], ("type", None)),
}


@pytest.mark.parametrize("name", CORRECT_CE)
def test_correct_softmax_cross_entropy_passes(name, capsys):
    check_softmax_cross_entropy(CORRECT_CE[name])
    assert capsys.readouterr().out.startswith("✓ softmax_cross_entropy")


@pytest.mark.parametrize("name", WRONG_CE)
def test_wrong_softmax_cross_entropy_is_rejected_with_its_hint(name):
    rejected(check_softmax_cross_entropy, *WRONG_CE[name])


def test_off_limits_routines_are_restored_after_the_check():
    softmax, method = torch.softmax, torch.Tensor.softmax
    with pytest.raises(ExerciseError):
        check_softmax_cross_entropy(ce_library_softmax)
    assert torch.softmax is softmax and torch.Tensor.softmax is method
    assert "softmax" not in torch.Tensor.__dict__
    assert torch.allclose(torch.tensor([0.0, 0.0]).softmax(0), torch.tensor([0.5, 0.5]))


def test_cross_entropy_cases_reach_overflow_in_their_dtype():
    cases = _cross_entropy_cases()
    assert all(c.args[0].shape[0] > 1 and c.args[0].shape[0] != c.args[0].shape[1] for c in cases)
    for dtype in (torch.float32, torch.float64):
        biggest = max(float(c.args[0].abs().max()) for c in cases if c.args[0].dtype == dtype)
        assert not torch.isfinite(torch.exp(torch.tensor(biggest, dtype=dtype)))
    wide = cases[1].args[0]
    assert float(wide.amax(1).max() - wide.amax(1).min()) > 1500  # rows with very different ranges


# --------------------------------------------------------------------------- layernorm_backward


def ln_compact(x, gamma, beta, G, eps):
    mu = x.mean(-1, keepdim=True)
    rstd = 1 / torch.sqrt(((x - mu) ** 2).mean(-1, keepdim=True) + eps)
    xhat = (x - mu) * rstd
    g = G * gamma
    dx = rstd * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    lead = tuple(range(x.dim() - 1))
    return dx, (G * xhat).sum(lead), G.sum(lead)


def ln_micro_steps(x, gamma, beta, G, eps):
    """Backprop-ninja style: one line of the forward pass at a time, walked backwards."""
    D = x.shape[-1]
    mu = x.sum(-1, keepdim=True) / D
    xc = x - mu
    var = (xc**2).sum(-1, keepdim=True) / D
    rstd = (var + eps) ** -0.5
    xhat = xc * rstd
    G2 = G.reshape(-1, D)
    dgamma = (G2 * xhat.reshape(-1, D)).sum(0)
    dbeta = G2.sum(0)
    dxhat = G * gamma
    drstd = (dxhat * xc).sum(-1, keepdim=True)
    dxc = dxhat * rstd
    dvar = drstd * -0.5 * (var + eps) ** -1.5
    dxc = dxc + dvar * 2 * xc / D  # xc is used twice: add both paths
    dmu = -dxc.sum(-1, keepdim=True)
    dx = dxc + dmu / D
    return dx, dgamma, dbeta


def ln_library_forward(x, gamma, beta, G, eps):
    D = x.shape[-1]
    xhat = F.layer_norm(x, (D,), eps=eps)  # the forward is allowed; only the gradient is the exercise
    std = torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps)
    g = G * gamma
    dx = (D * g - g.sum(-1, keepdim=True) - xhat * (g * xhat).sum(-1, keepdim=True)) / (D * std)
    return dx, torch.einsum("...d,...d->d", G, xhat), torch.einsum("...d->d", G)


CORRECT_LN = {"compact": ln_compact, "micro-steps": ln_micro_steps, "F.layer_norm forward + sums": ln_library_forward}


def ln_manual(slip):
    from autogradlab.checks.ch02 import _layernorm_manual

    return lambda *a: _layernorm_manual(*a, slip)


def ln_torch_var(x, gamma, beta, G, eps):
    mu = x.mean(-1, keepdim=True)
    rstd = 1 / torch.sqrt(torch.var(x, -1, keepdim=True) + eps)  # unbiased by default
    xhat = (x - mu) * rstd
    g = G * gamma
    dx = rstd * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    return dx, (G * xhat).sum(tuple(range(x.dim() - 1))), G.sum(tuple(range(x.dim() - 1)))


def ln_two_dims_only(x, gamma, beta, G, eps):
    dx, _, dbeta = ln_compact(x, gamma, beta, G, eps)
    xhat = F.layer_norm(x, (x.shape[-1],), eps=eps)
    return dx, (G * xhat).sum(0), dbeta


def ln_autograd(x, gamma, beta, G, eps):
    x = x.clone().requires_grad_(True)
    out = F.layer_norm(x, (x.shape[-1],), gamma, beta, eps)
    return torch.autograd.grad(out, x, G)[0], *ln_compact(x, gamma, beta, G, eps)[1:]


def ln_aten(x, gamma, beta, G, eps):
    D = x.shape[-1]
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [D], gamma, beta, eps)
    return torch.ops.aten.native_layer_norm_backward(G, x, [D], mean, rstd, gamma, beta, [True, True, True])


def ln_hard_coded_eps(x, gamma, beta, G, eps):
    return ln_compact(x, gamma, beta, G, 1e-5)


WRONG_LN = {
    "no variance term": (ln_manual("no-variance-path"), ("value", "no-variance-path")),
    "no mean term": (ln_manual("no-mean-path"), ("value", "no-mean-path")),
    "mu and sigma constant": (ln_manual("constant-stats"), ("value", "constant-stats")),
    "forgot gamma": (ln_manual("no-gamma"), ("value", "no-gamma")),
    "variance term sign": (ln_manual("variance-sign"), ("value", "variance-sign")),
    "torch.var unbiased": (ln_torch_var, ("value", "unbiased-var")),
    "no eps": (ln_manual("no-eps"), ("value", "no-eps")),
    "eps outside sqrt": (ln_manual("eps-outside"), ("value", "eps-outside")),
    "dgamma without xhat": (ln_manual("dgamma-no-xhat"), ("value", "dgamma-no-xhat")),
    "dgamma over dim 0": (ln_two_dims_only, ("shape", "dgamma-dim-0")),
    "dbeta mean": (ln_manual("dbeta-mean"), ("value", "dbeta-mean")),
    "hard-coded eps": (ln_hard_coded_eps, ("value", "fixed-eps")),
    "autograd": (ln_autograd, ("off-limits", None)),
    "aten backward": (ln_aten, ("off-limits", "`torch.ops.aten.native_layer_norm_backward`")),
}


@pytest.mark.parametrize("name", CORRECT_LN)
def test_correct_layernorm_backward_passes(name, capsys):
    check_layernorm_backward(CORRECT_LN[name])
    assert capsys.readouterr().out.startswith("✓ layernorm_backward")


@pytest.mark.parametrize("name", WRONG_LN)
def test_wrong_layernorm_backward_is_rejected_with_its_hint(name):
    rejected(check_layernorm_backward, *WRONG_LN[name])


def test_layernorm_cases_are_not_easy():
    cases = _layernorm_cases()
    for case in cases:
        x, gamma, beta, G, eps = case.args
        assert x[..., 0].numel() > 1 and len(set(x.shape)) == x.dim()  # no batch of one, no repeated sizes
        assert not torch.allclose(gamma, torch.ones_like(gamma)) and not torch.allclose(beta, torch.zeros_like(beta))
        spread = x.double().std(-1)
        assert float(spread.max() / spread.min()) > 100  # rows of very different ranges
    assert len({c.args[4] for c in cases}) > 1 and any(c.args[0].dtype == torch.float32 for c in cases)


def test_off_limits_errors_do_not_get_the_shape_hint():
    error = rejected(check_layernorm_backward, ln_aten, ("off-limits", None))
    assert "reason with shapes" not in (error.hint or "")


def test_aten_kernels_are_restored_after_the_check():
    rejected(check_layernorm_backward, ln_aten, ("off-limits", None))
    assert type(torch.ops.aten.native_layer_norm_backward).__name__ == "OpOverloadPacket"


def test_a_wrong_cross_entropy_is_explained_in_chinese(monkeypatch):
    monkeypatch.setenv("AUTOGRADLAB_LANG", "zh")
    error = rejected(check_softmax_cross_entropy, ce_global_max, ("not-finite", "global-max"))
    assert "你的结果含有 inf 或 NaN" in str(error) and "提示：当各行的取值范围相差很大时" in str(error)
