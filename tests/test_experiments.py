"""autogradlab.models.experiments: every experiment's result record on the CPU (small sizes), and what it must show."""

import json
import math

import pytest
import torch

from autogradlab.models.experiments import (
    EXPERIMENTS,
    as_record,
    clip_sweep_table,
    fp16_fate,
    largest_mlp_fraction,
    run_accumulation,
    run_amp,
    run_autocast,
    run_checkpoint,
    run_clip,
    run_experiment,
    run_inplace,
    run_scaler,
    run_underflow,
    saved_activation_bytes,
    table,
)
from autogradlab.models.experiments.amp import Block, block_step_flops, count_casts, mlp_step_flops
from autogradlab.models.experiments.common import (
    count_flops,
    experiment_device,
    json_safe,
    mlp,
    mode_unavailable,
    resolve_preset,
    time_stats,
)


def _json_roundtrip(result):
    return json.loads(json.dumps(json_safe(as_record(result)), allow_nan=False))


# ---- common ---------------------------------------------------------------------------------


def test_presets_and_devices():
    cpu = experiment_device("cpu")
    assert resolve_preset("auto", cpu) == "cpu-small"
    assert resolve_preset("auto", torch.device("cuda")) == "gpu-large"
    with pytest.raises(ValueError, match="unknown preset"):
        resolve_preset("huge", cpu)
    assert mode_unavailable("tf32", cpu) == "TF32 is a CUDA tensor-core mode"
    assert mode_unavailable("bf16", cpu) is None
    with pytest.raises(ValueError, match="unknown precision mode"):
        mode_unavailable("fp8", cpu)


def test_unknown_experiment_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown experiment 'ampp'"):
        run_experiment("ampp", device="cpu")


def test_json_safe_replaces_non_finite():
    assert json_safe({"a": [1.0, math.inf, math.nan], "b": (2,)}) == {"a": [1.0, None, None], "b": [2]}


# ---- amp ------------------------------------------------------------------------------------


@pytest.mark.parametrize("batch,width,depth", [(2, 3, 1), (5, 4, 3)])
def test_mlp_flops_count_matches_the_matmuls(batch, width, depth):
    # forward + weight grad for every layer, input grad for all but the first
    matmuls = depth + depth + (depth - 1)
    assert mlp_step_flops(batch, width, depth) == matmuls * 2 * batch * width * width


def test_block_flops():
    b, s, d = 2, 8, 16
    linear_forward = 2 * b * s * (3 * d * d + d * d + 4 * d * d + 4 * d * d)
    attention_forward = 2 * 2 * b * s * s * d
    assert block_step_flops(b, s, d) == 3 * (linear_forward + attention_forward)


def test_flop_formulas_agree_with_flop_counter_mode():
    # the formulas the amp table divides by are what FlopCounterMode counts (it has no CPU rule for SDPA: that part is ours)
    x = torch.randn(64, 128)
    model = mlp([128] * 4, experiment_device("cpu"), seed=0)
    assert count_flops(lambda: torch.nn.functional.mse_loss(model(x), x).backward()) == mlp_step_flops(64, 128, 3)
    b, s, d = 4, 32, 64
    block, xb = Block(d, 4), torch.randn(b, s, d)
    counted = count_flops(lambda: torch.nn.functional.mse_loss(block(xb), xb).backward())
    assert counted == block_step_flops(b, s, d) - 12 * b * s * s * d


def test_count_casts_sees_what_autocast_adds():
    model, x = torch.nn.Linear(8, 4), torch.randn(3, 8)
    assert count_casts(lambda: model(x).sum().backward()) == 0
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert count_casts(lambda: model(x)) == 3  # input, weight and bias cast to bf16


def test_time_stats_reports_median_spread_and_threads():
    stats = time_stats(lambda: torch.ones(64, 64) @ torch.ones(64, 64), experiment_device("cpu"), 0.01)
    assert stats["threads"] == 1 and stats["blocks"] >= 1
    assert 0 < stats["min_s"] <= stats["median_s"] and stats["iqr_s"] >= 0


