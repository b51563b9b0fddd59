"""stepper: a function body run one statement at a time, with errors naming the line."""

import pytest

from autogradlab.models.stepper import Stepper, function_lines


def body(a, b=2):
    """Docstrings are skipped."""
    c = a + b
    squares = [c * i for i in range(3)]  # comprehensions see the locals
    if c > 2:
        c = c * 10
    return c + sum(squares)


def test_runs_statement_by_statement_and_returns():
    s = Stepper(body, {"a": 1})
    sources = [s.step().line.source for _ in range(3)]
    assert sources[0] == "c = a + b" and sources[2].startswith("if c > 2:")
    assert s.locals["c"] == 30 and not s.done
    s.step()
    assert s.done and s.returned == 30 + 9 and s.error is None


def test_line_numbers_count_from_the_def_line():
    lines, _, name = function_lines(body)
    assert name == "body" and [line.lineno for line in lines] == [3, 4, 5, 7]


def helper_that_raises(x):
    return x / 0


def raising(x):
    y = x + 1
    z = helper_that_raises(y)
    return z


def test_error_names_the_line_and_the_helper_line():
    s = Stepper(raising, {"x": 1})
    results = s.run()
    assert len(results) == 2 and s.done and s.returned is None
    assert results[-1].error.startswith("line 3 of raising, `z = helper_that_raises(y)`, raised ZeroDivisionError")
    assert "inside the call, at: return x / 0" in results[-1].error
    with pytest.raises(StopIteration):
        s.step()


def no_return(x):
    x.append(1)


def test_function_without_return_finishes():
    items = []
    s = Stepper(no_return, {"x": items})
    s.run()
    assert s.done and items == [1] and s.returned is None


def test_bad_arguments_and_non_functions_are_clear_errors():
    with pytest.raises(TypeError, match="cannot call body"):
        Stepper(body, {"nope": 1})
    with pytest.raises(TypeError, match="defined with `def`"):
        Stepper(print, {})
    with pytest.raises(ValueError, match="lambda"):
        Stepper(lambda x: x, {"x": 1})
