"""The VJPExplorer's model: Jacobians, VJPs and the shape errors a learner can make."""

import pytest
import torch
import torch.nn.functional as F

from autogradlab.models.vjp import (
    OPS,
    ShapeError,
    autograd_vjp,
    explore,
    jacobian,
    parse_shape,
    upstream,
    vjp_from_jacobian,
)


@pytest.mark.parametrize("name", OPS)
def test_every_op_and_input_vjp_matches_autograd(name):
    for wrt in OPS[name].inputs:
        for v in ("random", "ones", "one-hot"):
            r = explore(name, wrt=wrt, v=v, index=1)
            assert r.vjp_from_jacobian.shape == r.shapes[OPS[name].inputs.index(wrt)]
            assert r.difference < 1e-12
            assert r.jacobian.shape == (r.output.numel(), r.vjp_from_autograd.numel())


def test_jacobian_matches_known_formulas():
    x = torch.randn(4, dtype=torch.float64)
    y = torch.softmax(x, 0)
    assert torch.allclose(jacobian(lambda t: torch.softmax(t, 0), [x], 0), torch.diag(y) - torch.outer(y, y))
    X, W = torch.randn(2, 3, dtype=torch.float64), torch.randn(3, 5, dtype=torch.float64)
    assert torch.allclose(
        jacobian(lambda a, b: a @ b, [X, W], 0), torch.kron(torch.eye(2, dtype=torch.float64), W.T.contiguous())
    )
    r = explore("relu", [(3, 2)])
    assert torch.equal(r.jacobian, torch.diag((r.inputs[0] > 0).double().flatten()))


def test_broadcast_add_vjp_sums_over_broadcast_dims():
    r = explore("broadcasting add", [(3, 4), (3, 1)], wrt="b")
    assert torch.allclose(r.vjp_from_autograd, r.v.sum(1, keepdim=True))
    assert torch.equal(r.jacobian.sum(0), torch.full((3,), 4.0, dtype=torch.float64))


def test_mean_and_sum_over_a_dim():
    r = explore("mean over a dim", [(2, 3)], dim=0, v="ones")
    assert torch.allclose(r.vjp_from_autograd, torch.full((2, 3), 0.5, dtype=torch.float64))
    r = explore("sum over a dim", [(2, 3)], dim=-1)
    assert torch.allclose(r.vjp_from_autograd, r.v[:, None].expand(2, 3))


def test_softmax_note_states_both_sums_and_both_hold():
    r = explore("softmax", [(2, 3)], dim=-1)
    assert r.jacobian.sum(dim=0).abs().max() < 1e-15  # column sums: 1ᵀJ = 0, the VJP of v = ones
    assert r.jacobian.sum(dim=1).abs().max() < 1e-15  # row sums: J 1 = 0, shift invariance
    note = OPS["softmax"].note("x")
    assert "columns sum to 0" in note and "rows sum to 0" in note


def test_softmax_with_ones_gives_zero_vjp_and_one_hot_picks_a_row():
    assert explore("softmax", [(2, 3)], v="ones").vjp_from_autograd.abs().max() < 1e-15
    r = explore("layer norm", [(2, 4)], v="one-hot", index=5)
    assert torch.allclose(r.vjp_from_jacobian.reshape(-1), r.jacobian[5])


def test_same_choice_gives_same_numbers():
    a, b = explore("matmul", seed=3), explore("matmul", seed=3)
    assert torch.equal(a.jacobian, b.jacobian) and torch.equal(a.v, b.v)


def test_helpers():
    J = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=torch.float64)
    v = torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64)
    assert vjp_from_jacobian(J, v, (2,)).tolist() == [6.0, 8.0]
    x = torch.randn(2, 3, dtype=torch.float64)
    g = autograd_vjp(lambda t: F.layer_norm(t, (3,)), [x], 0, torch.ones(2, 3, dtype=torch.float64))
    assert g.shape == (2, 3) and g.abs().max() < 1e-12  # layer norm output sums to 0 per row
    assert upstream("ones", (2,)).tolist() == [1.0, 1.0]


@pytest.mark.parametrize(
    "text, shape",
    [("2, 3", (2, 3)), ("(2,3)", (2, 3)), ("2x3", (2, 3)), ("4", (4,)), ("()", ()), ("", ()), ("[1, 2, 3]", (1, 2, 3))],
)
def test_parse_shape(text, shape):
    assert parse_shape(text) == shape


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(op_name="matmul", shapes=[(2, 3), (4, 2)]), "X's last dim (3) to equal W's second-to-last dim (4)"),
        (dict(op_name="broadcasting add", shapes=[(3, 4), (3,)]), "do not broadcast"),
        (dict(op_name="softmax", dim=2), "dim=2 does not exist for x of shape (2, 3)"),
        (dict(op_name="softmax", shapes=[()]), "x is 0-dim"),
        (dict(op_name="relu", shapes=[(5, 6)]), "30 elements"),
        (dict(op_name="relu", shapes=[(2, 2, 2, 2)]), "4 dims"),
        (dict(op_name="relu", shapes=[(0, 2)]), "between 1 and 6"),
        (dict(op_name="relu", v="one-hot", index=9), "one-hot index 9"),
        (dict(op_name="relu", v="zeros"), "unknown upstream vector"),
        (dict(op_name="conv"), "unknown op"),
        (dict(op_name="matmul", shapes=[(2, 3)]), "takes 2 input(s)"),
        (dict(op_name="relu", wrt="W"), "cannot differentiate"),
        (dict(op_name="matmul", shapes=[(5, 1), (1, 5)]), "the output has 25 elements"),
        (dict(op_name="broadcasting add", shapes=[(6, 1), (6,)]), "the output has 36 elements"),
    ],
)
def test_invalid_choices_raise_shape_error_with_a_message(kwargs, message):
    with pytest.raises(ShapeError) as info:
        explore(**kwargs)
    assert message in str(info.value)


def test_shape_text_errors_are_shape_errors():
    with pytest.raises(ShapeError, match="cannot read the shape"):
        parse_shape("two, three")
    assert issubclass(ShapeError, ValueError)
