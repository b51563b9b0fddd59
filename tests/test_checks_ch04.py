"""Chapter 04 checkers: right answers pass; typical wrong ones are rejected with the hint that names the mistake."""

import pytest
import torch

from autogradlab.checks.ch04 import (
    check_ema,
    check_inplace_chain,
    check_saved_activation_bytes,
    inplace_saves_memory,
    make_mlp,
    measured_activation_storages,
)
from autogradlab.checks.core import ExerciseError


def item(dtype):
    return torch.empty((), dtype=dtype).element_size()


def rejected(call, hint):
    with pytest.raises(ExerciseError) as info:
        call()
    assert hint in str(info.value), str(info.value)


# --- Exercise 1 ------------------------------------------------------------------------------


def right(b, sizes, dtype, activation):
    per = 2 if activation == "gelu" else 1
    i = item(dtype)
    return [b * sizes[0] * i] + [b * n * i for n in sizes[1:-1] for _ in range(per)] + [b * sizes[-1] * i]


def right_by_walking_layers(b, sizes, dtype, activation):
    """An alternative: walk the layers, note each new storage."""
    i, out = item(dtype), []
    out.append(b * sizes[0] * i)  # first Linear's input
    for n in sizes[1:-1]:
        if activation == "gelu":
            out.append(b * n * i)  # GELU's input
        out.append(b * n * i)  # activation output = next Linear's input
    out.append(b * sizes[-1] * i)  # pow's input
    return tuple(out)


def test_the_measurement_itself_sees_gelu_save_its_input():
    relu = measured_activation_storages(2, [3, 4, 5], torch.float32, "relu")
    gelu = measured_activation_storages(2, [3, 4, 5], torch.float32, "gelu")
    assert relu == [24, 32, 40] and gelu == [24, 32, 32, 40]
    assert isinstance(make_mlp([3, 4, 5], activation="tanh")[1], torch.nn.Tanh)


@pytest.mark.parametrize("answer", [right, right_by_walking_layers, lambda *a: torch.tensor(right(*a))])
def test_right_activation_storages_pass(answer, capsys):
    check_saved_activation_bytes(answer)
    assert capsys.readouterr().out.startswith("✓")


