"""The checker kernel: one way to call the learner's code (LearnerCall + OffLimits), structured errors, comparisons.

Every test reads an ExerciseError's fields (kind, mistake, hint, where), never its text.
"""

import pytest
import torch

from autogradlab.checks.core import (
    BY_HAND,
    Case,
    ExerciseError,
    LearnerCall,
    Mistake,
    OffLimits,
    Routine,
    check_function,
    close,
    compare,
)


def compared(got, expected, **kwargs) -> ExerciseError:
    with pytest.raises(ExerciseError) as info:
        compare(got, expected, what="`answer`", label="a test input", **kwargs)
    return info.value


def called(fn, *args, **options) -> ExerciseError:
    with pytest.raises(ExerciseError) as info:
        LearnerCall(fn, "answer", **options).on("x")(*args)
    return info.value


# --------------------------------------------------------------------------- the error


def test_the_message_is_rendered_from_the_fields():
    error = ExerciseError("value", "`f` is wrong.", detail="measured: 1", where="y = x  (line 3)", hint="look")
    assert str(error).splitlines() == ["`f` is wrong.", "measured: 1", "  in your code: y = x  (line 3)", "Hint: look"]
    lines = error._render_traceback_()
    assert len(lines) == 1 and "`f` is wrong." in lines[0]


def test_but_changes_fields_and_keeps_the_rest():
    error = ExerciseError("raised", "`f` raised.", where="line", mistake="stale")
    hinted = error.but(hint="mind the version counter")
    assert (hinted.kind, hinted.where, hinted.mistake, hinted.hint) == ("raised", "line", "stale", hinted.hint)
    assert error.hint is None


# --------------------------------------------------------------------------- compare


def test_equal_tensors_pass_silently():
    x = torch.randn(3, 4, dtype=torch.float64)
    compare(x.clone(), x, what="`answer`", label="x")


def test_float32_tolerance_accepts_reordered_sums():
    x, w = torch.randn(64, 32), torch.randn(32, 16)
    compare(torch.einsum("ij,jk->ik", x, w), x @ w, what="`answer`", label="x")


def test_non_tensor_answer_is_a_type_error():
    assert compared(1.5, torch.tensor(1.5)).kind == "type"


@pytest.mark.parametrize(
    "got, context, mistake",
    [
        (lambda e: e.T.clone(), {}, "transposed"),
        (lambda e: e.reshape(15).clone(), {}, "layout"),
        (lambda e: e.expand(8, 3, 5).clone(), {"batch_size": 8}, "batch-not-summed"),
        (lambda e: e.sum().reshape(1, 1), {}, "one-number"),
        (lambda e: e[0].clone(), {}, "batch-dim-missing"),
    ],
)
def test_shape_mistakes_are_named(got, context, mistake):
    expected = torch.randn(3, 5, dtype=torch.float64)
    error = compared(got(expected), expected, context=context)
    assert (error.kind, error.mistake) == ("shape", mistake) and error.hint


def test_transposed_square_values_are_named():
    expected = torch.randn(4, 4, dtype=torch.float64)
    assert compared(expected.T.clone(), expected).mistake == "transposed"


@pytest.mark.parametrize(
    "factor, context, mistake",
    [
        (6, {"batch_size": 6}, "times-batch_size"),
        (1 / 6, {"batch_size": 6}, "over-batch_size"),
        (4, {"accum_steps": 4}, "times-accum_steps"),
        (-1, {}, "sign"),
        (2.5, {}, "factor"),
    ],
)
def test_scale_mistakes_are_named(factor, context, mistake):
    expected = torch.randn(6, 3, dtype=torch.float64)
    error = compared(expected * factor, expected, context=context)
    assert (error.kind, error.mistake) == ("value", mistake)
    assert error.measured["max_abs_error"] > 0


def test_a_single_number_off_by_some_factor_names_no_factor():
    # Any number is a multiple of any other: on a 0-dim output the factor is no evidence.
    error = compared(torch.tensor(2.56, dtype=torch.float64), torch.tensor(3.76, dtype=torch.float64))
    assert (error.kind, error.mistake, error.hint) == ("value", None, None)


def test_known_mistake_wins_over_generic_hint_for_values_and_shapes():
    expected = torch.randn(7, dtype=torch.float64)
    twice = Mistake("doubled", "forgot the 2")
    assert compared(expected * 2, expected, mistakes={twice: expected * 2}).mistake == "doubled"
    grads = torch.randn(3, 4, dtype=torch.float64)
    wrong_dim = Mistake("wrong-dim", "summed the wrong dim")
    assert compared(grads.sum(1), grads.sum(0), mistakes={wrong_dim: grads.sum(1)}).mistake == "wrong-dim"
    assert compared(torch.randn(3, dtype=torch.float64), torch.randn(4, dtype=torch.float64)).mistake == "shape"


