"""Chapter 01 checkers: right answers in several forms pass, typical wrong ones are named (kind, mistake)."""

import pytest
import torch

from autogradlab.checks.ch01 import (
    _routed_cases,
    _scaled,
    _sweep,
    check_params_that_get_grad,
    check_reverse_sweep,
    check_scaled_scores,
)
from autogradlab.checks.core import ExerciseError
from autogradlab.graph import capture, record_backward
from autogradlab.models.dynamic_graph import branchy_forward, broken_scaled_scores, routed_forward


def rejected(checker, answer) -> ExerciseError:
    with pytest.raises(ExerciseError) as info:
        checker(answer)
    return info.value


def assert_named(error: ExerciseError, kind: str, mistake: str | None = None) -> None:
    assert error.kind == kind, (error.kind, str(error))
    if mistake is not None:
        assert error.mistake == mistake and error.hint, (error.mistake, str(error))


# --- exercise 1 ---------------------------------------------------------------------------


def right_sets(x, params):
    names = {"a"}
    if torch.relu(x @ params["a"]).sum() > 1.0:
        names.add("b")
    if int(x.abs().max()) > 0:
        names.add("c")
    return names


def by_running(x, params):
    params = {n: p.clone().detach().requires_grad_(True) for n, p in params.items()}
    routed_forward(x, params).backward()
    return {n for n, p in params.items() if p.grad is not None}


def by_capturing(x, params):
    return set(capture(routed_forward(x, params), params=params).params_with_grad())


def zero_means_none(x, params):  # relu gave only zeros, so "a got nothing"
    names = right_sets(x, params)
    return names - {"a"} if torch.relu(x @ params["a"]).sum() == 0 else names


def branch_on_mean(x, params):  # the condition read as the mean, not the sum
    names = right_sets(x, params) - {"b"}
    return names | {"b"} if torch.relu(x @ params["a"]).mean() > 1.0 else names


CORRECT_PARAMS = {
    "sets": right_sets,
    "frozenset": lambda x, params: frozenset(right_sets(x, params)),
    "running the forward to read the values": lambda x, params: (
        {"a"}
        | ({"b"} if torch.relu(x @ params["a"]).sum().item() > 1 else set())
        | ({"c"} if x.abs().max() >= 1 else set())
    ),
}

WRONG_PARAMS = {  # answer, (kind, mistake)
    "everything used in the code": (lambda x, p: {"a", "b", "c", "d"}, ("value", "detached")),
    "d included": (lambda x, p: right_sets(x, p) | {"d"}, ("value", "detached")),
    "b always": (lambda x, p: right_sets(x, p) | {"b"}, ("value", "branch")),
    "b never": (lambda x, p: right_sets(x, p) - {"b"}, ("value", "branch")),
    "b on the mean": (branch_on_mean, ("value", "branch")),
    "c always": (lambda x, p: right_sets(x, p) | {"c"}, ("value", "loop")),
    "c never": (lambda x, p: right_sets(x, p) - {"c"}, ("value", "loop")),
    "a zero gradient taken for None": (zero_means_none, ("value", "zero-is-not-none")),
    "a list": (lambda x, p: sorted(right_sets(x, p)), ("type", None)),
    "a string": (lambda x, p: "abc", ("type", None)),
    "unknown name": (lambda x, p: right_sets(x, p) | {"w"}, ("type", None)),
    "not implemented": (lambda x, p: (_ for _ in ()).throw(NotImplementedError()), ("not-implemented", None)),
    "runs backward instead of reasoning": (by_running, ("off-limits", None)),
    "reads capture() instead of reasoning": (by_capturing, ("off-limits", None)),
}


@pytest.mark.parametrize("name", CORRECT_PARAMS)
def test_correct_param_predictions_pass(name, capsys):
    check_params_that_get_grad(CORRECT_PARAMS[name])
    assert capsys.readouterr().out.startswith("✓ params_that_get_grad")


