"""Chapter 03 checkers: right answers in several forms pass; typical wrong ones, forbidden tools, built Jacobians
and Hessians, and side effects are rejected with a hint that names the mistake."""

import math

import pytest
import torch
import torch.nn.functional as F

from autogradlab.checks.ch03 import check_hvp, check_softmax_vjp, check_sum_to_shape
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


def not_implemented(*args):
    raise NotImplementedError()


# --------------------------------------------------------------------------- softmax_vjp


def softmax_vjp_moved(y, v, dim):
    """Move the softmax dim last, use a (1 × n) @ (n × 1) product per slice, move back."""
    y_last, v_last = y.movedim(dim, -1), v.movedim(dim, -1)
    dot = (v_last.unsqueeze(-2) @ y_last.unsqueeze(-1)).squeeze(-1)
    return (y_last * (v_last - dot)).movedim(-1, dim)


def softmax_vjp_by_jacobian(y, v, dim):
    """Build each slice's Jacobian diag(y) − y yᵀ explicitly: right values, but the exercise forbids J."""
    y_last, v_last = y.movedim(dim, -1), v.movedim(dim, -1)
    J = torch.diag_embed(y_last) - y_last.unsqueeze(-1) * y_last.unsqueeze(-2)
    return (v_last.unsqueeze(-2) @ J).squeeze(-2).movedim(-1, dim)


def softmax_vjp_with_view(y, v, dim):
    n = y.shape[dim]
    y2, v2 = y.movedim(dim, -1).view(-1, n), v.movedim(dim, -1).view(-1, n)
    out = y2 * (v2 - (v2 * y2).sum(-1, keepdim=True))
    return out.view(y.movedim(dim, -1).shape).movedim(-1, dim)


def softmax_vjp_in_place(y, v, dim):
    v -= (v * y).sum(dim, keepdim=True)
    return y * v


CORRECT_SOFTMAX = {
    "keepdim": lambda y, v, dim: y * (v - (v * y).sum(dim, keepdim=True)),
    "two terms": lambda y, v, dim: y * v - y * (y * v).sum(dim=dim, keepdim=True),
    "moved to last dim, batched dot": softmax_vjp_moved,
    "torch.sum and mul": lambda y, v, dim: torch.mul(y, v - torch.sum(torch.mul(v, y), dim, keepdim=True)),
}

WRONG_SOFTMAX = {
    "diagonal only": (lambda y, v, dim: y * v, ("value", "diagonal-only")),
    "sum over everything": (lambda y, v, dim: y * (v - (v * y).sum()), ("value", "sum-over-all")),
    "hard-coded last dim": (lambda y, v, dim: y * (v - (v * y).sum(-1, keepdim=True)), ("value", "last-dim")),
    "hard-coded dim 0": (lambda y, v, dim: y * (v - (v * y).sum(0, keepdim=True)), ("value", "dim-0")),
    "unweighted sum": (lambda y, v, dim: y * (v - v.sum(dim, keepdim=True)), ("value", "unweighted-sum")),
    "second term without y": (
        lambda y, v, dim: y * v - (v * y).sum(dim, keepdim=True),
        ("value", "second-term-without-y"),
    ),
    "first term without y": (
        lambda y, v, dim: v - y * (v * y).sum(dim, keepdim=True),
        ("value", "first-term-without-y"),
    ),
    "no keepdim": (lambda y, v, dim: y * (v - (v * y).sum(dim)), ("raised", "size_mismatch")),
    "sign": (lambda y, v, dim: y * ((v * y).sum(dim, keepdim=True) - v), ("value", "sign")),
    "explicit jacobian": (softmax_vjp_by_jacobian, ("contract", "built-jacobian")),
    "autograd via log": (
        lambda y, v, dim: torch.func.vjp(lambda t: torch.softmax(t, dim), y.log())[1](v)[0],
        ("off-limits", None),
    ),
    "autograd.functional.jacobian": (
        lambda y, v, dim: v.reshape(-1) @ torch.autograd.functional.jacobian(lambda t: torch.softmax(t, dim), y.log()),
        ("off-limits", "`torch.autograd.functional.jacobian`"),
    ),
    "backward on a recomputed softmax": (
        lambda y, v, dim: torch.autograd.grad(torch.softmax(y.log().requires_grad_(), dim), y, v)[0],
        ("off-limits", None),
    ),
    "softmax's backward kernel": (
        lambda y, v, dim: torch._softmax_backward_data(v, y, dim, y.dtype),
        ("off-limits", "`torch._softmax_backward_data`"),
    ),
    "the aten backward op": (
        lambda y, v, dim: torch.ops.aten._softmax_backward_data(v, y, dim, y.dtype),
        ("off-limits", "`torch.ops.aten._softmax_backward_data`"),
    ),
    "view on a non-contiguous input": (softmax_vjp_with_view, ("raised", None)),
    "changes v in place": (softmax_vjp_in_place, ("changed-input", None)),
    "not implemented": (not_implemented, ("not-implemented", None)),
}


