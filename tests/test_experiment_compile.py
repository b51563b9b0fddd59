"""The compile experiment (chapter 11): CPU path at the smallest preset with a graph-only backend; CUDA with inductor."""

import functools
import json
import logging
from unittest import mock

import pytest
import torch

from autogradlab.models.experiments import EXPERIMENTS, table
from autogradlab.models.experiments.__main__ import main
from autogradlab.models.experiments.compile import run_compile


@pytest.fixture(autouse=True)
def _compiler_logs_off():
    logging.disable(logging.WARNING)  # pytest's log capture would switch on torch's structured trace: slow
    yield
    logging.disable(logging.NOTSET)


def test_cpu_path_at_the_smallest_preset_fills_every_column_a_cpu_can():
    result = run_compile("cpu", "cpu-small", backend="aot_eager", modes=("fp32", "bf16"))
    assert [(r["model"], r["precision"]) for r in result.rows] == [
        ("mlp", "fp32"),
        ("mlp", "bf16"),
        ("block", "fp32"),
        ("block", "bf16"),
    ]
    for row in result.rows:
        assert row["eager_ms"] > 0 and row["compiled_ms"] > 0 and row["first_call_s"] > 0
        assert row["eager_peak_bytes"] is None and row["compiled_peak_bytes"] is None  # no allocator statistics
        assert row["break_even_steps"] is None or row["break_even_steps"] >= 0
    saved = {(r["model"], r["precision"]): (r["eager_saved_bytes"], r["compiled_saved_bytes"]) for r in result.rows}
    eager, compiled = saved[("mlp", "fp32")]
    assert compiled < eager  # min-cut recomputes the hand-written GELU's intermediates
    assert saved[("block", "fp32")][0] == saved[("block", "fp32")][1]  # F.gelu: nothing to win
    text = table("compile", result)
    assert text.startswith("| model | precision | eager ms") and "aot_eager ms" in text


def test_registered_and_reachable_from_the_cli(tmp_path, capsys):
    assert EXPERIMENTS["compile"] is run_compile
    out = tmp_path / "compile.json"
    argv = ["compile", "--device", "cpu", "--preset", "cpu-small", "--compile-backend", "aot_eager", "--quiet"]
    # The CLI's plumbing (arguments in, the record out) on a quarter of the grid, untimed: the test above runs it all.
    smaller = functools.partial(run_compile, models=("mlp",), modes=("fp32",), time_runs=False)
    with mock.patch.dict(EXPERIMENTS, compile=smaller):
        assert main([*argv, "--out", str(out)]) == 0
    written = json.loads(out.read_text())["results"]["compile"]
    assert written["backend"] == "aot_eager" and [r["model"] for r in written["rows"]] == ["mlp"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA: inductor's timings are recorded on a GPU")
def test_cuda_path_with_inductor_measures_peak_memory_and_first_call():
    result = run_compile("cuda", "cpu-small", modes=("fp32", "bf16"))
    assert result.backend == "inductor" and len(result.rows) == 4
    for row in result.rows:
        assert row["eager_peak_bytes"] > 0 and row["compiled_peak_bytes"] > 0
        assert row["first_call_s"] > 0 and row["compiled_ms"] > 0