def test_a_known_mistake_that_overflows_is_named_too():
    expected = torch.ones(3, dtype=torch.float64)
    nan = torch.tensor([1.0, float("nan"), 1.0], dtype=torch.float64)
    error = compared(nan, expected, mistakes={Mistake("naive-exp", "exp overflows"): nan})
    assert (error.kind, error.mistake) == ("not-finite", "naive-exp")


def test_report_measures_the_error():
    error = compared(torch.tensor([0.0, 0.5, 0.0], dtype=torch.float64), torch.zeros(3, dtype=torch.float64))
    assert error.measured["max_abs_error"] == 0.5 and error.measured["index"] == (1,)


def test_dtype_and_nan_are_their_own_kinds():
    expected = torch.ones(3, dtype=torch.float64)
    assert compared(torch.ones(3), expected).kind == "dtype"
    assert compared(torch.tensor([1.0, float("nan"), 1.0], dtype=torch.float64), expected).kind == "not-finite"


def test_close_is_the_one_same_values_test():
    a = torch.ones(3, dtype=torch.float64)
    assert close(a, a + 1e-10) and not close(a, a + 1e-6)
    assert close(a, a + 1e-6, after_steps=True) and not close(a, a * 1.001, after_steps=True)
    assert close(None, None) and not close(a, None) and not close(a, torch.ones(4, dtype=torch.float64))


# --------------------------------------------------------------------------- LearnerCall


def test_not_implemented_and_not_callable():
    def todo(x):
        raise NotImplementedError()

    assert called(todo, 1).kind == "not-implemented"
    assert called(3).kind == "not-a-function"


def test_an_exception_quotes_the_learners_line_and_hides_the_checker():
    def buggy(x):
        return x @ torch.ones(5, 2)  # wrong inner size

    error = called(buggy, torch.ones(3, 4))
    assert error.kind == "raised" and "x @ torch.ones(5, 2)" in error.where
    assert error.__suppress_context__


def test_the_learners_line_skips_frames_inside_torch():
    def no_graph(x):
        return torch.autograd.grad(x.sum(), x)  # x does not require grad: raises inside torch

    error = called(no_graph, torch.ones(2))
    assert "torch.autograd.grad(x.sum(), x)" in error.where and error.mistake == "no_graph"


def test_error_hints_by_error_kind():
    def stale(x):
        x = x.clone().requires_grad_()
        y = x.exp()
        y.add_(1)
        y.sum().backward()

    error = called(stale, torch.ones(2), error_hints={"stale": "exp saved its output"})
    assert (error.kind, error.mistake, error.hint) == ("raised", "stale", "exp saved its output")
    assert called(stale, torch.ones(2), error_hints={"freed": "never"}).hint is None
    assert called(stale, torch.ones(2), error_hints="any raise").hint == "any raise"


def test_an_input_changed_in_place_is_reported_unless_the_inputs_are_meant_to_change():
    def sneaky(x):
        return x.mul_(2)

    assert called(sneaky, torch.arange(3.0)).kind == "changed-input"
    x = torch.arange(3.0)
    LearnerCall(sneaky, "step", frozen_inputs=False)(x)
    assert x.tolist() == [0.0, 2.0, 4.0]


@pytest.mark.parametrize(
    "answer, what",
    [
        (lambda x: torch.set_grad_enabled(False) or 2 * x, "grad mode (torch.is_grad_enabled())"),
        (lambda x: torch.set_default_dtype(torch.float64) or 2 * x, "the default dtype"),
        (lambda x: torch.set_anomaly_enabled(True) or 2 * x, "anomaly detection"),
    ],
)
def test_global_state_left_changed_is_reported_and_restored(answer, what):
    error = called(answer, torch.ones(2))
    assert (error.kind, error.mistake) == ("global-state", what)
    assert torch.is_grad_enabled() and torch.get_default_dtype() == torch.float32 and not torch.is_anomaly_enabled()


# --- autograd off limits ("by hand")


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


def _via_jvp(x):
    return torch.func.jvp(lambda t: t**2, (x,), (torch.ones_like(x),))[1]


def _via_functional_jacobian(x):
    return torch.autograd.functional.jacobian(lambda t: (t**2).sum(), x)


