"""Chapter 04 checkers: right answers in several forms pass, typical wrong ones get their hint."""

import re

import pytest
import torch

from autogradlab.checks.ch04 import (
    OPS,
    check_saved_activation_bytes,
    check_scale_parameter,
    check_what_gets_saved,
    make_mlp,
    measure_saved_bytes,
    measured_activation_bytes,
)
from autogradlab.checks.core import ExerciseError
from autogradlab.graph import capture


def item(dtype):
    return torch.empty((), dtype=dtype).element_size()


# --- exercise 1 ---------------------------------------------------------------------------


def layer_by_layer(batch, sizes, dtype):
    es = item(dtype)
    total = batch * sizes[0] * es  # the input, saved by the first Linear
    for hidden in sizes[1:-1]:
        total += batch * hidden * es  # ReLU output = next Linear's input: one storage
    return total + batch * sizes[-1] * es  # the output, saved by pow


def by_measuring(batch, sizes, dtype):
    model = make_mlp(sizes, dtype)
    x = torch.zeros(batch, sizes[0], dtype=dtype)
    return capture(model(x).pow(2).mean(), params=model).activation_bytes()


CORRECT_BYTES = {
    "closed form": lambda b, s, d: b * sum(s) * item(d),
    "layer by layer": layer_by_layer,
    "measured with capture": by_measuring,
    "float result": lambda b, s, d: float(b * sum(s) * item(d)),
}

WRONG_BYTES = {
    "double counts hidden": (lambda b, s, d: b * (sum(s) + sum(s[1:-1])) * item(d), "count it once"),
    "forgets the input": (lambda b, s, d: b * (sum(s) - s[0]) * item(d), "count the input batch"),
    "forgets the loss": (lambda b, s, d: b * (sum(s) - s[-1]) * item(d), "count the final output"),
    "elements": (lambda b, s, d: b * sum(s), "bytes, not elements"),
    "always 4 bytes": (lambda b, s, d: b * sum(s) * 4, "float64 takes 8 bytes"),
    "with params": (lambda b, s, d: b * sum(s) * item(d) + sum((i * o + o) * item(d) for i, o in zip(s, s[1:])),
                    "leave them out"),
    "no batch": (lambda b, s, d: sum(s) * item(d), "multiply by the batch size"),
    "something else": (lambda b, s, d: 7, "list what each layer saves"),
    "a string": (lambda b, s, d: "480", "an int"),
    "not implemented": (lambda b, s, d: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
}


@pytest.mark.parametrize("name", CORRECT_BYTES)
def test_correct_activation_bytes_pass(name, capsys):
    check_saved_activation_bytes(CORRECT_BYTES[name])
    assert capsys.readouterr().out.startswith("✓ saved_activation_bytes")


@pytest.mark.parametrize("name", WRONG_BYTES)
def test_wrong_activation_bytes_rejected_with_hint(name):
    answer, hint = WRONG_BYTES[name]
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_saved_activation_bytes(answer)


def test_measurement_excludes_parameters_and_counts_storages_once():
    model = make_mlp([4, 5, 3])
    x = torch.randn(2, 4)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    _, without = measure_saved_bytes(lambda: model(x).pow(2).mean(), exclude=params)
    _, with_params = measure_saved_bytes(lambda: model(x).pow(2).mean())
    assert without == measured_activation_bytes(2, [4, 5, 3], torch.float32) == 2 * 12 * 4
    # Only the second weight is saved (to pass the gradient on to the hidden layer); the first layer's
    # weight would only be needed for a gradient with respect to x, which does not require grad.
    assert with_params == without + 4 * (3 * 5)


# --- exercise 2 ---------------------------------------------------------------------------

SAVES = {"exp": "output", "sin": "input", "tanh": "output", "sigmoid": "output", "relu": "output", "log": "input",
         "sqrt": "output", "square": "input", "add_one": "nothing", "times_three": "nothing", "softmax": "output",
         "abs": "input", "reciprocal": "output"}


def by_experiment(op):
    from autogradlab.checks.ch04 import _breaks

    return "input" if _breaks(op, "input") else "output" if _breaks(op, "output") else "nothing"


def by_capture(op):
    a = torch.rand(3, requires_grad=True) + 0.5
    node = capture(OPS[op](a)).nodes[1]
    names = {s.name for s in node.saved}
    return "output" if "result" in names else "input" if "self" in names else "nothing"


CORRECT_SAVED = {"table": SAVES.get, "experiment": by_experiment, "capture": by_capture}

WRONG_SAVED = {
    "always input": (lambda op: "input", "is the output itself"),
    "always output": (lambda op: "output", "needs the input x"),
    "always nothing": (lambda op: "nothing", "is the output itself"),
    "sqrt as input": (lambda op: {**SAVES, "sqrt": "input"}[op], "1/(2y)"),
    "times three saves input": (lambda op: {**SAVES, "times_three": "input"}[op], "only the constant 3"),
    "relu saves input": (lambda op: {**SAVES, "relu": "input"}[op], "mask (y > 0)"),
    "softmax saves input": (lambda op: {**SAVES, "softmax": "input"}[op], "needs the output y"),
    "a bool": (lambda op: True, "one of 'input'"),
    "not implemented": (lambda op: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
}


@pytest.mark.parametrize("name", CORRECT_SAVED)
def test_correct_saved_predictions_pass(name, capsys):
    check_what_gets_saved(CORRECT_SAVED[name])
    assert capsys.readouterr().out.startswith("✓ what_gets_saved")


@pytest.mark.parametrize("name", WRONG_SAVED)
def test_wrong_saved_predictions_rejected_with_hint(name):
    answer, hint = WRONG_SAVED[name]
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_what_gets_saved(answer)


# --- exercise 3 ---------------------------------------------------------------------------


def with_no_grad(param, factor):
    with torch.no_grad():
        param.mul_(factor)


def with_copy(param, factor):
    with torch.no_grad():
        param.copy_(param * factor)


def through_detach(param, factor):
    param.detach().mul_(factor)  # detach shares the version counter: autograd still sees it


CORRECT_SCALE = {"no_grad mul_": with_no_grad, "no_grad copy_": with_copy, "detach().mul_": through_detach}


def via_data(param, factor):
    param.data.mul_(factor)


def assign_data(param, factor):
    param.data = param.data * factor


def plain_inplace(param, factor):
    param.mul_(factor)


def rebinding(param, factor):
    param = param * factor  # noqa: F841


def returns_new(param, factor):
    with torch.no_grad():
        return param * factor


def loses_leaf(param, factor):
    param.requires_grad_(False)
    param.mul_(factor)


WRONG_SCALE = {
    ".data.mul_": (via_data, "its own version counter"),
    ".data = ...": (assign_data, "its own version counter"),
    "in place with recording on": (plain_inplace, "torch.no_grad()"),
    "rebinding": (rebinding, "only rebinds a local name"),
    "returns a new tensor": (returns_new, "you returned a new tensor"),
    "turns off requires_grad": (loses_leaf, "no longer a trainable leaf"),
    "wrong factor": (lambda p, f: with_no_grad(p, f + 1), "multiplied by"),
    "not implemented": (lambda p, f: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
}


@pytest.mark.parametrize("name", CORRECT_SCALE)
def test_correct_scaling_passes(name, capsys):
    check_scale_parameter(CORRECT_SCALE[name])
    assert capsys.readouterr().out.startswith("✓ scale_parameter_")


@pytest.mark.parametrize("name", WRONG_SCALE)
def test_wrong_scaling_rejected_with_hint(name):
    answer, hint = WRONG_SCALE[name]
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_scale_parameter(answer)
