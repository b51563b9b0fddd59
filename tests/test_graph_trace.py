"""record_backward: a real backward pass, node by node, that leaves the learner's tensors as they were."""

import pytest
import torch

from autogradlab.graph import capture, record_backward


def model_and_loss(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    x = torch.randn(7, 4, dtype=torch.float32)
    return model, model(x).pow(2).mean()


def test_steps_follow_engine_order_and_match_capture_ids():
    model, loss = model_and_loss()
    g = capture(loss, params=model)
    rec = record_backward(loss)
    assert rec.error is None
    assert rec.order() == [n.id for n in g.nodes if n.kind != "output"]
    assert [s.name for s in rec.steps] == [g.node(s.node_id).name for s in rec.steps]


def test_gradient_norms_and_leaf_grads_match_autograd():
    model, loss = model_and_loss()
    g = capture(loss, params=model)
    params = dict(model.named_parameters())
    expected = dict(zip(params, torch.autograd.grad(loss, list(params.values()), retain_graph=True)))
    rec = record_backward(loss)
    assert rec.steps[0].grad_norm == pytest.approx(1.0)  # d loss / d loss
    for node in g.leaves:
        grad = rec.leaf_grads[node.id]
        torch.testing.assert_close(grad, expected[node.param_name])
        step = next(s for s in rec.steps if s.node_id == node.id)
        assert step.grad_norm == pytest.approx(float(expected[node.param_name].norm()), rel=1e-5)
        assert step.grad_shapes == [tuple(grad.shape)]


def test_recording_leaves_grad_and_graph_untouched():
    model, loss = model_and_loss()
    before = torch.full_like(model[0].weight, 7.0)
    model[0].weight.grad = before
    record_backward(loss)
    assert model[0].weight.grad is before and model[2].weight.grad is None
    loss.backward()  # the graph was retained: the learner can still run backward
    assert model[2].weight.grad is not None


def test_non_scalar_output_is_seeded_with_ones():
    w = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    rec = record_backward(w * 3)
    assert rec.leaf_grads[2].tolist() == [3.0, 3.0, 3.0]
    assert rec.steps[0].grad_norm == pytest.approx(3**0.5)


def test_stale_graph_reports_the_error_and_restores_grads():
    w = torch.randn(3, requires_grad=True)
    u = w * 2
    v = u.pow(2)
    u.add_(1)
    rec = record_backward(v.sum())
    assert "modified by an inplace operation" in rec.error
    assert "Hint" not in rec.error and rec.leaf_grads == {} and w.grad is None


def test_freed_graph_reports_the_error():
    _, loss = model_and_loss()
    loss.backward()
    rec = record_backward(loss)
    assert "second time" in rec.error


def test_meta_graph_records_the_order_without_gradient_norms():
    w = torch.randn(3, device="meta", requires_grad=True)
    rec = record_backward((w.exp() * 2).sum())  # used to fail: a meta gradient has no values to take a norm of
    assert rec.error is None
    assert [s.name for s in rec.steps] == ["SumBackward0", "MulBackward0", "ExpBackward0", "AccumulateGrad"]
    assert all(s.grad_norm is None for s in rec.steps)