def _swallows_the_refusal(x):
    try:
        return _via_backward(x)
    except Exception:
        return 2 * x


_CASES = [Case((torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64),), "x = [0.5, -1, 2]")]


@pytest.mark.parametrize(
    "answer",
    [
        _via_backward,
        _via_autograd_grad_imported_early,
        _via_torch_func,
        _via_jacrev,
        _via_jvp,
        _via_functional_jacobian,
        _swallows_the_refusal,
    ],
)
def test_by_hand_rejects_every_way_to_call_autograd(answer):
    with pytest.raises(ExerciseError) as info:
        check_function(answer, _square_grad, _CASES, name="grad_square", off_limits=BY_HAND)
    assert info.value.kind == "off-limits" and info.value.hint == BY_HAND.why
    assert _via_backward(torch.ones(2)).tolist() == [2.0, 2.0]  # everything restored


def test_by_hand_accepts_a_formula_and_restores_autograd(capsys):
    check_function(_square_grad, _square_grad, _CASES, name="grad_square", off_limits=BY_HAND)
    assert "✓" in capsys.readouterr().out
    assert torch.allclose(_via_torch_func(torch.ones(2)), 2 * torch.ones(2))
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()


def test_autograd_without_no_graph_keeps_grad_mode_for_hand_run_nodes():
    # A reverse sweep by hand calls the graph's nodes itself: the engine is off, the graph is not.
    def sweep(x):
        y = (x * 3).sum()
        grad = y.grad_fn(torch.ones(()))  # SumBackward0 expands the 1 to x's shape
        return y.grad_fn.next_functions[0][0](grad)[0]

    x = torch.ones(2, requires_grad=True)
    got = LearnerCall(sweep, "sweep", OffLimits(autograd=True))(x)
    assert got.tolist() == [3.0, 3.0]
    assert called(_via_backward, x.detach(), off_limits=OffLimits(autograd=True)).kind == "off-limits"


def test_without_a_declaration_autograd_is_allowed(capsys):
    check_function(_via_backward, _square_grad, _CASES, name="grad_square")
    assert "✓" in capsys.readouterr().out


# --- named routines, Tensor methods on torch's C base class included


def test_a_refused_tensor_method_is_named_and_restored_exactly():
    assert "softmax" not in vars(torch.Tensor)  # defined on the C base class
    refused = OffLimits(routines=(Routine(torch.Tensor, "softmax", "`Tensor.softmax`"),), why="by hand")
    error = called(lambda x: x.softmax(-1), torch.ones(3), off_limits=refused)
    assert (error.kind, error.mistake, error.hint) == ("off-limits", "`Tensor.softmax`", "by hand")
    assert "softmax" not in vars(torch.Tensor) and torch.ones(2).softmax(-1).tolist() == [0.5, 0.5]


def test_a_refused_aten_op_and_a_module_function_are_named():
    refused = OffLimits(
        routines=(
            Routine(torch.ops.aten, "_softmax", "`torch.ops.aten._softmax`"),
            Routine(torch.nn.functional, "softmax", "`F.softmax`"),
        )
    )
    error = called(lambda x: torch.ops.aten._softmax(x, 0, False), torch.ones(2), off_limits=refused)
    assert error.mistake == "`torch.ops.aten._softmax`"
    assert called(lambda x: torch.nn.functional.softmax(x, 0), torch.ones(2), off_limits=refused).kind == "off-limits"
    assert torch.ops.aten._softmax(torch.ones(2), 0, False).tolist() == [0.5, 0.5]


# --- the course's own code


def test_calling_the_course_code_is_named_but_the_course_calling_itself_is_not():
    from autogradlab.models import calculus

    off = OffLimits(course=("autogradlab.models.calculus",), why="write it yourself")
    direct = lambda x: calculus.curve(torch.sin, 0.0, 1.0, points=2)[1]  # noqa: E731
    error = called(direct, torch.ones(2), off_limits=off)
    assert error.kind == "off-limits" and error.mistake.startswith("autogradlab.models.calculus.")
    LearnerCall(lambda x: 2 * x, "fine", off)(torch.ones(2))  # no course call, no error


def test_course_calls_made_by_torch_on_the_learners_behalf_do_not_count():
    module = torch.nn.Linear(2, 2)
    hooked = []
    module.register_forward_hook(lambda *a: hooked.append(1))
    off = OffLimits(course=("autogradlab",))
    LearnerCall(lambda x: module(x), "forward", off)(torch.ones(1, 2))
    assert hooked == [1]


