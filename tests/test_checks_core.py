"""The shared checker machinery: comparisons, hints and how learner errors are reported."""

import pytest
import torch

from autogradlab.checks.core import Case, ExerciseError, call_learner, check_function, compare


def expect_hint(got, expected, fragment, **kwargs):
    with pytest.raises(ExerciseError) as info:
        compare(got, expected, what="`answer`", label="a test input", **kwargs)
    assert fragment in str(info.value), str(info.value)
    return str(info.value)


def test_equal_tensors_pass_silently():
    x = torch.randn(3, 4, dtype=torch.float64)
    compare(x.clone(), x, what="`answer`", label="x")


def test_float32_tolerance_accepts_reordered_sums():
    x = torch.randn(64, 32)
    w = torch.randn(32, 16)
    compare(torch.einsum("ij,jk->ik", x, w), x @ w, what="`answer`", label="x")


def test_non_tensor_answer_is_explained():
    message = expect_hint(1.5, torch.tensor(1.5), "a Python number")
    assert "float" in message


def test_transposed_shape_is_named():
    expected = torch.randn(3, 5)
    expect_hint(expected.T.clone(), expected, "transpose of the expected one")


def test_transposed_square_values_are_named():
    expected = torch.randn(4, 4, dtype=torch.float64)
    expect_hint(expected.T.clone(), expected, "transpose of the right one")


def test_missing_batch_sum_is_named():
    expected = torch.randn(5, dtype=torch.float64)
    per_example = torch.randn(8, 5, dtype=torch.float64)
    expect_hint(per_example, expected, "sum over the batch dimension", context={"batch_size": 8})


def test_factor_of_batch_size_is_named_sum_vs_mean():
    expected = torch.randn(6, 3, dtype=torch.float64)
    expect_hint(expected * 6, expected, "6× too large (batch_size = 6)", context={"batch_size": 6})
    expect_hint(expected / 6, expected, "6× too small", context={"batch_size": 6})


def test_factor_of_accum_steps_is_named():
    expected = torch.randn(10, dtype=torch.float64)
    expect_hint(expected * 4, expected, "not divided by accum_steps", context={"accum_steps": 4})


def test_sign_flip_and_other_constant_factors():
    expected = torch.randn(7, dtype=torch.float64)
    expect_hint(-expected, expected, "sign is flipped")
    expect_hint(expected * 2.5, expected, "same factor 2.5")


def test_known_mistake_wins_over_generic_hint():
    expected = torch.randn(7, dtype=torch.float64)
    wrong = expected * 2
    expect_hint(wrong, expected, "forgot the 2", mistakes={"forgot the 2": expected * 2})


def test_report_shows_measured_error_and_tolerance():
    expected = torch.zeros(3, dtype=torch.float64)
    got = torch.tensor([0.0, 0.5, 0.0], dtype=torch.float64)
    message = expect_hint(got, expected, "max |error| = 0.5 at index (1,)")
    assert "rtol=1e-07" in message


def test_dtype_mismatch_and_nan_are_reported():
    expected = torch.ones(3, dtype=torch.float64)
    expect_hint(torch.ones(3), expected, "Dtype: got torch.float32")
    expect_hint(torch.tensor([1.0, float("nan"), 1.0], dtype=torch.float64), expected, "inf or NaN")


def test_not_implemented_is_a_friendly_error():
    def todo(x):
        raise NotImplementedError()

    with pytest.raises(ExerciseError, match="still raises NotImplementedError"):
        call_learner(todo, (1,), "todo", "x")


def test_learner_exception_quotes_the_learner_line():
    def buggy(x):
        return x @ torch.ones(5, 2)  # wrong inner size

    with pytest.raises(ExerciseError) as info:
        call_learner(buggy, (torch.ones(3, 4),), "buggy", "x of shape (3, 4)")
    message = str(info.value)
    assert "raised RuntimeError" in message and "x @ torch.ones(5, 2)" in message
    assert info.value.__suppress_context__  # no chained package traceback


def test_not_callable_is_explained():
    with pytest.raises(ExerciseError, match="should be a function"):
        call_learner(3, (), "answer", "x")


def test_check_function_rejects_in_place_modification_of_inputs():
    def sneaky(x):
        x.mul_(2)
        return x

    cases = [Case((torch.arange(3.0),), "x")]
    with pytest.raises(ExerciseError, match="changed its input in place"):
        check_function(sneaky, lambda x: 2 * x, cases, name="double")


def test_check_function_prints_one_check_line(capsys):
    cases = [Case((torch.arange(3.0),), "x"), Case((torch.ones(2, 2),), "y")]
    check_function(lambda x: x + x, lambda x: 2 * x, cases, name="double")
    assert capsys.readouterr().out == "✓ double matches the reference on 2 inputs\n"


def test_exercise_error_renders_compactly_in_ipython():
    lines = ExerciseError("wrong")._render_traceback_()
    assert len(lines) == 1 and "wrong" in lines[0]


def test_known_mistake_with_a_wrong_shape_wins_over_generic_shape_hint():
    expected = torch.randn(4, dtype=torch.float64)
    grads = torch.randn(3, 4, dtype=torch.float64)
    expect_hint(grads.sum(1), grads.sum(0), "summed the wrong dim", mistakes={"summed the wrong dim": grads.sum(1)})
    expect_hint(torch.randn(3, dtype=torch.float64), expected, "compare the shapes")


def _pair_cases():
    return [Case((torch.arange(3.0, dtype=torch.float64) + 1,), "x = [1, 2, 3]")]