def test_amp_loss_curves_track_fp32():
    result = run_amp("cpu", "cpu-small", modes=("fp32", "bf16", "fp16"), curve_steps=6, time_runs=False)
    assert result.modes == ["fp32", "bf16", "fp16"] and result.skipped_modes == {}
    for model in ("mlp", "block"):
        curves = result.curves[model]
        assert all(len(c) == 6 for c in curves.values())
        assert curves["fp32"][-1] < curves["fp32"][0], "training lowers the loss"
        assert result.curve_deviation[model]["fp32"] == 0.0
        assert 0 < result.curve_deviation[model]["bf16"] < 0.05
        assert 0 < result.curve_deviation[model]["fp16"] < 0.05
    assert {r["model"] for r in result.rows} == {"mlp", "mlp-1", "block"}
    assert all(r["step_ms"] is None for r in result.rows)


def test_amp_timings_and_fraction_of_peak():
    result = run_amp("cpu", "cpu-small", modes=("fp32", "tf32", "bf16"), curve_steps=2)
    assert result.skipped_modes == {"tf32": "TF32 is a CUDA tensor-core mode"}
    assert set(result.matmul_peak_tflops) == {"fp32", "bf16"}
    for row in result.rows:
        assert row["step_ms"] > 0 and row["tflops"] > 0 and row["step_iqr_ms"] >= 0 and row["threads"] == 1
        assert row["casts"] > 0 if row["mode"] == "bf16" else row["casts"] == 0  # autocast's casts, fp32 has none
        assert row["fraction_of_peak"] == pytest.approx(row["tflops"] / result.matmul_peak_tflops[row["mode"]])
        assert row["peak_memory_bytes"] is None  # CPU: no allocator statistics
    largest = max(
        (r for r in result.rows if r["mode"] == "bf16" and r["model"].startswith("mlp")), key=lambda r: r["flops"]
    )
    assert largest_mlp_fraction(result) == largest["fraction_of_peak"]
    assert largest_mlp_fraction(_json_roundtrip(result)) == pytest.approx(largest["fraction_of_peak"])
    assert "fraction of matmul peak" in table("amp", result)


def test_amp_needs_fp32_as_reference():
    with pytest.raises(ValueError, match="include 'fp32'"):
        run_amp("cpu", "cpu-small", modes=("bf16",), time_runs=False)


# ---- underflow ------------------------------------------------------------------------------


def test_fp16_fate_of_known_values():
    fate = fp16_fate(torch.tensor([2.0**-26, 2.0**-20, 2.0**-10, 2.0**17]))
    assert fate == {"zero": 0.25, "subnormal": 0.25, "normal": 0.25, "overflow": 0.25}
    assert fp16_fate(torch.tensor([2.0**-26]), scale=2.0**10)["subnormal"] == 1.0


def test_underflow_scaling_rescues_small_gradients():
    result = run_underflow("cpu", "cpu-small")
    unscaled, *scaled = result.rows
    assert [r["scale"] for r in result.rows] == [1.0, 2.0**8, 2.0**16, 2.0**24]
    assert unscaled["scale"] == 1.0 and unscaled["flushed_fraction"] > 0.3, (
        "without scaling many gradients flush to zero"
    )
    assert scaled[-1]["flushed_fraction"] < 0.01 and scaled[-1]["overflow_fraction"] == 0.0
    assert unscaled["relative_error_same_forward"] > 0.5 and scaled[-1]["relative_error_same_forward"] < 0.01
    assert result.fp16_min_subnormal == 2.0**-24 and result.fp16_min_normal == 2.0**-14 and result.fp16_max == 65504.0
    assert len(result.histogram_counts) == len(result.histogram_edges) - 1 and sum(result.histogram_counts) > 0
    assert _json_roundtrip(result)["rows"][0]["scale"] == 1.0