@pytest.mark.parametrize("name", WRONG_PARAMS)
def test_wrong_param_predictions_rejected_with_hint(name):
    answer, (kind, mistake) = WRONG_PARAMS[name]
    assert_named(rejected(check_params_that_get_grad, answer), kind, mistake)


def test_the_cases_cover_every_branch_and_a_zero_gradient():
    truths = [by_running(*case.args) for case in _routed_cases()]
    assert {frozenset(t) for t in truths} >= {frozenset("ab"), frozenset("ac"), frozenset("a"), frozenset("abc")}
    x, params = _routed_cases()[1].args
    assert torch.relu(x @ params["a"]).sum() == 0  # a gets zeros, not None


# --- exercise 2: repair the cuts ---------------------------------------------------------------


def repaired(x, t):
    return ((x - x.mean()) / x.std().clamp_min(1e-6)).clamp(-3.0, 3.0) / t.to(x.dtype)


def repaired_with_where(x, t):
    m, s = x.mean(), x.std()
    z = (x - m) / s
    z = torch.where(z > 3, torch.full_like(z, 3.0), torch.where(z < -3, torch.full_like(z, -3.0), z))
    return z / t


def repaired_std_mean(x, t):
    s, m = torch.std_mean(x)
    return torch.clamp((x - m) / s, min=-3, max=3).div(t)


CORRECT_SCALED = {
    "repaired in place of the cuts": repaired,
    "torch.where for the clamp": repaired_with_where,
    "torch.std_mean": repaired_std_mean,
    "no clamp_min, no cast": lambda x, t: ((x - x.mean()) / x.std()).clamp(-3, 3) / t,
}


def keeps_item(x, t):
    return ((x - x.mean().item()) / x.std()).clamp(-3, 3) / t


def keeps_tensor_copy(x, t):
    return ((x - x.mean()) / torch.tensor(x.std(), dtype=x.dtype)).clamp(-3, 3) / t


def keeps_no_grad(x, t):
    z = (x - x.mean()) / x.std()
    with torch.no_grad():
        z = z.clamp(-3, 3)
    return z / t


def hides_clamp_in_place(x, t):
    z = (x - x.mean()) / x.std()
    with torch.no_grad():
        z.clamp_(-3, 3)
    return z / t


def clamps_through_data(x, t):
    z = (x - x.mean()) / x.std()
    z.data.clamp_(-3, 3)
    return z / t


def float_temperature(x, t):
    return ((x - x.mean()) / x.std()).clamp(-3, 3) / float(t)


def as_given(x, t):
    return broken_scaled_scores(x, t)


def mutates_x(x, t):
    x.sub_(x.mean().detach())  # PyTorch refuses this on a leaf that requires grad
    return (x / x.std()).clamp(-3, 3) / t


def mutates_x_under_no_grad(x, t):
    out = ((x - x.mean()) / x.std()).clamp(-3, 3) / t
    with torch.no_grad():
        x.zero_()  # "free" the input
    return out


def keeps_detach(x, t):
    return ((x - x.mean().detach()) / x.std()).clamp(-3, 3) / t


WRONG_SCALED = {  # answer, (kind, mistake)
    "unchanged broken function": (as_given, ("contract", "cut-x")),
    "mean still .item()": (keeps_item, ("value", "mean-cut")),
    "mean detached": (keeps_detach, ("value", "mean-cut")),
    "std still torch.tensor": (keeps_tensor_copy, ("value", "std-cut")),
    "clamp still under no_grad": (keeps_no_grad, ("contract", "cut-x")),
    "clamp hidden in place under no_grad": (hides_clamp_in_place, ("value", "clamp-hidden")),
    "clamp through .data": (clamps_through_data, ("value", "clamp-hidden")),
    "temperature as float": (float_temperature, ("contract", "cut-temperature")),
    "no clamp": (lambda x, t: ((x - x.mean()) / x.std()) / t, ("value", "no-clamp")),
    "biased std": (lambda x, t: ((x - x.mean()) / x.std(correction=0)).clamp(-3, 3) / t, ("value", "biased-std")),
    "times temperature": (lambda x, t: ((x - x.mean()) / x.std()).clamp(-3, 3) * t, ("value", "times-temperature")),
    "clamps x first": (
        lambda x, t: (lambda c: (c - c.mean()) / c.std())(x.clamp(-3, 3)) / t,
        ("value", "clamped-x"),
    ),
    "changes x in place": (mutates_x, ("raised", None)),
    "changes x in place under no_grad": (mutates_x_under_no_grad, ("changed-input", None)),
    "not implemented": (lambda x, t: (_ for _ in ()).throw(NotImplementedError()), ("not-implemented", None)),
    "the checker's reference": (lambda x, t: _scaled(x, t), ("off-limits", "autogradlab.checks.ch01._scaled")),
}


