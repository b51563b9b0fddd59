"""Checkers for chapter 01 (the dynamic computation graph).

1. ``check_params_that_get_grad``: predict which parameters a control-flow-dependent
   forward pass reaches (checked against a real backward for every branch).
2. ``check_standardize``: standardize a tensor without cutting the graph (value and
   gradient against autograd; ``.item()``/``.detach()`` mistakes named).
3. ``check_count_backward_nodes``: walk ``next_functions`` and count the nodes
   (diamonds, ``None`` entries, same-named nodes, a 5,000-op chain).
"""

from __future__ import annotations

import torch

from autogradlab.checks.core import Case, ExerciseError, call_learner, compare, passed, seeded
from autogradlab.graph import capture

# --- Exercise 1: which parameters get a gradient? -------------------------------------------

PARAM_NAMES = ("a", "b", "c", "d")


def branchy_forward(x: torch.Tensor, params: dict, mode: str, steps: int) -> torch.Tensor:
    """A forward pass whose graph depends on Python control flow (chapter 01, exercise 1)."""
    h = x * params["a"]
    if mode == "gate":
        h = h * torch.sigmoid(params["b"])
    for _ in range(steps):
        h = torch.tanh(h + params["c"])
    scale = params["d"].detach()
    return (h * scale).sum()


def _params(seed: int) -> dict:
    gen = seeded(seed)
    return {name: torch.randn(3, generator=gen, dtype=torch.float64, requires_grad=True) for name in PARAM_NAMES}


def _true_params_with_grad(mode: str, steps: int) -> set[str]:
    params = _params(0)
    x = torch.randn(4, 3, generator=seeded(1), dtype=torch.float64)
    branchy_forward(x, params, mode, steps).backward()
    return {name for name, p in params.items() if p.grad is not None}


_SETTINGS = [(mode, steps) for mode in ("gate", "plain") for steps in (0, 1, 3)]


def _hint(name: str, extra: bool, mode: str, steps: int) -> str:
    if name == "d":
        return "d is used only as d.detach(): detach returns a tensor outside the graph, so no gradient reaches d."
    if name == "b":
        if extra:
            return (f"with mode={mode!r} the `if mode == 'gate'` branch does not run, so no op that uses b is "
                    "recorded: the graph is built by the code that actually ran, and b.grad stays None.")
        return "with mode='gate' the branch runs: b is multiplied in, so it is in the graph and gets a gradient."
    if name == "c":
        if extra:
            return "with steps=0 the for loop body never runs: no op with c is recorded, so c gets no gradient."
        return f"with steps={steps} the loop runs and adds c each time: c is in the graph."
    return "a is always used (h = x * a) and requires grad: it always gets a gradient."


def check_params_that_get_grad(params_that_get_grad) -> None:
    """Check ``params_that_get_grad(mode, steps)`` -> set of names, for every mode and step count.

    >>> def answer(mode, steps):
    ...     return {"a"} | ({"b"} if mode == "gate" else set()) | ({"c"} if steps > 0 else set())
    >>> check_params_that_get_grad(answer)
    ✓ params_that_get_grad is right for all 6 settings of mode and steps
    """
    for mode, steps in _SETTINGS:
        label = f"mode={mode!r}, steps={steps}"
        got = call_learner(params_that_get_grad, (mode, steps), "params_that_get_grad", label)
        if isinstance(got, str) or not isinstance(got, (set, frozenset, list, tuple)):
            raise ExerciseError(f"`params_that_get_grad` should return a set of names like {{'a', 'b'}}, "
                                f"got {type(got).__name__} for {label}.")
        got = set(got)
        unknown = got - set(PARAM_NAMES)
        if unknown:
            raise ExerciseError(f"unknown parameter name(s) {sorted(unknown)} for {label}: use 'a', 'b', 'c', 'd'.")
        truth = _true_params_with_grad(mode, steps)
        if got != truth:
            extra, missing = sorted(got - truth), sorted(truth - got)
            # d is wrong in every setting, so its hint explains the most; then the branch, then the loop.
            name = min(extra or missing, key="dbca".index)
            raise ExerciseError(
                f"Wrong for {label}: you said {sorted(got)}, but after backward the parameters with a "
                f"gradient are {sorted(truth)}.\nHint: {_hint(name, bool(extra), mode, steps)}"
            )
    passed(f"params_that_get_grad is right for all {len(_SETTINGS)} settings of mode and steps")


# --- Exercise 2: standardize without cutting the graph ---------------------------------------


