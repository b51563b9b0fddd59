"""accumulation: which per-micro-batch reductions reproduce the full-batch gradient, measured."""

import pytest
import torch

from autogradlab.models.token_accumulation import (
    DTYPES,
    REDUCTIONS,
    accumulated_gradient,
    accumulation_error,
    full_batch_gradient,
    micro_batch_loss,
    micro_batch_tokens,
    sweep,
    token_batch,
    token_losses,
    token_model,
    token_weights,
    valid_accum_steps,
)


def test_token_batch_lengths_follow_the_spread():
    lengths = token_batch(n_seqs=200, spread=1.0, mean_len=10).mask.sum(dim=1)
    assert lengths.min() >= 1 and lengths.max() <= 20 and lengths.float().std() > 4
    assert token_batch(n_seqs=5, spread=0.0, mean_len=7).mask.sum(dim=1).tolist() == [7] * 5
    assert torch.equal(token_batch(seed=3).features, token_batch(seed=3).features)


@pytest.mark.parametrize("bad", [dict(spread=1.5), dict(spread=-0.1), dict(n_seqs=0)])
def test_token_batch_rejects_bad_sizes(bad):
    with pytest.raises(ValueError):
        token_batch(**bad)


def test_token_losses_are_zero_on_padding_and_match_cross_entropy():
    batch = token_batch(n_seqs=3, spread=1.0)
    model = token_model()
    losses = token_losses(model, batch)
    assert (losses[~batch.mask] == 0).all()
    logits = model(batch.features[batch.mask])
    expected = torch.nn.functional.cross_entropy(logits, batch.targets[batch.mask], reduction="sum")
    assert torch.allclose(losses.sum(), expected)


@pytest.mark.parametrize("reduction", ["sum", "token-mean"])
@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_sum_and_token_mean_are_exact_for_any_k_and_spread(reduction, k):
    r = accumulation_error(token_batch(n_seqs=8, spread=1.0), k, reduction)
    assert r.relative_error < 1e-13 and abs(r.lr_factor - 1) < 1e-13


def test_plain_mean_is_exact_only_for_equal_token_counts():
    assert accumulation_error(token_batch(n_seqs=8, spread=0.0), 4, "mean").relative_error < 1e-13
    assert accumulation_error(token_batch(n_seqs=8, spread=1.0), 4, "mean").relative_error > 1e-3


def test_mean_without_division_is_k_times_too_large():
    for k in (2, 4, 8):
        r = accumulation_error(token_batch(n_seqs=8, spread=0.0), k, "mean (no ÷K)")
        assert abs(r.lr_factor - k) < 1e-9 and abs(r.relative_error - (k - 1)) < 1e-9


def test_error_of_plain_mean_grows_with_the_length_spread():
    errors = [accumulation_error(token_batch(n_seqs=48, spread=s), 8, "mean").relative_error for s in (0.0, 0.5, 1.0)]
    assert errors[0] < 1e-13 < errors[1] < errors[2]


def test_lower_precision_gives_larger_but_small_errors():
    batch = token_batch(n_seqs=8, spread=0.5)
    errors = {d: accumulation_error(batch, 4, "token-mean", d).relative_error for d in DTYPES}
    assert errors["float64"] < 1e-13 < errors["float32"] < 1e-5 < errors["bfloat16"] < 5e-2


def test_accumulated_gradient_matches_autograd_on_the_concatenated_objective():
    # an independent check: torch.autograd.grad of the full token mean
    batch = token_batch(n_seqs=6, spread=1.0)
    model = token_model()
    loss = token_losses(model, batch).sum() / batch.tokens
    expected = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(model.parameters()))])
    assert torch.allclose(accumulated_gradient(model, batch, 3, "token-mean"), expected, rtol=1e-12, atol=1e-15)
    assert torch.allclose(full_batch_gradient(model, batch, "mean"), expected, rtol=1e-12, atol=1e-15)


def test_bad_arguments_are_clear_errors():
    batch = token_batch(n_seqs=6)
    with pytest.raises(ValueError, match="must divide"):
        accumulated_gradient(token_model(), batch, 4, "sum")
    with pytest.raises(ValueError, match="unknown reduction"):
        micro_batch_loss(token_model(), batch, "median", 1, batch.tokens)
    with pytest.raises(ValueError, match="unknown dtype"):
        accumulation_error(batch, 2, "sum", "float16x")


def test_valid_k_and_sweep():
    assert valid_accum_steps(12, largest=16) == [1, 2, 3, 4, 6, 12]
    results = sweep("mean (no ÷K)", spread=0.0, n_seqs=12)
    assert [r.accum_steps for r in results] == [1, 2, 3, 4, 6, 12]
    assert [round(r.lr_factor, 6) for r in results] == [1, 2, 3, 4, 6, 12]
    assert set(REDUCTIONS) == {"sum", "mean", "mean (no ÷K)", "token-mean"}


def test_token_weights_are_n_over_k_n_k_for_the_plain_mean_and_one_for_the_token_mean():
    batch = token_batch(n_seqs=12, spread=1.0)
    counts, n = micro_batch_tokens(batch, 3), batch.tokens
    assert len(set(counts)) > 1  # unequal micro-batches, or the test could not fail
    assert token_weights(batch, 3, "mean") == pytest.approx([n / (3 * c) for c in counts], rel=1e-12)
    assert token_weights(batch, 3, "mean (no ÷K)") == pytest.approx([n / c for c in counts], rel=1e-12)
    assert token_weights(batch, 3, "token-mean") == [1.0, 1.0, 1.0]
    assert token_weights(batch, 3, "sum") == pytest.approx([float(n)] * 3)
    with pytest.raises(ValueError, match="must divide"):
        token_weights(batch, 5, "mean")