@pytest.mark.parametrize("name", CORRECT_SOFTMAX)
def test_correct_softmax_vjp_passes(name, capsys):
    check_softmax_vjp(CORRECT_SOFTMAX[name])
    assert capsys.readouterr().out.startswith("✓ softmax_vjp")


@pytest.mark.parametrize("name", WRONG_SOFTMAX)
def test_wrong_softmax_vjp_is_rejected_with_its_hint(name):
    rejected(check_softmax_vjp, *WRONG_SOFTMAX[name])


def test_the_built_jacobian_error_measures_the_sizes():
    error = rejected(check_softmax_vjp, softmax_vjp_by_jacobian, ("contract", "built-jacobian"))
    assert error.measured["largest_bytes"] == 16 * 2**20 and error.measured["needed_bytes"] == 2 * 1024 * 8


# --------------------------------------------------------------------------- sum_to_shape


def sum_to_shape_by_loop(grad, shape):
    """Sum the leading dims away, then every dim where b has size 1, keeping it."""
    while grad.dim() > len(shape):
        grad = grad.sum(0)
    for i, size in enumerate(shape):
        if size == 1 and grad.shape[i] != 1:
            grad = grad.sum(i, keepdim=True)
    return grad


def sum_to_shape_then_reshape(grad, shape):
    lead = grad.dim() - len(shape)
    dims = [i for i in range(grad.dim()) if i < lead or (shape[i - lead] == 1 and grad.shape[i] != 1)]
    return grad.sum(dims).reshape(shape) if dims else grad.clone()


def sum_to_shape_keepdim(grad, shape):
    lead = grad.dim() - len(shape)
    dims = [i for i in range(grad.dim()) if i < lead or (shape[i - lead] == 1 and grad.shape[i] != 1)]
    return grad.sum(dims, keepdim=True).reshape(shape) if dims else grad


def sum_to_shape_padded(grad, shape):
    """Pad shape with leading ones, sum where sizes differ with keepdim, then drop the padding."""
    padded = (1,) * (grad.dim() - len(shape)) + tuple(shape)
    dims = tuple(i for i, (g, b) in enumerate(zip(grad.shape, padded)) if b == 1 and g != 1)
    out = grad.sum(dims, keepdim=True) if dims else grad
    return out.reshape(shape)


def sum_to_shape_by_matrix(grad, shape):
    """The broadcast written as a 0/1 matrix (the Jacobian) and multiplied: right values, J built."""
    n = math.prod(shape)
    index = torch.arange(n).reshape(shape).expand(grad.shape).reshape(-1)
    J = F.one_hot(index, n).to(grad.dtype)
    return (grad.reshape(-1) @ J).reshape(shape)


def sum_to_shape_empty_dims(grad, shape):
    lead = grad.dim() - len(shape)
    dims = tuple(i for i in range(grad.dim()) if i < lead or (shape[i - lead] == 1 and grad.shape[i] != 1))
    out = grad.sum(dims, keepdim=True)
    return out.reshape(out.shape[lead:]) if dims else out.sum(())


def sum_to_shape_from_the_left(grad, shape):
    """Lines b's dims up with grad's first dims, then sums the extra trailing dims away."""
    for i, size in enumerate(shape):
        if size == 1 and grad.shape[i] != 1:
            grad = grad.sum(i, keepdim=True)
    while grad.dim() > len(shape):
        grad = grad.sum(-1)
    return grad


def sum_to_shape_by_reshape(grad, shape):
    return grad.reshape(-1, *shape).sum(0)  # regroups memory: right only when b has no size-1 dim


def sum_to_shape_no_keepdim(grad, shape):
    while grad.dim() > len(shape):
        grad = grad.sum(0)
    dims = tuple(i for i, size in enumerate(shape) if size == 1 and grad.shape[i] != 1)
    return grad.sum(dims) if dims else grad


CORRECT_SUM_TO_SHAPE = {
    "loop": sum_to_shape_by_loop,
    "sum then reshape": sum_to_shape_then_reshape,
    "padded shape": sum_to_shape_padded,
    "keepdim sum, grad itself when nothing is summed": sum_to_shape_keepdim,
}