def _standardize(x: torch.Tensor) -> torch.Tensor:
    return (x - x.mean()) / x.std()


STANDARDIZE_MISTAKES = {
    "the std was turned into a constant (`.item()`, `float()` or `.detach()`): the gradient that flows "
    "through the std is missing. Keep x.std() a tensor in the graph.":
        lambda x: (x - x.mean()) / x.std().detach(),
    "the mean was turned into a constant (`.item()`, `float()` or `.detach()`): the gradient that flows "
    "through the mean is missing. Keep x.mean() a tensor in the graph.":
        lambda x: (x - x.mean().detach()) / x.std(),
    "both the mean and the std were turned into constants (`.item()`/`.detach()`): only the direct "
    "path x -> output is left in the graph.":
        lambda x: (x - x.mean().detach()) / x.std().detach(),
}

VALUE_MISTAKES = {
    "x.std() divides by N - 1 (unbiased, the default); you divided by N (unbiased=False / correction=0).":
        lambda x: (x - x.mean()) / x.std(correction=0),
    "divide by the standard deviation, not the variance.":
        lambda x: (x - x.mean()) / x.var(),
    "subtract the mean before dividing.":
        lambda x: x / x.std(),
}


def _standardize_cases() -> list[Case]:
    gen = seeded(11)
    return [
        Case((torch.randn(7, generator=gen, dtype=torch.float64) * 2 + 1,), "x of shape (7,) in float64"),
        Case((torch.randn(3, 5, generator=gen, dtype=torch.float64) * 3 - 2,), "x of shape (3, 5) in float64"),
        Case((torch.randn(2, 3, 4, generator=gen) + 0.5,), "x of shape (2, 3, 4) in float32"),
        Case((torch.randn(4, 1, generator=gen, dtype=torch.float64) * 5,), "x of shape (4, 1) in float64"),
    ]


def _grad(fn, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    x = x.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad((fn(x) * weights).sum(), x)
    return grad


def check_standardize(standardize) -> None:
    """Check ``standardize(x)`` = (x − mean) / std over all elements: value AND gradient.

    >>> check_standardize(lambda x: (x - x.mean()) / x.std())
    ✓ standardize keeps the graph: values and gradients match autograd on 4 inputs
    """
    for i, case in enumerate(_standardize_cases()):
        (x,) = case.args
        learner_x = x.clone().requires_grad_(True)
        got = call_learner(standardize, (learner_x,), "standardize", case.label)
        if isinstance(got, torch.Tensor) and got.grad_fn is None:
            raise ExerciseError(
                f"`standardize` returned a tensor with no grad_fn for {case.label}: the graph was cut, so no "
                "gradient can reach x.\nHint: `torch.tensor(...)`, `.tolist()`, `.numpy()` or `.detach()` on the "
                "result copy the values out of the graph; compute with tensor operations only."
            )
        expected = _standardize(x)
        values = {hint: fn(x) for hint, fn in VALUE_MISTAKES.items()}
        compare(got, expected, what="The value of `standardize(x)`", label=case.label, mistakes=values)
        weights = torch.randn(x.shape, generator=seeded(100 + i), dtype=x.dtype)
        (got_grad,) = torch.autograd.grad((got * weights).sum(), learner_x, allow_unused=True)
        if got_grad is None:
            raise ExerciseError(f"no gradient reaches x through `standardize` for {case.label}: the graph was cut.")
        wrong = {hint: _grad(fn, x, weights) for hint, fn in STANDARDIZE_MISTAKES.items()}
        compare(got_grad, _grad(_standardize, x, weights), what="The gradient through `standardize`",
                label=f"{case.label} (gradient of sum(weights * standardize(x)))", mistakes=wrong)
    passed("standardize keeps the graph: values and gradients match autograd on 4 inputs")


# --- Exercise 3: walk next_functions and count the nodes -------------------------------------


def _graphs() -> list[tuple[str, object]]:
    """(label, builder) pairs; each builder returns an output tensor with a graph."""

    def chain():
        x = torch.randn(3, requires_grad=True)
        return x.exp().sin().sum()

    def square():
        x = torch.randn(3, requires_grad=True)
        return (x * x).sum()

    def diamond():
        x = torch.randn(3, requires_grad=True)
        h = x.exp()
        return (h.sin() + h.cos() * h).sum()

    def no_grad_input():
        w = torch.randn(3, 2, requires_grad=True)
        data = torch.randn(4, 3)
        return (data @ w).relu().mean()

    def two_muls():
        a = torch.randn(3, requires_grad=True)
        b = torch.randn(3, requires_grad=True)
        return ((a * 2) * (b * 3)).sum()

    def mlp():
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.ReLU(), torch.nn.Linear(5, 1))
        return net(torch.randn(6, 4)).pow(2).mean()

    def deep_chain():
        x = torch.randn(2, requires_grad=True)
        for _ in range(5000):
            x = x * 1.0001
        return x.sum()

    return [
        ("x.exp().sin().sum()", chain),
        ("(x * x).sum()  (one leaf used twice)", square),
        ("h = x.exp(); (h.sin() + h.cos() * h).sum()  (h used three times)", diamond),
        ("(data @ w).relu().mean()  (data needs no grad)", no_grad_input),
        ("((a * 2) * (b * 3)).sum()  (three MulBackward0 nodes)", two_muls),
        ("a Linear-ReLU-Linear MLP loss", mlp),
        ("a chain of 5,000 multiplications", deep_chain),
    ]