def test_check_function_outputs_names_the_wrong_output_and_its_mistake():
    from autogradlab.checks.core import check_function_outputs

    reference = lambda x: (x * 2, x.sum())  # noqa: E731
    mistakes = {"the sum was meant, not the mean": lambda x: (x * 2, x.mean())}
    with pytest.raises(ExerciseError) as info:
        check_function_outputs(
            lambda x: (2 * x, x.mean()), reference, _pair_cases(), name="f", outputs=("d", "s"), mistakes=mistakes
        )
    assert "`s` from `f`" in str(info.value) and "the sum was meant" in str(info.value)


def test_check_function_outputs_accepts_dicts_and_explains_bad_returns(capsys):
    from autogradlab.checks.core import check_function_outputs

    reference = lambda x: (x * 2, x.sum())  # noqa: E731
    check_function_outputs(lambda x: {"s": x.sum(), "d": x + x}, reference, _pair_cases(), name="f", outputs=("d", "s"))
    assert capsys.readouterr().out == "✓ f matches the reference on 1 input (outputs d, s)\n"
    with pytest.raises(ExerciseError, match="returned 1 values; expected 2 values"):
        check_function_outputs(lambda x: (x,), reference, _pair_cases(), name="f", outputs=("d", "s"))
    with pytest.raises(ExerciseError, match="as a tuple"):
        check_function_outputs(lambda x: x, reference, _pair_cases(), name="f", outputs=("d", "s"))


def test_check_function_outputs_adds_the_error_hint_when_the_learner_raises():
    from autogradlab.checks.core import check_function_outputs

    def bad(x):
        return x @ torch.ones(2, 2, dtype=x.dtype), x

    with pytest.raises(ExerciseError) as info:
        check_function_outputs(
            bad, lambda x: (x, x), _pair_cases(), name="f", outputs=("a", "b"), error_hint="reason with shapes"
        )
    assert "raised RuntimeError" in str(info.value) and "Hint: reason with shapes" in str(info.value)


def test_check_function_adds_the_error_hint_only_when_the_learner_raises():
    cases = [Case((torch.arange(3.0),), "x")]
    with pytest.raises(ExerciseError) as info:
        check_function(lambda x: x @ torch.ones(2), lambda x: x, cases, name="f", error_hint="mind the shapes")
    assert "Hint: mind the shapes" in str(info.value)
    with pytest.raises(ExerciseError) as info:
        check_function(lambda x: 3 * x, lambda x: x, cases, name="f", error_hint="mind the shapes")
    assert "mind the shapes" not in str(info.value)


def test_learner_line_skips_frames_inside_torch():
    def no_graph(x):
        return torch.autograd.grad(x.sum(), x)  # x does not require grad: raises inside torch

    with pytest.raises(ExerciseError) as info:
        call_learner(no_graph, (torch.ones(2),), "no_graph", "x")
    assert "torch.autograd.grad(x.sum(), x)" in str(info.value)


# --- "by hand" contract: autograd is out of reach inside the learner's function ---------------

_CASES = [Case((torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64),), "x = [0.5, -1, 2]")]


def _square_grad(x):
    return 2 * x


def _via_backward(x):
    x = x.clone().requires_grad_()
    (x**2).sum().backward()
    return x.grad


def _via_autograd_grad_imported_early(x, _grad=torch.autograd.grad):
    x = x.clone().requires_grad_()
    return _grad((x**2).sum(), x)[0]


def _via_torch_func(x):
    return torch.func.grad(lambda t: (t**2).sum())(x)


def _via_jacrev(x):
    return torch.func.jacrev(lambda t: (t**2).sum())(x)


def _via_functional_jacobian(x):
    return torch.autograd.functional.jacobian(lambda t: (t**2).sum(), x)


@pytest.mark.parametrize(
    "answer, named",
    [
        (_via_backward, "`backward()`"),
        (_via_autograd_grad_imported_early, "autograd"),
        (_via_torch_func, "torch.func"),
        (_via_jacrev, "torch.func"),
        (_via_functional_jacobian, "torch.autograd.functional.jacobian"),
    ],
)
def test_by_hand_rejects_every_way_to_call_autograd(answer, named):
    with pytest.raises(ExerciseError, match="used autograd") as err:
        check_function(answer, _square_grad, _CASES, name="grad_square", no_autograd=True)
    assert named in str(err.value) and "by hand" in str(err.value)


def test_by_hand_accepts_a_formula_and_restores_autograd(capsys):
    check_function(_square_grad, _square_grad, _CASES, name="grad_square", no_autograd=True)
    assert "✓" in capsys.readouterr().out
    assert torch.allclose(_via_torch_func(torch.ones(2)), 2 * torch.ones(2))  # patches undone
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()


def test_without_by_hand_autograd_is_allowed(capsys):
    check_function(_via_backward, _square_grad, _CASES, name="grad_square")
    assert "✓" in capsys.readouterr().out


def _switches_grad_off(x):
    torch.set_grad_enabled(False)
    return 2 * x


def _changes_default_dtype(x):
    torch.set_default_dtype(torch.float64)
    return 2 * x


@pytest.mark.parametrize(
    "answer, named", [(_switches_grad_off, "grad mode"), (_changes_default_dtype, "default dtype")]
)
def test_global_state_left_changed_is_a_mistake_and_is_restored(answer, named):
    with pytest.raises(ExerciseError, match=named):
        check_function(answer, _square_grad, _CASES, name="grad_square")
    assert torch.is_grad_enabled() and torch.get_default_dtype() == torch.float32