WRONG_SUM_TO_SHAPE = {
    "always dim 0": (lambda grad, shape: grad.sum(0), ("shape", "dim-0")),
    "leading only": (lambda grad, shape: grad.sum(0) if grad.dim() > len(shape) else grad, ("shape", "leading-only")),
    "mean": (
        lambda grad, shape: sum_to_shape_by_loop(grad, shape) * math.prod(shape) / grad.numel(),
        ("value", "mean"),
    ),
    "reshape(-1, *shape).sum(0)": (sum_to_shape_by_reshape, ("value", "reshape-sum")),
    "size-1 dims summed without keepdim": (sum_to_shape_no_keepdim, ("shape", "no-keepdim")),
    "matched from the left": (sum_to_shape_from_the_left, ("shape", "from-the-left")),
    "empty tuple of dims": (sum_to_shape_empty_dims, ("shape", "empty-dims")),
    "no keepdim": (lambda grad, shape: sum_to_shape_by_loop(grad, shape).reshape(-1), ("shape", None)),
    "returns grad": (lambda grad, shape: grad, ("shape", None)),
    "sum_to_size": (lambda grad, shape: grad.sum_to_size(shape), ("off-limits", "`Tensor.sum_to_size`")),
    "autograd": (
        lambda grad, shape: torch.func.vjp(lambda b: torch.zeros_like(grad) + b, torch.zeros(shape, dtype=grad.dtype))[
            1
        ](grad)[0],
        ("off-limits", None),
    ),
    "jacobian as a 0/1 matrix": (sum_to_shape_by_matrix, ("contract", "built-jacobian")),
    "not implemented": (not_implemented, ("not-implemented", None)),
}


@pytest.mark.parametrize("name", CORRECT_SUM_TO_SHAPE)
def test_correct_sum_to_shape_passes(name, capsys):
    check_sum_to_shape(CORRECT_SUM_TO_SHAPE[name])
    assert capsys.readouterr().out.startswith("✓ sum_to_shape")


@pytest.mark.parametrize("name", WRONG_SUM_TO_SHAPE)
def test_wrong_sum_to_shape_is_rejected_with_its_hint(name):
    rejected(check_sum_to_shape, *WRONG_SUM_TO_SHAPE[name])


def test_sum_to_size_is_back_after_the_check():
    with pytest.raises(ExerciseError):
        check_sum_to_shape(lambda grad, shape: grad.sum_to_size(shape))
    assert torch.ones(2, 3).sum_to_size(3).tolist() == [2.0, 2.0, 2.0]


# --------------------------------------------------------------------------- hvp


def copies(params):
    return [p.detach().requires_grad_(True) for p in params]


def hvp_materialize(f, params, vs):
    ps = copies(params)
    grads = torch.autograd.grad(f(*ps), ps, create_graph=True)
    dot = sum((g * v).sum() for g, v in zip(grads, vs))
    return torch.autograd.grad(dot, ps, materialize_grads=True)


def hvp_allow_unused(f, params, vs):
    ps = copies(params)
    grads = torch.autograd.grad(f(*ps), ps, create_graph=True)
    dot = sum((g * v).sum() for g, v in zip(grads, vs))
    hv = torch.autograd.grad(dot, ps, allow_unused=True)
    return [torch.zeros_like(p) if h is None else h for h, p in zip(hv, ps)]


def hvp_backward(f, params, vs):
    ps = copies(params)
    grads = torch.autograd.grad(f(*ps), ps, create_graph=True)
    sum((g * v).sum() for g, v in zip(grads, vs)).backward(inputs=ps)
    return [torch.zeros_like(p) if p.grad is None else p.grad for p in ps]


def hvp_one_block_at_a_time(f, params, vs):
    """One second pass per parameter, each on the full scalar: right (cross terms included), a bit slower."""
    ps = copies(params)
    grads = torch.autograd.grad(f(*ps), ps, create_graph=True)
    dot = sum((g * v).sum() for g, v in zip(grads, vs))
    return [torch.autograd.grad(dot, p, retain_graph=True, materialize_grads=True)[0] for p in ps]


CORRECT_HVP = {
    "materialize_grads": hvp_materialize,
    "allow_unused + zeros": hvp_allow_unused,
    "backward(inputs=...)": hvp_backward,
    "one block at a time": hvp_one_block_at_a_time,
}


def hvp_no_create_graph(f, params, vs):
    ps = copies(params)
    grads = torch.autograd.grad(f(*ps), ps)
    return torch.autograd.grad(sum((g * v).sum() for g, v in zip(grads, vs)), ps, materialize_grads=True)