WRONG_STORAGES = {
    "the old total": (lambda b, s, d, a: sum(right(b, s, d, a)), "return a list"),
    "GELU like ReLU": (lambda b, s, d, a: right(b, s, d, "relu"), "GELU's derivative needs its input"),
    "every activation like GELU": (lambda b, s, d, a: right(b, s, d, "gelu"), "one storage per hidden layer"),
    "no input": (lambda b, s, d, a: right(b, s, d, a)[1:], "the input batch is the first storage"),
    "no output": (lambda b, s, d, a: right(b, s, d, a)[:-1], "the final output is the last storage"),
    "elements": (lambda b, s, d, a: [n // item(d) for n in right(b, s, d, a)], "multiply by the element size"),
    "always 4 bytes": (lambda b, s, d, a: [n // item(d) * 4 for n in right(b, s, d, a)], "float64 takes 8"),
    "per example": (lambda b, s, d, a: [n // b for n in right(b, s, d, a)], "multiply by the batch size"),
    "reordered": (lambda b, s, d, a: list(reversed(right(b, s, d, a))), "The totals agree, the storages do not"),
}


@pytest.mark.parametrize("name", WRONG_STORAGES)
def test_wrong_activation_storages_are_named(name):
    answer, hint = WRONG_STORAGES[name]
    rejected(lambda: check_saved_activation_bytes(answer), hint)


# --- Exercise 2 ------------------------------------------------------------------------------


def optimal(h):
    h = h.sin()
    h.mul_(3)
    h.exp_()
    h = h + 1
    h.tanh_()
    h = h / 2
    h = h**2
    return h.sub_(0.5)


def optimal_other_spelling(h):
    h = torch.sin(h)
    h *= 3
    torch.exp_(h)
    h = torch.add(h, 1)
    torch.tanh_(h)
    h = torch.div(h, 2)
    h = torch.square(h)
    h -= 0.5
    return h


def pow_in_place_is_fine(h):
    h = h.sin()
    h.mul_(3)
    h.exp_()
    h = h + 1
    h.tanh_()
    h = h / 2
    h.pow_(2)  # allowed, saves nothing: autograd clones the input first
    return h.sub_(0.5)


def test_the_rule_gives_four_in_place_steps():
    assert [n for n, ok in inplace_saves_memory().items() if ok] == ["mul", "exp", "tanh", "sub"]


@pytest.mark.parametrize("answer", [optimal, optimal_other_spelling, pow_in_place_is_fine])
def test_optimal_chains_pass(answer, capsys):
    check_inplace_chain(answer)
    assert "allocates 4 new tensors for 8 steps" in capsys.readouterr().out


def all_out_of_place(h):
    return ((((h.sin() * 3).exp() + 1).tanh() / 2) ** 2) - 0.5


def div_in_place_after_tanh(h):
    h = h.sin()
    h.mul_(3)
    h.exp_()
    h = h + 1
    h.tanh_()
    h.div_(2)  # tanh saved its output
    h = h**2
    return h.sub_(0.5)


def add_in_place_after_exp(h):
    h = h.sin()
    h.mul_(3)
    h.exp_()
    h.add_(1)  # exp saved its output: this overwrites it
    h.tanh_()
    h = h / 2
    h = h**2
    return h.sub_(0.5)


def sin_in_place(h):
    h.sin_()  # sin saves its input
    h.mul_(3)
    h.exp_()
    h = h + 1
    h.tanh_()
    h = h / 2
    h = h**2
    return h.sub_(0.5)


def through_data(h):
    h = h.sin()
    h.mul_(3)
    h.exp_()
    h = h + 1
    h.tanh_()
    h.data.div_(2)  # tanh saved this output: no error, a wrong gradient
    h = h**2
    return h.sub_(0.5)


def extra_copy(h):
    h = h.clone().sin()
    h.mul_(3)
    h.exp_()
    h = h + 1
    h.tanh_()
    h = h / 2
    h = h**2
    return h.sub_(0.5)


def missing_step(h):
    h = h.sin()
    h.mul_(3)
    h.exp_()
    h = h + 1
    h.tanh_()
    h = h**2
    return h.sub_(0.5)


WRONG_CHAINS = {
    "nothing in place": (all_out_of_place, "could overwrite its input and does not"),
    "add_ after exp": (add_in_place_after_exp, "`exp`, saved its output"),
    "div_ after tanh": (div_in_place_after_tanh, "`tanh`, saved its output"),
    "sin_ on the caller's h": (sin_in_place, "changed its argument h"),
    ".data": (through_data, "wrong gradient"),
    "an extra copy": (extra_copy, "4 are enough"),
    "a step missing": (missing_step, "computes a different value"),
}


@pytest.mark.parametrize("name", WRONG_CHAINS)
def test_wrong_chains_are_named(name):
    answer, hint = WRONG_CHAINS[name]
    rejected(lambda: check_inplace_chain(answer), hint)


# --- Exercise 3 ------------------------------------------------------------------------------


def init_right(model):
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def update_right(ema, model, decay):
    with torch.no_grad():
        for name, p in model.named_parameters():
            ema[name].mul_(decay).add_(p, alpha=1 - decay)


def update_lerp(ema, model, decay):
    with torch.no_grad():
        for name, p in model.named_parameters():
            ema[name].lerp_(p, 1 - decay)


def test_right_ema_passes(capsys):
    check_ema(init_right, update_right)
    check_ema(lambda m: {n: torch.empty_like(p).copy_(p.detach()) for n, p in m.named_parameters()}, update_lerp)
    assert capsys.readouterr().out.count("✓") == 2


def update_data(ema, model, decay):
    for name, p in model.named_parameters():
        ema[name].data.mul_(decay).add_(p.data, alpha=1 - decay)


def update_rebinds(ema, model, decay):
    with torch.no_grad():
        for name, p in model.named_parameters():
            ema[name] = decay * ema[name] + (1 - decay) * p


def update_swapped(ema, model, decay):
    with torch.no_grad():
        for name, p in model.named_parameters():
            ema[name].mul_(1 - decay).add_(p, alpha=decay)


def update_moves_the_model(ema, model, decay):
    with torch.no_grad():
        for name, p in model.named_parameters():
            ema[name].mul_(decay).add_(p, alpha=1 - decay)
            p.copy_(ema[name])


WRONG_EMA = {
    "aliased by detach": (lambda m: {n: p.detach() for n, p in m.named_parameters()}, update_right,
                          "detach().clone()"),
    "clone stays in the graph": (lambda m: {n: p.clone() for n, p in m.named_parameters()}, update_right,
                                 "part of autograd"),
    "update through .data": (init_right, update_data, "version counter did not move"),
    "rebinds the dict entries": (init_right, update_rebinds, "replaced"),
    "decay swapped": (init_right, update_swapped, "decay weighs the old average"),
    "writes the average into the model": (init_right, update_moves_the_model, "changed the model's parameter"),
    "a list, not a dict": (lambda m: [p.detach().clone() for p in m.parameters()], update_right, "dict keyed"),
}


@pytest.mark.parametrize("name", WRONG_EMA)
def test_wrong_ema_is_named(name):
    init, update, hint = WRONG_EMA[name]
    rejected(lambda: check_ema(init, update), hint)
