"""autogradlab.models.loss_scale reproduces torch.amp.GradScaler's update rule exactly (the real one is the oracle)."""

import math
import random

import pytest
import torch

from autogradlab.models.loss_scale import (
    FP16_MAX,
    FP16_MIN_NORMAL,
    FP16_MIN_SUBNORMAL,
    example_gradients,
    fp16_fate,
    injected_overflows,
    overflows_fp16,
    scale_trace,
    simulate,
    update_scale,
)


def real_gradscaler_trace(overflows, **kwargs):
    """Drive a real GradScaler('cpu') through the same overflow sequence; return the scales and trackers."""
    param = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.SGD([param], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", **kwargs)
    scaler.scale(torch.ones(()))  # creates the scale tensor (GradScaler initialises lazily)
    taken = []
    opt.register_step_post_hook(lambda *_: taken.append(1))
    scales, skipped = [], []
    for i, overflow in enumerate(overflows):
        scales.append(scaler.get_scale())
        param.grad = torch.full((3,), math.inf if overflow else 1.0)
        before = len(taken)
        scaler.step(opt)
        scaler.update()
        if len(taken) == before:
            skipped.append(i)
    return scales, skipped, scaler.get_scale(), scaler.state_dict()["_growth_tracker"]


SETTINGS = [
    {},  # GradScaler's defaults
    {"init_scale": 2.0**10, "growth_interval": 3},
    {
        "init_scale": 1000.0,
        "growth_interval": 1,
        "backoff_factor": 0.3,
        "growth_factor": 1.7,
    },  # float32 rounding matters
    {"init_scale": 3.0, "growth_interval": 2, "backoff_factor": 0.77, "growth_factor": 3.1},
    {"init_scale": 2.0**120, "growth_interval": 1, "growth_factor": 2.0**5},  # growth would overflow float32: kept
]


@pytest.mark.parametrize("settings", SETTINGS, ids=[str(s) for s in SETTINGS])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_simulation_matches_real_gradscaler(settings, seed):
    rng = random.Random(seed)
    overflows = [rng.random() < 0.25 for _ in range(60)]
    scales, skipped, final, tracker = real_gradscaler_trace(overflows, **settings)
    trace = scale_trace(overflows, **settings)
    assert trace.scales == scales  # exact equality, not approx: float32 rounding reproduced
    assert trace.skipped_steps == skipped
    assert trace.final_scale == final and trace.growth_tracker == tracker


def test_fixed_sequences_match_real_gradscaler():
    for overflows in (
        [],
        [True] * 30,
        [False] * 9,
        [False, False, True, False, False, False, True, True, False, False],
    ):
        scales, skipped, final, tracker = real_gradscaler_trace(overflows, init_scale=8.0, growth_interval=2)
        trace = scale_trace(overflows, init_scale=8.0, growth_interval=2)
        assert (trace.scales, trace.skipped_steps, trace.final_scale, trace.growth_tracker) == (
            scales,
            skipped,
            final,
            tracker,
        )


def test_simulate_with_natural_overflow_matches_real_gradscaler():
    trace = simulate(200, init_scale=2.0**20, growth_interval=7, overflow_rate=0.05, grad_max=0.5, seed=3)
    scales, skipped, final, _ = real_gradscaler_trace(trace.overflows, init_scale=2.0**20, growth_interval=7)
    assert trace.scales == scales and trace.skipped_steps == skipped and trace.final_scale == final
    # natural overflows keep the scale where grad_max·scale fits in fp16
    assert all(not overflows_fp16(0.5 * s) for s, o in zip(trace.scales, trace.overflows) if not o)
    assert trace.skipped_steps[:4] == [0, 1, 2, 3]


def test_update_rule_cases():
    assert update_scale(64.0, 5, True) == (32.0, 0)  # backoff resets the tracker
    assert update_scale(64.0, 0, False, growth_interval=3) == (64.0, 1)
    assert update_scale(64.0, 2, False, growth_interval=3) == (128.0, 0)  # the 3rd good step in a row grows
    assert update_scale(64.0, 2, False, growth_interval=3, growth_factor=1.5) == (96.0, 0)
    big = float(torch.finfo(torch.float32).max) / 1.5
    assert update_scale(big, 0, False, growth_interval=1) == (big, 0)  # never grows to inf


def test_injected_overflows_are_reproducible_and_have_the_rate():
    a = injected_overflows(5000, 0.1, seed=7)
    assert a == injected_overflows(5000, 0.1, seed=7) and a != injected_overflows(5000, 0.1, seed=8)
    assert abs(sum(a) / 5000 - 0.1) < 0.02
    assert injected_overflows(10, 1.0) == [True] * 10


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"init_scale": 0.0}, "init_scale"),
        ({"init_scale": math.inf}, "init_scale"),
        ({"growth_factor": 1.0}, "growth_factor"),
        ({"backoff_factor": 1.0}, "backoff_factor"),
        ({"backoff_factor": 0.0}, "backoff_factor"),
        ({"growth_interval": 0}, "growth_interval"),
        ({"growth_interval": 2.5}, "growth_interval"),
    ],
)
def test_bad_settings_are_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        scale_trace([False], **kwargs)
    with pytest.raises(ValueError, match=message):
        simulate(3, **kwargs)


def test_bad_rate_is_a_clear_error():
    with pytest.raises(ValueError, match="probability"):
        simulate(3, overflow_rate=1.5)


def test_fp16_range_constants_and_fate():
    assert FP16_MAX == (2 - 2**-10) * 2**15 == 65504.0
    assert FP16_MIN_NORMAL == 2.0**-14
    assert torch.tensor(FP16_MIN_SUBNORMAL, dtype=torch.float16).item() == FP16_MIN_SUBNORMAL
    assert torch.tensor(FP16_MIN_SUBNORMAL / 2, dtype=torch.float16).item() == 0.0  # ties to even: flushed
    assert overflows_fp16(65519.0) is False and overflows_fp16(65520.0) is True
    fate = fp16_fate(torch.tensor([2.0**-26, 2.0**-20, 3.0, 1e5]))
    assert fate == {"zero": 0.25, "subnormal": 0.25, "normal": 0.25, "overflow": 0.25}


def test_example_gradients_are_small_and_scaling_rescues_them():
    g = example_gradients()
    assert g.numel() > 1000 and bool((g > 0).all())
    assert fp16_fate(g)["zero"] > 0.05, "some gradients flush to zero without scaling"
    assert fp16_fate(g, 2.0**16)["zero"] == 0.0