def hvp_not_allow_unused(f, params, vs):
    ps = copies(params)
    grads = torch.autograd.grad(f(*ps), ps, create_graph=True)
    return torch.autograd.grad(sum((g * v).sum() for g, v in zip(grads, vs)), ps)


def hvp_nones(f, params, vs):
    ps = copies(params)
    grads = torch.autograd.grad(f(*ps), ps, create_graph=True)
    return torch.autograd.grad(sum((g * v).sum() for g, v in zip(grads, vs)), ps, allow_unused=True)


def hvp_no_cross_terms(f, params, vs):
    ps = copies(params)
    grads = torch.autograd.grad(f(*ps), ps, create_graph=True)
    return [
        torch.autograd.grad((g * v).sum(), p, retain_graph=True, materialize_grads=True)[0]
        if g.requires_grad
        else torch.zeros_like(p)
        for g, v, p in zip(grads, vs, ps)
    ]


def hvp_hessian_rows(f, params, vs):
    """The full Hessian, one backward pass per row, then H @ v: right values, n passes and n² numbers."""
    ps = copies(params)
    flat = torch.cat([g.reshape(-1) for g in torch.autograd.grad(f(*ps), ps, create_graph=True)])
    rows = []
    for i in range(flat.numel()):
        row = torch.autograd.grad(flat[i], ps, retain_graph=True, materialize_grads=True)
        rows.append(torch.cat([r.reshape(-1) for r in row]))
    hv = torch.stack(rows) @ torch.cat([v.reshape(-1) for v in vs])
    return [b.reshape(p.shape) for b, p in zip(hv.split([p.numel() for p in ps]), ps)]


def hvp_hessian_batched(f, params, vs):
    """All rows of H at once with is_grads_batched (vmap over the identity): n² numbers."""
    ps = copies(params)
    grads = torch.autograd.grad(f(*ps), ps, create_graph=True)
    flat = torch.cat([g.reshape(-1) for g in grads])
    eye = torch.eye(flat.numel(), dtype=flat.dtype)
    H = torch.autograd.grad(flat, ps, eye, is_grads_batched=True, allow_unused=True)
    n = flat.numel()
    H = torch.cat(
        [torch.zeros(n, p.numel(), dtype=flat.dtype) if h is None else h.reshape(n, -1) for h, p in zip(H, ps)], dim=1
    )
    hv = H @ torch.cat([v.reshape(-1) for v in vs])
    return [b.reshape(p.shape) for b, p in zip(hv.split([p.numel() for p in ps]), ps)]


def hvp_requires_grad_in_place(f, params, vs):
    for p in params:
        p.requires_grad_(True)
    grads = torch.autograd.grad(f(*params), params, create_graph=True)
    return torch.autograd.grad(sum((g * v).sum() for g, v in zip(grads, vs)), params, materialize_grads=True)


def hvp_graph_kept(f, params, vs):
    ps = copies(params)
    grads = torch.autograd.grad(f(*ps), ps, create_graph=True)
    dot = sum((g * v).sum() for g, v in zip(grads, vs))
    return torch.autograd.grad(dot, ps, create_graph=True, materialize_grads=True)  # the answer keeps a graph


def hvp_linear_means_zero(f, params, vs):
    """The rule "f is linear in p, so p's block is zero", applied to Σ p ⊙ q (whose p-block is v_q)."""
    blocks = list(hvp_materialize(f, params, vs))
    if [tuple(p.shape) for p in params] == [(3,), (3,)]:  # the coupled case, f = Σ p ⊙ q + Σ tanh(q)²
        blocks[0] = torch.zeros_like(blocks[0])
    return blocks


def hvp_flat(f, params, vs):
    return torch.cat([h.reshape(-1) for h in hvp_materialize(f, params, vs)])


