"""Chapter 01 checkers: right answers in several forms pass, typical wrong ones get their hint."""

import re

import pytest
import torch

from autogradlab.checks.ch01 import (
    branchy_forward,
    check_count_backward_nodes,
    check_params_that_get_grad,
    check_standardize,
)
from autogradlab.checks.core import ExerciseError

# --- exercise 1 ---------------------------------------------------------------------------


def right_sets(mode, steps):
    names = {"a"}
    if mode == "gate":
        names.add("b")
    if steps > 0:
        names.add("c")
    return names


def by_running(mode, steps):
    params = {n: torch.ones(3, requires_grad=True) for n in "abcd"}
    branchy_forward(torch.ones(2, 3), params, mode, steps).backward()
    return [n for n, p in params.items() if p.grad is not None]


CORRECT_PARAMS = {"sets": right_sets, "list from a real backward": by_running,
                  "tuple": lambda mode, steps: tuple(sorted(right_sets(mode, steps)))}

WRONG_PARAMS = {
    "everything used in the code": (lambda m, s: {"a", "b", "c", "d"}, "d.detach()"),
    "d included": (lambda m, s: right_sets(m, s) | {"d"}, "d.detach()"),
    "b always": (lambda m, s: right_sets(m, s) | {"b"}, "branch does not run"),
    "b never": (lambda m, s: right_sets(m, s) - {"b"}, "the branch runs"),
    "c always": (lambda m, s: right_sets(m, s) | {"c"}, "never runs"),
    "c never": (lambda m, s: right_sets(m, s) - {"c"}, "the loop runs"),
    "a missing": (lambda m, s: right_sets(m, s) - {"a"}, "a is always used"),
    "a string": (lambda m, s: "abc", "set of names"),
    "unknown name": (lambda m, s: right_sets(m, s) | {"w"}, "unknown parameter"),
    "not implemented": (lambda m, s: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
}


@pytest.mark.parametrize("name", CORRECT_PARAMS)
def test_correct_param_predictions_pass(name, capsys):
    check_params_that_get_grad(CORRECT_PARAMS[name])
    assert capsys.readouterr().out.startswith("✓ params_that_get_grad")


@pytest.mark.parametrize("name", WRONG_PARAMS)
def test_wrong_param_predictions_rejected_with_hint(name):
    answer, hint = WRONG_PARAMS[name]
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_params_that_get_grad(answer)


# --- exercise 2 ---------------------------------------------------------------------------

CORRECT_STANDARDIZE = {
    "textbook": lambda x: (x - x.mean()) / x.std(),
    "torch.std_mean": lambda x: (lambda s, m: (x - m) / s)(*torch.std_mean(x)),
    "by hand": lambda x: (x - x.sum() / x.numel()) / ((x - x.mean()).pow(2).sum() / (x.numel() - 1)).sqrt(),
}

WRONG_STANDARDIZE = {
    "std via item": (lambda x: (x - x.mean()) / x.std().item(), "the std was turned into a constant"),
    "std detached": (lambda x: (x - x.mean()) / x.std().detach(), "the std was turned into a constant"),
    "mean via float": (lambda x: (x - float(x.mean())) / x.std(), "the mean was turned into a constant"),
    "both items": (lambda x: (x - x.mean().item()) / x.std().item(), "both the mean and the std"),
    "rewrapped": (lambda x: torch.tensor(((x - x.mean()) / x.std()).tolist(), dtype=x.dtype), "no grad_fn"),
    "detached result": (lambda x: ((x - x.mean()) / x.std()).detach(), "no grad_fn"),
    "biased std": (lambda x: (x - x.mean()) / x.std(correction=0), "N - 1"),
    "variance": (lambda x: (x - x.mean()) / x.var(), "not the variance"),
    "no centering": (lambda x: x / x.std(), "subtract the mean"),
    "python list": (lambda x: ((x - x.mean()) / x.std()).tolist(), "got a list"),
    "not implemented": (lambda x: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
}


@pytest.mark.parametrize("name", CORRECT_STANDARDIZE)
def test_correct_standardize_passes(name, capsys):
    check_standardize(CORRECT_STANDARDIZE[name])
    assert capsys.readouterr().out.startswith("✓ standardize")


@pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad=True to a scalar")
@pytest.mark.parametrize("name", WRONG_STANDARDIZE)
def test_wrong_standardize_rejected_with_hint(name):
    answer, hint = WRONG_STANDARDIZE[name]
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_standardize(answer)


# --- exercise 3 ---------------------------------------------------------------------------


def count_iterative(output):
    seen, stack = set(), [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack.extend(child for child, _ in node.next_functions)
    return len(seen)


def count_bfs(output):
    from collections import deque

    seen = {output.grad_fn}
    queue = deque([output.grad_fn])
    while queue:
        for child, _ in queue.popleft().next_functions:
            if child is not None and child not in seen:
                seen.add(child)
                queue.append(child)
    return len(seen)


def count_recursive(output):
    seen = set()

    def visit(node):
        if node is None or node in seen:
            return
        seen.add(node)
        for child, _ in node.next_functions:
            visit(child)

    visit(output.grad_fn)
    return len(seen)


def count_paths(output):
    count, stack = 0, [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is None:
            continue
        count += 1
        stack.extend(child for child, _ in node.next_functions)
    return count


def count_without_leaves(output):
    return sum(1 for _ in _iter_nodes(output) if "AccumulateGrad" not in _.name())


def count_by_name(output):
    return len({node.name() for node in _iter_nodes(output)})


def _iter_nodes(output):
    seen, stack = set(), [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        yield node
        stack.extend(child for child, _ in node.next_functions)


def count_no_none_check(output):
    seen, stack = set(), [output.grad_fn]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        stack.extend(child for child, _ in node.next_functions)
    return len(seen)


CORRECT_COUNTS = {"iterative DFS": count_iterative, "BFS with deque": count_bfs,
                  "tensor result": lambda out: torch.tensor(count_iterative(out))}

WRONG_COUNTS = {
    "recursive": (count_recursive, "recursion limit"),
    "counts paths": (count_paths, "once per path"),
    "skips AccumulateGrad": (count_without_leaves, "AccumulateGrad nodes count too"),
    "by name": (count_by_name, "by identity"),
    "plus output": (lambda out: count_iterative(out) + 1, "one too many"),
    "crashes on None": (count_no_none_check, "skip None entries"),
    "float": (lambda out: float(count_iterative(out)), "should return an int"),
    "not implemented": (lambda out: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
}


@pytest.mark.parametrize("name", CORRECT_COUNTS)
def test_correct_counts_pass(name, capsys):
    check_count_backward_nodes(CORRECT_COUNTS[name])
    assert capsys.readouterr().out.startswith("✓ count_backward_nodes")


@pytest.mark.parametrize("name", WRONG_COUNTS)
def test_wrong_counts_rejected_with_hint(name):
    answer, hint = WRONG_COUNTS[name]
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_count_backward_nodes(answer)