def test_underflow_error_floor_is_the_fp16_forward_not_underflow():
    # the error vs fp32 is the same at 2**16 and 2**24 (so no underflow is left) and equals the gap between the fp32
    # gradient and the exact gradient of the fp16 forward: the rounded forward is the cause
    rows = {r["scale"]: r for r in run_underflow("cpu", "cpu-small").rows}
    result = run_underflow("cpu", "cpu-small", scales=(2.0**16, 2.0**24))
    a, b = (r["relative_error"] for r in result.rows)
    assert a == pytest.approx(b, rel=1e-3)
    assert a == pytest.approx(result.forward_floor, rel=0.05) and result.forward_floor > 0.05
    assert rows[2.0**16]["relative_error_same_forward"] < result.forward_floor / 10


def test_underflow_too_large_scale_overflows():
    result = run_underflow("cpu", "cpu-small", scales=(2.0**40,))
    assert result.rows[0]["overflow_fraction"] > 0


# ---- scaler ---------------------------------------------------------------------------------


def test_scaler_skips_exactly_the_overflow_steps_and_halves_the_scale():
    result = run_scaler("cpu", "cpu-small")
    assert set(result.injected) <= set(result.skipped_steps)
    assert result.optimizer_steps == result.iterations - len(result.skipped_steps)
    for i, (before, after) in enumerate(zip(result.scale_before, result.scale_after)):
        if i in result.skipped_steps:
            assert after == before * result.backoff_factor
        else:
            assert after in (before, before * result.growth_factor)
    assert result.scale_after[:-1] == result.scale_before[1:]


def test_scale_rule_counts_the_real_steps():
    # the chapter's idiom: a step was real when the scale did not go down
    result = run_scaler("cpu", "cpu-small")
    assert result.steps_by_scale_rule == result.optimizer_steps == result.iterations - len(result.skipped_steps)


def test_scaler_pitfall_scheduler_runs_ahead():
    result = run_scaler("cpu", "cpu-small")
    drift = [a - b for a, b in zip(result.lr_per_iteration, result.lr_per_real_step)]
    assert max(drift) > 0, "stepping the scheduler on skipped steps moves it ahead"
    assert result.skipped_steps[0] == 0 and any("lr_scheduler.step()" in w for w in result.scheduler_warnings)


def test_scaler_custom_injection_and_bad_kind():
    result = run_scaler("cpu", "cpu-small", inject=[(2, "nan")], steps=8)
    assert 2 in result.skipped_steps and len(result.scale_before) == 8
    with pytest.raises(ValueError, match="'inf' or 'nan'"):
        run_scaler("cpu", "cpu-small", inject=[(1, "huge")])


# ---- clip -----------------------------------------------------------------------------------


def test_clip_before_unscale_shrinks_the_sgd_update_by_the_scale():
    r = run_clip("cpu", "cpu-small", sweep_widths=())
    assert r.norm_seen_after_unscale == pytest.approx(r.true_grad_norm, rel=1e-9)
    assert r.norm_seen_before_unscale == pytest.approx(r.scale * r.true_grad_norm, rel=1e-9)
    updates = {(row["optimizer"], row["order"]): row["update_norm"] for row in r.rows}
    assert updates["SGD", "right"] == pytest.approx(0.1 * r.max_norm, rel=1e-4)  # lr · max_norm: the clip did its job
    assert r.update_ratio("SGD") == pytest.approx(r.scale, rel=1e-4)
    assert r.cosine_bug_vs_right["SGD"] == pytest.approx(1.0, abs=1e-9)
    assert updates["SGD", "none"] > updates["SGD", "right"]
    # Adam divides by each element's own size: the bug costs a factor of a few, not S
    assert 1.5 < r.update_ratio("Adam") < 100
    assert "(bug)" in r.table()


