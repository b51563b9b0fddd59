"""ddp_demo: a real 2-process gloo DDP run, and failures that end quickly with a clear message."""

import sys
import time

import torch

from autogradlab.models.ddp_demo import compare, run_ddp_demo


def test_real_ddp_run_matches_single_process_references():
    result = run_ddp_demo(timeout_s=120)
    assert result.ok, result.message
    c = result.comparisons
    assert c["ddp_vs_full_batch"] < 1e-12 and c["ddp_ranks_differ"] == 0.0
    assert c["no_sync_ranks_differ_before_sync"] > 1e-3  # no all-reduce inside no_sync()
    assert c["no_sync_vs_full_batch"] < 1e-12 and c["synced_vs_full_batch"] < 1e-12
    assert c["allreduces_with_no_sync"] == 1 and c["allreduces_without_no_sync"] == 2
    assert c["local_token_mean_rel_error"] > 1e-2 and c["global_token_mean_rel_error"] < 1e-12
    assert len(result.tokens_per_rank) == 2 and result.tokens_per_rank[0] != result.tokens_per_rank[1]


def test_process_start_failure_is_a_message_not_an_exception():
    result = run_ddp_demo(launcher=("/nonexistent/python",))
    assert not result.ok and "could not start the worker processes" in result.message


def test_a_hanging_worker_is_stopped_at_the_timeout():
    start = time.monotonic()
    result = run_ddp_demo(timeout_s=1.0, launcher=(sys.executable, "-c", "import time; time.sleep(60)"))
    assert not result.ok and "did not finish within 1 s" in result.message
    assert time.monotonic() - start < 15


def test_a_crashing_worker_is_reported_with_its_last_line():
    start = time.monotonic()
    result = run_ddp_demo(timeout_s=60, launcher=(sys.executable, "-c", "raise SystemExit('gloo is broken here')"))
    assert not result.ok and "exited with code 1: gloo is broken here" in result.message
    assert time.monotonic() - start < 15


def test_compare_detects_a_wrong_gradient():
    from autogradlab.models.ddp_demo import EQUAL, UNEQUAL
    from autogradlab.models.token_accumulation import full_batch_gradient, token_batch, token_model

    good = full_batch_gradient(token_model(), token_batch(**EQUAL), "mean")
    unequal = full_batch_gradient(token_model(), token_batch(**UNEQUAL), "mean")
    rank = {
        "ddp": good * 2,
        "no_sync_first": good,
        "no_sync_final": good,
        "synced_final": good,
        "allreduces_no_sync": torch.tensor(1),
        "allreduces_synced": torch.tensor(2),
        "local_token_mean": unequal,
        "global_token_mean": unequal,
    }
    c = compare([rank, dict(rank)])
    assert abs(c["ddp_vs_full_batch"] - float(good.abs().max())) < 1e-12
    assert c["no_sync_vs_full_batch"] == 0.0 and torch.isclose(
        torch.tensor(c["global_token_mean_rel_error"]), torch.tensor(0.0)
    )