# --------------------------------------------------------------------------- check_function(_outputs)


def test_check_function_prints_one_line(capsys):
    cases = [Case((torch.arange(3.0),), "x"), Case((torch.ones(2, 2),), "y")]
    check_function(lambda x: x + x, lambda x: 2 * x, cases, name="double")
    assert capsys.readouterr().out == "✓ double matches the reference on 2 inputs\n"


def test_check_function_reports_an_input_changed_in_place():
    with pytest.raises(ExerciseError) as info:
        check_function(lambda x: x.mul_(2), lambda x: 2 * x, [Case((torch.arange(3.0),), "x")], name="double")
    assert info.value.kind == "changed-input"


def _pair_cases():
    return [Case((torch.arange(3.0, dtype=torch.float64) + 1,), "x = [1, 2, 3]")]


def test_check_function_with_outputs_names_the_wrong_output_and_its_mistake():
    reference = lambda x: (x * 2, x.sum())  # noqa: E731
    mean = Mistake("mean", "the sum was meant, not the mean", lambda x: (x * 2, x.mean()))
    with pytest.raises(ExerciseError) as info:
        check_function(
            lambda x: (2 * x, x.mean()), reference, _pair_cases(), name="f", outputs=("d", "s"), mistakes=(mean,)
        )
    assert (info.value.kind, info.value.mistake) == ("value", "mean")
    assert info.value.summary.startswith("`s` from `f`")


def test_check_function_with_outputs_accepts_dicts_and_explains_bad_returns(capsys):
    reference = lambda x: (x * 2, x.sum())  # noqa: E731
    check_function(lambda x: {"s": x.sum(), "d": x + x}, reference, _pair_cases(), name="f", outputs=("d", "s"))
    assert capsys.readouterr().out == "✓ f matches the reference on 1 input (outputs d, s)\n"
    for answer in (lambda x: (x,), lambda x: x, lambda x: {"d": x}):
        with pytest.raises(ExerciseError) as info:
            check_function(answer, reference, _pair_cases(), name="f", outputs=("d", "s"))
        assert info.value.kind == "type"


def test_the_error_hint_is_added_only_when_the_learner_raises():
    cases = [Case((torch.arange(3.0),), "x")]
    with pytest.raises(ExerciseError) as info:
        check_function(lambda x: x @ torch.ones(2), lambda x: x, cases, name="f", error_hints="mind the shapes")
    assert (info.value.kind, info.value.hint) == ("raised", "mind the shapes")
    with pytest.raises(ExerciseError) as info:
        check_function(lambda x: 3 * x, lambda x: x, cases, name="f", error_hints="mind the shapes")
    assert info.value.kind == "value" and info.value.hint != "mind the shapes"


def test_building_a_course_dataclass_is_not_a_course_call():
    from autogradlab.graph.saved_bytes import Stored

    LearnerCall(lambda: Stored(4), "build", OffLimits(course=("autogradlab.graph",)))()


def test_a_hook_torch_calls_inside_the_learners_line_is_not_a_course_call():
    x = torch.ones(2, requires_grad=True)
    counted = []

    def unpack(t):  # stands in for a course hook: only torch calls it
        counted.append(1)
        return t

    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, unpack):
        y = x.exp()
    off = OffLimits(course=(__name__,))
    LearnerCall(lambda: y.grad_fn(torch.ones(2)), "sweep", off)()
    assert counted == [1]
    with pytest.raises(ExerciseError) as info:
        LearnerCall(lambda: unpack(x), "direct", off)()
    assert info.value.kind == "off-limits"
    alias = unpack
    with pytest.raises(ExerciseError):
        LearnerCall(lambda: alias(x), "aliased", off)()


def test_an_error_without_a_kind_is_refused():
    with pytest.raises(ValueError):
        ExerciseError("`f` is wrong for x.")  # a message where the kind belongs


def test_errors_render_in_the_learners_language(monkeypatch):
    monkeypatch.setenv("AUTOGRADLAB_LANG", "zh")
    error = called(lambda x: x.add_(1), torch.zeros(2))
    assert error.kind == "changed-input" and error.hint is not None
    assert str(error).splitlines() == [
        "`answer` 以 in-place 方式修改了它的输入（x）。",
        "提示：in-place 算子（`x *= ...`、`x.add_(...)`）会修改调用者的张量；请写成 `x = x * ...`。",
    ]
    monkeypatch.delenv("AUTOGRADLAB_LANG")
    assert str(error).splitlines()[1].startswith("Hint: an in-place op")  # a table's hint follows the language