def test_clip_bug_costs_adam_more_the_larger_the_model():
    r = run_clip("cpu", "cpu-small", sweep_widths=(70, 707))  # 1e4 and 1e6 parameters, max_norm 1
    small, large = r.sweep
    assert (small["parameters"], large["parameters"]) == (9940, 1001112)
    assert 0.75 < small["Adam"] < 0.95 and 0.4 < large["Adam"] < 0.6  # the 0.87 and 0.52, this model
    for row in r.sweep:  # SGD: the right order does not clip (‖g‖ < 1), the bug does, so the factor is S·‖g‖/max_norm
        assert row["grad_norm"] < r.sweep_max_norm
        assert row["SGD"] == pytest.approx(r.sweep_max_norm / (r.scale * row["grad_norm"]), rel=1e-4)
    assert "Adam" in clip_sweep_table(r) and "1001112" in table("clip", r)


# ---- accumulation ---------------------------------------------------------------------------


def test_accumulation_adds_error_only_when_grad_is_bf16():
    result = run_accumulation("cpu", "cpu-small", ks=(1, 4, 64))
    rows = {(r["precision"], r["k"]): r for r in result.rows}
    for precision in ("fp32", "bf16 autocast", "bf16 parameters"):
        assert rows[(precision, 1)]["accumulation_error"] == 0.0
    assert (
        rows[("bf16 autocast", 4)]["grad_dtype"] == "torch.float32"
    )  # autocast keeps the parameters, and .grad, in fp32
    assert rows[("bf16 parameters", 4)]["grad_dtype"] == "torch.bfloat16"
    assert rows[("fp32", 64)]["accumulation_error"] < 1e-6 and rows[("bf16 autocast", 64)]["accumulation_error"] < 1e-6
    assert (
        1e-3
        < rows[("bf16 parameters", 4)]["accumulation_error"]
        < rows[("bf16 parameters", 64)]["accumulation_error"]
        < 0.05
    )
    assert (
        rows[("fp32", 1)]["rel_error_vs_fp64"] < 1e-5 and 1e-3 < rows[("bf16 autocast", 1)]["rel_error_vs_fp64"] < 0.1
    )
    with pytest.raises(ValueError, match="not divisible"):
        run_accumulation("cpu", "cpu-small", ks=(3,))


# ---- inplace --------------------------------------------------------------------------------


def test_inplace_cases():
    result = run_inplace("cpu")
    raised = [c["raised"] for c in result.cases]
    assert raised == [True, True, False]
    for case in result.cases[:2]:
        assert "modified by an inplace operation" in case["message"]
        assert case["version_at_backward"] == case["version_when_saved"] + 1
    assert all(c["fix_matches_float64"] for c in result.cases)


# ---- checkpoint -----------------------------------------------------------------------------


def test_saved_activation_bytes_counts_each_storage_once_and_skips_params():
    lin = torch.nn.Linear(3, 4)
    x = torch.ones(2, 3)
    # addmm saves x (2·3 floats) and a view of the weight (a parameter: skipped); relu saves its output (2·4)
    got = saved_activation_bytes(lambda: torch.relu(lin(x)).sum(), params=list(lin.parameters()))
    assert got["total"] == (6 + 8) * 4
    # x saved twice (by two matmuls) is still one storage
    w = torch.randn(3, 3, requires_grad=True)
    assert saved_activation_bytes(lambda: (x @ w + x @ w).sum(), params=[w])["total"] == 6 * 4
    # the batch exists before the forward pass: saving it costs nothing, and `inputs` says so
    assert (
        saved_activation_bytes(lambda: torch.relu(lin(x)).sum(), params=list(lin.parameters()), inputs=(x,))["total"]
        == 8 * 4
    )