WRONG_HVP = {
    "gradient list": (
        lambda f, params, vs: (lambda ps: torch.autograd.grad(f(*ps), ps, materialize_grads=True))(copies(params)),
        ("value", "gradient"),
    ),
    "gradient times v": (
        lambda f, params, vs: [g * v for g, v in zip((lambda ps: torch.autograd.grad(f(*ps), ps))(copies(params)), vs)],
        ("value", "gradient-times-v"),
    ),
    "no create_graph": (hvp_no_create_graph, ("raised", "no_graph")),
    "no allow_unused for a linear parameter": (hvp_not_allow_unused, ("raised", "unused")),
    "None for a linear parameter": (hvp_nones, ("type", "none-block")),
    "no cross terms": (hvp_no_cross_terms, ("value", "no-cross-terms")),
    "Hessian row by row": (hvp_hessian_rows, ("contract", "built-hessian")),
    "Hessian batched": (hvp_hessian_batched, ("contract", "built-hessian")),
    "autograd.functional.hvp": (
        lambda f, params, vs: torch.autograd.functional.hvp(f, tuple(params), tuple(vs))[1],
        ("off-limits", "`torch.autograd.functional.hvp`"),
    ),
    "torch.func forward over reverse": (
        lambda f, params, vs: torch.func.jvp(torch.func.grad(lambda ps: f(*ps)), (tuple(params),), (tuple(vs),))[1],
        ("off-limits", None),
    ),
    "create_graph=True on the second pass": (hvp_graph_kept, ("contract", "keeps-graph")),
    "linear in p taken to mean a zero p-block": (hvp_linear_means_zero, ("value", "zero-block")),
    "requires_grad_ on the caller's tensors": (
        hvp_requires_grad_in_place,
        ("changed-input", "requires-grad-switched-on"),
    ),
    "v H v, a scalar": (
        lambda f, params, vs: sum((h * v).sum() for h, v in zip(hvp_materialize(f, params, vs), vs)),
        ("shape", "one-number"),
    ),
    "one flat tensor": (hvp_flat, ("shape", "layout")),
    "not implemented": (lambda f, params, vs: not_implemented(), ("not-implemented", None)),
}


@pytest.mark.parametrize("name", CORRECT_HVP)
def test_correct_hvp_passes(name, capsys):
    check_hvp(CORRECT_HVP[name])
    assert capsys.readouterr().out.startswith("✓ hvp")


@pytest.mark.parametrize("name", WRONG_HVP)
def test_wrong_hvp_is_rejected_with_its_hint(name):
    rejected(check_hvp, *WRONG_HVP[name])


def test_hvp_shortcuts_are_back_after_the_check():
    with pytest.raises(ExerciseError):
        check_hvp(WRONG_HVP["autograd.functional.hvp"][0])
    x = torch.tensor([1.0, 2.0], dtype=torch.float64)
    assert torch.allclose(torch.autograd.functional.hvp(lambda t: (t**3).sum(), x, torch.ones_like(x))[1], 6 * x)
    assert torch.allclose(torch.func.grad(lambda t: (t**2).sum())(x), 2 * x)


def test_cases_are_not_trivial():
    from autogradlab.checks.ch03 import _hvp_cases, _hvp_large, _softmax_cases, _sum_to_shape_cases

    # Hessians that are not diagonal, so H v is not an element-wise product
    f, params, _ = _hvp_cases()[2].args
    H = torch.autograd.functional.hessian(f, params[0])
    assert (H - torch.diag(torch.diag(H))).abs().max() > 1e-3
    # the MLP couples its parameters: the cross terms are not zero
    f, params, vs = _hvp_cases()[4].args
    H = torch.autograd.functional.hessian(f, tuple(params))
    assert H[0][2].abs().max() > 1e-3
    # the coupled case: f is linear in p, yet p's block of H v is v_q (not zero)
    f, params, vs = _hvp_cases()[6].args
    H = torch.autograd.functional.hessian(f, tuple(params))
    assert torch.equal(H[0][0], torch.zeros(3, 3, dtype=torch.float64)) and torch.equal(
        H[0][1], torch.eye(3, dtype=torch.float64)
    )
    # the large case: a Hessian of 2,000² float64 numbers would take about 31 MiB
    assert sum(p.numel() for p in _hvp_large().args[1]) == 2000
    # softmax: every kind of dim, a non-contiguous y, a row with exact zeros next to an ordinary row
    softmax = _softmax_cases()
    assert {-1, 0, 1} <= {c.args[2] for c in softmax}
    assert any(not c.args[0].is_contiguous() for c in softmax)
    assert any((c.args[0] == 0).any() and (c.args[0] > 1e-3).all(-1).any() for c in softmax)
    # sum_to_shape: a scalar b, an unbroadcast b, size-1 dims both stretched and kept, a non-contiguous grad
    shapes = [(tuple(c.args[0].shape), c.args[1]) for c in _sum_to_shape_cases()]
    assert ((2, 3, 4), ()) in shapes and ((4, 3), (4, 3)) in shapes and ((3, 1, 4), (1, 1, 4)) in shapes
    assert any(not c.args[0].is_contiguous() for c in _sum_to_shape_cases())


def test_a_wrong_vjp_is_explained_in_chinese(monkeypatch):
    monkeypatch.setenv("AUTOGRADLAB_LANG", "zh")
    error = rejected(check_softmax_vjp, *WRONG_SOFTMAX["diagonal only"])
    assert "实测：最大 |误差|" in str(error) and "提示：这只是 Jacobian 的对角部分" in str(error)
