"""tracebacks: the learner's line in a traceback, and each error message kind raised for real on the installed torch."""

import os
import sys
import traceback

import pytest
import torch

from autogradlab import tracebacks
from autogradlab.tracebacks import ERROR_KINDS, error_kind, hint_for, is_kind, is_library, learner_frame, stale_versions

# --------------------------------------------------------------------------- the learner's line


def test_library_files_are_this_package_torch_python_and_installed_packages():
    assert is_library(tracebacks.__file__)
    assert is_library(torch.nn.functional.__file__)
    assert is_library(os.__file__)  # the standard library
    assert is_library(pytest.__file__)  # an installed package
    assert is_library("<frozen importlib._bootstrap>")


def test_learner_files_are_notebook_cells_compiled_code_and_the_learners_files():
    assert not is_library(__file__)
    assert not is_library("<train_step>")
    assert not is_library("<ipython-input-3-abc>")
    assert not is_library("/tmp/ipykernel_4242/1234.py")


def test_learner_frame_skips_torch_and_python_frames_below_the_learners_line():
    def learner(x):
        return torch.nn.functional.linear(x, torch.ones(3, 4))  # wrong shapes: torch raises

    try:
        learner(torch.ones(2, 2))
    except RuntimeError as exc:
        frame = learner_frame(exc)
    assert frame.name == "learner" and "linear" in frame.line

    def learner_json():
        import json

        return json.loads("{")  # the error is raised inside the standard library

    try:
        learner_json()
    except ValueError as exc:
        frame = learner_frame(exc)
    assert frame.name == "learner_json"


def test_learner_frame_is_none_when_only_library_frames_raised():
    try:
        exec(compile("import json; json.loads('{')", "<learner>", "exec"))
    except ValueError as exc:
        error = exc
    frames = tracebacks.learner_frames(traceback.extract_tb(error.__traceback__))
    assert [f.filename for f in frames][-1] == "<learner>"
    error.__traceback__ = error.__traceback__.tb_next.tb_next  # drop this file's and <learner>'s frames
    assert learner_frame(error) is None


# --------------------------------------------------------------------------- error kinds, raised for real


def _raised(fn) -> BaseException:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - whatever torch raises is the point
        return exc
    raise AssertionError("expected an error")


def _freed():
    x = torch.ones(2, requires_grad=True)
    y = (x * x).sum()
    y.backward()
    y.backward()


def _stale():
    x = torch.ones(2, requires_grad=True)
    h = x * 1
    y = h.sin().sum()
    h.add_(1)
    y.backward()


def _no_graph():
    with torch.no_grad():
        y = (torch.ones(2, requires_grad=True) * 2).sum()
    y.backward()


def _unused():
    a, b = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
    torch.autograd.grad((a * 2).sum(), [a, b])


def _ambiguous():
    params = [torch.ones(3), torch.zeros(3)]
    return torch.ones(3) in params[1:]


def _size_mismatch():
    return torch.ones(3) + torch.ones(2)


def _grad_shape():
    bias = torch.ones(3, requires_grad=True)
    add = (torch.ones(4, 3) + bias).grad_fn
    accumulate = add.next_functions[1][0]
    accumulate(torch.ones(4, 3))  # a broadcast gradient handed to the bias's AccumulateGrad


def _node_arity():
    x = torch.ones(2, requires_grad=True)
    (x * 2).grad_fn(torch.ones(2), torch.ones(2))


def _none_value():
    return None + torch.ones(1)


def _not_iterable():
    x = torch.ones(2, requires_grad=True)
    return list(zip((x * 2).grad_fn.next_functions, 3))  # a node's single result zipped as if a tuple


def _recursion():
    def down(n):
        return down(n + 1)

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)
    try:
        down(0)
    finally:
        sys.setrecursionlimit(limit)


RAISERS = {
    "freed": _freed,
    "stale": _stale,
    "no_graph": _no_graph,
    "unused": _unused,
    "ambiguous_bool": _ambiguous,
    "size_mismatch": _size_mismatch,
    "grad_shape": _grad_shape,
    "node_arity": _node_arity,
    "none_value": _none_value,
    "not_iterable": _not_iterable,
    "recursion": _recursion,
}


def test_every_kind_has_a_real_error_that_raises_it():
    assert set(RAISERS) == set(ERROR_KINDS)


@pytest.mark.parametrize("kind", sorted(RAISERS))
def test_the_real_message_is_recognised_as_its_kind(kind):
    error = _raised(RAISERS[kind])
    assert is_kind(error, kind), f"{kind}: torch's message changed? {error}"
    assert error_kind(error) == kind, f"{kind} recognised as {error_kind(error)}: {error}"


def test_stale_versions_reads_both_versions_from_the_real_message():
    assert stale_versions(_raised(_stale)) == (1, 0)
    assert stale_versions(_raised(_freed)) is None


def test_hint_for_follows_the_callers_order_and_rejects_unknown_kinds():
    error = _raised(_freed)
    assert hint_for(error, {"no_graph": "a", "freed": "b"}) == "b"
    assert hint_for(error, {"no_graph": "a"}) is None
    with pytest.raises(KeyError, match="unknown error kind"):
        hint_for(error, {"does not require grad": "a"})