def test_checkpoint_prediction_scales_with_depth():
    result = run_checkpoint("cpu", "cpu-small", depths=(1, 2, 4), time_runs=False)
    rows = {(r["depth"], r["checkpoint"]): r for r in result.rows}
    b, w, fp32 = result.batch, result.width, 4
    per_block, block_input, loss_saves = 9 * b * w * fp32, b * w * fp32, b * w * fp32
    for depth in (1, 2, 4):  # the first block's input is the batch, which is not new memory
        assert rows[(depth, False)]["predicted_saved_bytes"] == depth * per_block - block_input + loss_saves
        assert rows[(depth, True)]["predicted_saved_bytes"] == (depth - 1) * block_input + loss_saves
        # recomputing a block allocates its saved tensors again but its input, which checkpointing keeps
        assert rows[(depth, True)]["predicted_recompute_bytes"] == per_block - block_input
        assert rows[(depth, False)]["measured_held_bytes"] is None  # CPU
        # backward recomputes each block's forward, and stops once it has what backward needs: up's matmul
        # (2·B·W·4W FLOPs); down's output is saved by nothing, so its matmul is not run again
        assert rows[(depth, True)]["flops"] - rows[(depth, False)]["flops"] == depth * 2 * b * w * 4 * w
    assert "CPU" in result.measured_note


def test_checkpoint_does_not_change_gradients():
    from autogradlab.models.experiments.checkpoint import Stack

    torch.manual_seed(0)
    model = Stack(8, 3)
    x = torch.randn(5, 8)
    plain = torch.autograd.grad(model(x).square().mean(), list(model.parameters()))
    model.use_checkpoint = True
    ckpt = torch.autograd.grad(model(x).square().mean(), list(model.parameters()))
    assert all(torch.allclose(a, b) for a, b in zip(plain, ckpt))


def test_every_experiment_is_registered_with_a_table():
    assert list(EXPERIMENTS) == [
        "autocast",
        "underflow",
        "scaler",
        "clip",
        "amp",
        "accumulation",
        "inplace",
        "checkpoint",
        "compile",
    ]


# ---- autocast -------------------------------------------------------------------------------


def test_cpu_autocast_keeps_softmax_and_sum_in_16_bits_and_losses_in_fp32():
    rows = {r["op"]: r for r in run_autocast("cpu").rows}
    for op in ("linear", "conv1d", "softmax", "layer_norm", "sum"):
        assert rows[op]["bf16"] == "torch.bfloat16" and rows[op]["fp16"] == "torch.float16", op
    for op in ("cross_entropy", "mse_loss"):
        assert rows[op]["bf16"] == rows[op]["fp16"] == "torch.float32", op
    assert "bf16 autocast on cpu" in table("autocast", run_autocast("cpu"))


# ---- device-correctness ---------------------------------------------------------------------

FACTORIES = {
    "zeros",
    "ones",
    "empty",
    "full",
    "rand",
    "randn",
    "randint",
    "arange",
    "linspace",
    "eye",
    "tensor",
    "Generator",
}


def test_every_tensor_an_experiment_creates_names_its_device():
    """A tensor made without device= lands on the CPU and breaks the experiment on CUDA (chapter 05's MaxWithIndex)."""
    import ast
    from pathlib import Path

    import autogradlab.models.experiments as package

    missing = []
    for path in sorted(Path(package.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in FACTORIES
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "torch"
                and not any(k.arg == "device" for k in node.keywords)
            ):
                missing.append(f"{path.name}:{node.lineno} torch.{node.func.attr}")
    assert not missing, "tensors created without device=: " + ", ".join(missing)


QUICK = {
    "autocast": {},
    "underflow": {"scales": (1.0, 2.0**16)},
    "scaler": {"steps": 6},
    "clip": {"sweep_widths": (16,)},
    "amp": {"curve_steps": 2, "time_runs": False, "modes": ("fp32", "bf16", "fp16")},
    "accumulation": {"ks": (1, 2)},
    "inplace": {},
    "checkpoint": {"depths": (1,), "time_runs": False},
}


@pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA"))]
)
@pytest.mark.parametrize("name", list(QUICK))
def test_every_experiment_runs_on_the_device(name, device):
    result = run_experiment(name, device=device, preset="cpu-small", **QUICK[name])
    assert as_record(result)["device"] == device
    assert table(name, _json_roundtrip(result)).startswith("|")