@pytest.mark.parametrize("name", CORRECT_SCALED)
def test_correct_scaled_scores_pass(name, capsys):
    check_scaled_scores(CORRECT_SCALED[name])
    assert capsys.readouterr().out.startswith("✓ scaled_scores")


@pytest.mark.filterwarnings("ignore:To copy construct from a tensor")
@pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad=True to a scalar")
@pytest.mark.parametrize("name", WRONG_SCALED)
def test_wrong_scaled_scores_rejected_with_hint(name):
    answer, (kind, mistake) = WRONG_SCALED[name]
    assert_named(rejected(check_scaled_scores, answer), kind, mistake)


@pytest.mark.filterwarnings("ignore:To copy construct from a tensor")
def test_broken_function_has_the_right_values_and_cuts_x_off():
    x = torch.tensor([0.0, 1.0, 2.0, 3.0, 20.0], dtype=torch.float64, requires_grad=True)
    t = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    out = broken_scaled_scores(x, t)
    assert torch.allclose(out, repaired(x, t))
    assert torch.autograd.grad(out.sum(), (x, t), allow_unused=True)[0] is None


# --- exercise 3: the reverse sweep --------------------------------------------------------------


def consumers(output):
    waiting, stack, seen = {}, [output.grad_fn], {output.grad_fn}
    while stack:
        for child, _ in stack.pop().next_functions:
            if child is None:
                continue
            waiting[child] = waiting.get(child, 0) + 1
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return waiting


def kahn_calling_accumulate_grad(output):
    waiting = consumers(output)
    slots = {output.grad_fn: [torch.ones_like(output)]}
    ready = [output.grad_fn]
    with torch.no_grad():
        while ready:
            node = ready.pop()
            grads = node(*slots.pop(node))
            grads = (grads,) if isinstance(grads, torch.Tensor) else grads
            for (child, nr), grad in zip(node.next_functions, grads):
                if child is None:
                    continue
                box = slots.setdefault(child, [None] * len(child._input_metadata))
                if grad is not None:
                    grad = grad.sum_to_size(child._input_metadata[nr].shape)
                    box[nr] = grad if box[nr] is None else box[nr] + grad
                waiting[child] -= 1
                if waiting[child] == 0:
                    ready.append(child)