def _node_counts(output: torch.Tensor) -> dict[str, int]:
    """The right count and what typical wrong walks give on the same graph."""
    g = capture(output)
    nodes = [n for n in g.nodes if n.kind != "output"]
    paths = {nodes[0].id: 1}
    for src, dst in g.edges:
        if g.node(src).kind != "output":
            paths[dst] = paths.get(dst, 0) + paths.get(src, 0)
    return {
        "right": len(nodes),
        "paths": sum(paths.values()),
        "no_leaves": sum(n.kind == "op" for n in nodes),
        "names": len({n.name for n in nodes}),
    }


_WALK_HINTS = {
    "paths": "you counted a node once per path that reaches it. A node used by several ops (a shared "
             "intermediate, or a leaf used twice) is still one node: keep a `seen` set of visited nodes.",
    "no_leaves": "AccumulateGrad nodes count too: there is one per leaf that requires grad (count every node "
                 "object you reach, not only the ...Backward ones).",
    "names": "two different nodes can have the same name (several MulBackward0): remember visited nodes by "
             "identity (a set of node objects), not by `node.name()`.",
}


def check_count_backward_nodes(count_backward_nodes) -> None:
    """Check ``count_backward_nodes(output)``: the number of distinct nodes reachable from ``output.grad_fn``.

    >>> def count(output):
    ...     seen, stack = set(), [output.grad_fn]
    ...     while stack:
    ...         node = stack.pop()
    ...         if node is None or node in seen:
    ...             continue
    ...         seen.add(node)
    ...         stack.extend(child for child, _ in node.next_functions)
    ...     return len(seen)
    >>> check_count_backward_nodes(count)
    ✓ count_backward_nodes is right on 7 graphs, including a 5,000-op chain
    """
    graphs = _graphs()
    for label, build in graphs:
        output = build()
        counts = _node_counts(output)
        try:
            got = count_backward_nodes(output)
        except RecursionError:
            raise ExerciseError(
                f"`count_backward_nodes` hit Python's recursion limit on {label}.\nHint: a recursive walk fails "
                "on deep graphs (real models have thousands of nodes): use a loop with an explicit stack (a list)."
            ) from None
        except AttributeError as exc:
            if "NoneType" in str(exc):
                raise ExerciseError(
                    f"`count_backward_nodes` raised AttributeError on {label}: {exc}\nHint: next_functions holds "
                    "(None, 0) for an input that needs no gradient (like `data`): skip None entries."
                ) from None
            got = call_learner(count_backward_nodes, (output,), "count_backward_nodes", label)
        except NotImplementedError:
            got = call_learner(count_backward_nodes, (output,), "count_backward_nodes", label)
        except Exception:  # report the learner's error with the line that raised it
            got = call_learner(count_backward_nodes, (output,), "count_backward_nodes", label)
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if isinstance(got, bool) or not isinstance(got, int):
            raise ExerciseError(f"`count_backward_nodes` should return an int, got {type(got).__name__} for {label}.")
        right = counts["right"]
        if got == right:
            continue
        hint = next((h for key, h in _WALK_HINTS.items() if got == counts[key] != right), None)
        if hint is None and got == right + 1:
            hint = "one too many: count the backward nodes only, not the output tensor itself."
        if hint is None and got == right - 1:
            hint = "one too few: the root (output.grad_fn) is a node too."
        message = f"Wrong count for {label}: got {got}, but {right} distinct backward nodes are reachable."
        raise ExerciseError(message + (f"\nHint: {hint}" if hint else ""))
    passed(f"count_backward_nodes is right on {len(graphs)} graphs, including a 5,000-op chain")