def postorder_then_reverse(output):
    """Topological order from an iterative DFS post-order; leaves written by hand (a clone when new)."""
    order, seen, stack = [], set(), [(output.grad_fn, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if node in seen:
            continue
        seen.add(node)
        stack.append((node, True))
        stack.extend((child, False) for child, _ in node.next_functions if child is not None and child not in seen)
    grads = {(output.grad_fn, 0): torch.ones_like(output)}
    with torch.no_grad():
        for node in reversed(order):
            n_in = len(node._input_metadata)
            incoming = [grads.pop((node, i), None) for i in range(n_in)]
            if hasattr(node, "variable"):
                if incoming[0] is not None:
                    leaf = node.variable
                    leaf.grad = incoming[0].clone() if leaf.grad is None else leaf.grad + incoming[0]
                continue
            out = node(*incoming)
            out = (out,) if isinstance(out, torch.Tensor) else out
            for (child, nr), g in zip(node.next_functions, out):
                if child is not None and g is not None:
                    g = g.sum_to_size(child._input_metadata[nr].shape)
                    grads[(child, nr)] = grads[(child, nr)] + g if (child, nr) in grads else g


def engine_like_priority(output):
    """Dependency counts plus the engine's priority (latest sequence number first)."""
    import heapq

    waiting = consumers(output)
    slots = {output.grad_fn: [torch.ones_like(output)]}
    heap, tie = [(-output.grad_fn._sequence_nr(), 0, output.grad_fn)], 1
    with torch.no_grad():
        while heap:
            *_, node = heapq.heappop(heap)
            grads = node(*slots.pop(node))
            grads = (grads,) if isinstance(grads, torch.Tensor) else grads
            for (child, nr), grad in zip(node.next_functions, grads):
                if child is None:
                    continue
                box = slots.setdefault(child, [None] * len(child._input_metadata))
                if grad is not None:
                    grad = grad.sum_to_size(child._input_metadata[nr].shape)
                    box[nr] = grad if box[nr] is None else box[nr] + grad
                waiting[child] -= 1
                if waiting[child] == 0:
                    heapq.heappush(heap, (-child._sequence_nr(), tie, child))
                    tie += 1


CORRECT_SWEEPS = {
    "Kahn, calling AccumulateGrad": kahn_calling_accumulate_grad,
    "reversed DFS post-order, leaves by hand": postorder_then_reverse,
    "engine-like priority queue": engine_like_priority,
}


def _make(variant):
    """The Kahn sweep with one plausible slip switched on."""

    def sweep(output):
        waiting = consumers(output)
        slots = {output.grad_fn: [torch.ones_like(output)]}
        ready, queued = [output.grad_fn], {output.grad_fn}
        grad_mode = torch.enable_grad() if variant == "grad mode on" else torch.no_grad()
        with grad_mode:
            while ready:
                node = ready.pop(0) if variant == "bfs, no waiting" else ready.pop()
                box = slots.pop(node)
                if hasattr(node, "variable") and variant in ("overwrite leaf", "store as is"):
                    if box[0] is not None:
                        node.variable.grad = box[0] if variant == "store as is" else box[0].clone()
                    continue
                grads = node(*box)
                grads = (grads,) if isinstance(grads, torch.Tensor) else grads
                for (child, nr), grad in zip(node.next_functions, grads):
                    if child is None and variant != "no None check":
                        continue
                    if variant == "no None check":
                        _ = len(child._input_metadata)  # AttributeError on None
                    box = slots.setdefault(child, [None] * len(child._input_metadata))
                    if grad is not None:
                        if variant != "no sum_to_size":
                            grad = grad.sum_to_size(child._input_metadata[nr].shape)
                        summed = variant != "no sum at shared node" and box[nr] is not None
                        box[nr] = box[nr] + grad if summed else grad
                    waiting[child] -= 1
                    if variant == "bfs, no waiting":
                        if child not in queued:
                            queued.add(child)
                            ready.append(child)
                    elif waiting[child] == 0:
                        ready.append(child)

    return sweep


def once_per_edge(output):
    """Push each gradient down every path separately: right by linearity, but nodes run many times."""
    with torch.no_grad():
        stack = [(output.grad_fn, (torch.ones_like(output),))]
        while stack:
            node, grads = stack.pop()
            out = node(*grads)
            out = (out,) if isinstance(out, torch.Tensor) else out
            for (child, nr), g in zip(node.next_functions, out):
                if child is None or g is None:
                    continue
                slots = [None] * len(child._input_metadata)
                slots[nr] = g.sum_to_size(child._input_metadata[nr].shape)
                stack.append((child, tuple(slots)))


def dfs_first_reach(output):
    """Depth-first, each node run when first popped with whatever gradient it has (no topological order)."""
    slots = {output.grad_fn: [torch.ones_like(output)]}
    stack, done = [output.grad_fn], set()
    with torch.no_grad():
        while stack:
            node = stack.pop()
            if node in done:
                continue
            done.add(node)
            out = node(*slots.pop(node))
            out = (out,) if isinstance(out, torch.Tensor) else out
            for (child, nr), g in zip(node.next_functions, out):
                if child is None or g is None:
                    continue
                box = slots.setdefault(child, [None] * len(child._input_metadata))
                g = g.sum_to_size(child._input_metadata[nr].shape)
                box[nr] = g if box[nr] is None else box[nr] + g
                stack.append(child)


def recursive_topo(output):
    order, seen = [], set()

    def visit(node):
        seen.add(node)
        for child, _ in node.next_functions:
            if child is not None and child not in seen:
                visit(child)
        order.append(node)

    visit(output.grad_fn)
    slots = {output.grad_fn: [torch.ones_like(output)]}
    with torch.no_grad():
        for node in reversed(order):
            out = node(*slots.pop(node))
            out = (out,) if isinstance(out, torch.Tensor) else out
            for (child, nr), g in zip(node.next_functions, out):
                if child is not None and g is not None:
                    box = slots.setdefault(child, [None] * len(child._input_metadata))
                    g = g.sum_to_size(child._input_metadata[nr].shape)
                    box[nr] = g if box[nr] is None else box[nr] + g


def slots_from_edges_seen(output):
    """Sizes each node's gradient list by the edges it saw: breaks on an output nobody used."""
    waiting = consumers(output)
    slots = {output.grad_fn: {0: torch.ones_like(output)}}
    ready = [output.grad_fn]
    with torch.no_grad():
        while ready:
            node = ready.pop()
            box = slots.pop(node)
            out = node(*[box.get(i) for i in range(max(box) + 1)] if box else [None])
            out = (out,) if isinstance(out, torch.Tensor) else out
            for (child, nr), g in zip(node.next_functions, out):
                if child is None:
                    continue
                b = slots.setdefault(child, {})
                if g is not None:
                    g = g.sum_to_size(child._input_metadata[nr].shape)
                    b[nr] = b[nr] + g if nr in b else g
                waiting[child] -= 1
                if waiting[child] == 0:
                    ready.append(child)


def steps_the_leaves(output):
    """A right sweep that then also 'helps' with an SGD step on every leaf."""
    kahn_calling_accumulate_grad(output)
    stack, seen = [output.grad_fn], set()
    with torch.no_grad():
        while stack:
            node = stack.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            if hasattr(node, "variable"):
                node.variable.sub_(0.1 * node.variable.grad)
            stack.extend(child for child, _ in node.next_functions)


def calls_backward(output):
    output.backward()


def calls_grad_bound_earlier(output, _grad=torch.autograd.grad):
    leaves, stack, seen = [], [output.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if hasattr(node, "variable"):
            leaves.append(node.variable)
        stack.extend(child for child, _ in node.next_functions)
    for leaf, g in zip(leaves, _grad(output, leaves)):
        leaf.grad = g if leaf.grad is None else leaf.grad + g


def calls_engine_directly(output):
    from torch.autograd.variable import Variable

    Variable._execution_engine.run_backward((output,), (torch.ones_like(output),), False, False, (), False)


WRONG_SWEEPS = {  # answer, (kind, mistake)
    "BFS, no waiting for all gradients": (_make("bfs, no waiting"), ("value", "order")),
    "DFS, run when first reached": (dfs_first_reach, ("value", "order")),
    "no sum at a shared node": (_make("no sum at shared node"), ("value", "not-summed")),
    "overwrites the leaf's .grad": (_make("overwrite leaf"), ("value", "overwrote-grad")),
    "crashes on None next_functions": (_make("no None check"), ("raised", "none_value")),
    "runs a node once per edge": (once_per_edge, ("contract", "node-ran-twice")),
    "grad mode on: gradients carry a graph": (_make("grad mode on"), ("contract", "grad-has-graph")),
    "stores a node's result as .grad": (_make("store as is"), ("contract", "expanded-grad")),
    "recursive topological sort": (recursive_topo, ("raised", "recursion")),
    "gradient slots sized by the edges seen": (slots_from_edges_seen, ("raised", "node_arity")),
    "no sum_to_size for a broadcast bias": (_make("no sum_to_size"), ("raised", "grad_shape")),
    "calls backward()": (calls_backward, ("off-limits", "`backward()`")),
    "autograd.grad bound before the check": (calls_grad_bound_earlier, ("off-limits", "the autograd engine")),
    "the engine called directly": (calls_engine_directly, ("off-limits", "the autograd engine")),
    "not implemented": (lambda out: (_ for _ in ()).throw(NotImplementedError()), ("not-implemented", None)),
    "the checker's reference sweep": (lambda out: _sweep(out), ("off-limits", "autogradlab.checks.ch01._sweep")),
    "record_backward from the course package": (lambda out: record_backward(out), ("off-limits", "`backward()`")),
    "steps the parameters too": (steps_the_leaves, ("changed-input", None)),
}


def test_the_checkers_own_sweep_is_right_outside_a_learner_call():
    torch.manual_seed(4)
    net = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    x = torch.randn(6, 3)
    _sweep(net(x).pow(2).sum())
    mine = [p.grad.clone() for p in net.parameters()]
    net.zero_grad(set_to_none=True)
    net(x).pow(2).sum().backward()
    assert all(torch.allclose(a, p.grad, atol=1e-6) for a, p in zip(mine, net.parameters()))


@pytest.mark.parametrize("name", CORRECT_SWEEPS)
def test_correct_sweeps_pass(name, capsys):
    check_reverse_sweep(CORRECT_SWEEPS[name])
    assert capsys.readouterr().out.startswith("✓ reverse_sweep")


@pytest.mark.parametrize("name", WRONG_SWEEPS)
def test_wrong_sweeps_rejected_with_hint(name):
    answer, (kind, mistake) = WRONG_SWEEPS[name]
    assert_named(rejected(check_reverse_sweep, answer), kind, mistake)


def test_the_engine_is_back_after_the_check():
    grad = torch.autograd.grad
    rejected(check_reverse_sweep, calls_grad_bound_earlier)
    x = torch.ones(2, requires_grad=True)
    (g,) = torch.autograd.grad((x * 3).sum(), x)
    assert g.tolist() == [3.0, 3.0] and torch.autograd.grad is grad


def test_the_sweep_really_matches_the_engine_on_a_wider_model():
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.LayerNorm(7), torch.nn.GELU(), torch.nn.Linear(7, 2))
    x = torch.randn(4, 5)
    kahn_calling_accumulate_grad(net(x).log_softmax(-1).sum())
    mine = [p.grad.clone() for p in net.parameters()]
    net.zero_grad(set_to_none=True)
    net(x).log_softmax(-1).sum().backward()
    assert all(torch.allclose(a, p.grad, atol=1e-6) for a, p in zip(mine, net.parameters()))


@pytest.mark.parametrize("function", [branchy_forward, routed_forward, broken_scaled_scores])
def test_the_page_shows_the_real_function(function):
    """The code block the learner reads is the function the page and the checker run (body and argument names)."""
    import ast
    import inspect
    from pathlib import Path

    import nbformat

    def defined(source: str):
        (fn,) = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == function.__name__]
        body = (
            fn.body[1:] if isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant) else fn.body
        )
        return [a.arg for a in fn.args.args], [ast.dump(statement) for statement in body]

    nb = nbformat.read(Path(__file__).resolve().parent.parent / "solutions" / "01_dynamic_graph.ipynb", as_version=4)
    blocks = [
        block.split("```", 1)[0]
        for cell in nb.cells
        if cell.cell_type == "markdown"
        for block in cell.source.split("```python\n")[1:]
        if f"def {function.__name__}(" in block
    ]
    assert len(blocks) == 1 and defined(blocks[0]) == defined(inspect.getsource(function))


def test_a_wrong_set_is_explained_in_chinese(monkeypatch):
    monkeypatch.setenv("AUTOGRADLAB_LANG", "zh")
    error = rejected(check_params_that_get_grad, lambda x, params: {"a", "b", "c", "d"})
    assert_named(error, "value", "detached")
    assert "backward 之后有梯度的参数是" in str(error) and "提示：d 只以 d.detach() 的形式被使用" in str(error)
