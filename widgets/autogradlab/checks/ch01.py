"""Checkers for chapter 01 (the dynamic computation graph).

1. :func:`check_params_that_get_grad`: which parameters does a forward pass that branches and loops
   on its own values reach? Against a real backward; the answer runs with no graph possible.
2. :func:`check_scaled_scores`: repair a function whose graph is cut in three disguised places.
3. :func:`check_reverse_sweep`: run backward by hand on PyTorch's own graph, engine switched off.

The checker's own answers (:func:`_scaled`, :func:`_sweep`) are off limits to the learner's code.
"""

from __future__ import annotations

import torch

from autogradlab import torch_internals as internals
from autogradlab.checks.core import (
    Case,
    ExerciseError,
    LearnerCall,
    OffLimits,
    close,
    compare,
    mistakes,
    named,
    passed,
    seeded,
)
from autogradlab.checks.node_runs import NodeRuns
from autogradlab.i18n import N_, _
from autogradlab.models.dynamic_graph import routed_forward

_OWN_ANSWERS = ("autogradlab.checks.ch01",)

# --- Exercise 1: which parameters get a gradient? -------------------------------------------


def _routed_cases() -> list[Case]:
    gen = seeded(11)
    a = torch.randn(3, 4, generator=gen, dtype=torch.float64).abs()
    params = {"a": a, **{n: torch.randn(4, generator=gen, dtype=torch.float64) for n in "bcd"}}
    xs = {
        _("x of shape (5, 3), entries in [0, 0.9)"): torch.rand(5, 3, generator=gen, dtype=torch.float64) * 0.9,
        _("x of shape (4, 3), entries in (-3, -0.5]"): -(torch.rand(4, 3, generator=gen, dtype=torch.float64) * 2.5 + 0.5),
        _("x of shape (2, 3), entries in [0, 0.05)"): torch.rand(2, 3, generator=gen, dtype=torch.float64) * 0.05,
        _("x of shape (6, 3), normal with std 1.5"): torch.randn(6, 3, generator=gen, dtype=torch.float64) * 1.5,
        _("x = [[1.0, -3.0, 0.5]]"): torch.tensor([[1.0, -3.0, 0.5]], dtype=torch.float64),
    }  # fmt: skip
    return [Case((x, {n: p.clone().requires_grad_(True) for n, p in params.items()}), label) for label, x in xs.items()]


def _with_grad(x, params) -> set[str]:
    params = {n: p.detach().clone().requires_grad_(True) for n, p in params.items()}
    routed_forward(x, params).backward()
    return {n for n, p in params.items() if p.grad is not None}


# The slip a wrong name reveals, tried in this order: the first explains the most.
_PARAM_SLIPS = {"d": "detached", "a": "zero-is-not-none", "b": "branch", "c": "loop"}
_PARAM_HINTS = {
    "detached": N_("d is used only as d.detach(): detach returns a tensor outside the graph, so no gradient reaches d."),
    "zero-is-not-none": N_("a is always used: relu(x @ a) is recorded whatever its values. Where relu outputs zeros, a.grad is a tensor of zeros, not None: the graph follows the operations that ran, not the values."),
    "branch": N_("the `if` depends on this x: compute relu(x @ a).sum() yourself and compare it with 1."),
    "loop": N_("the loop runs int(x.abs().max()) times for this x, and not at all when every |x| < 1."),
}  # fmt: skip


def check_params_that_get_grad(params_that_get_grad) -> None:
    """Check ``params_that_get_grad(x, params)`` -> the set of names whose ``.grad`` a backward of
    :func:`~autogradlab.models.dynamic_graph.routed_forward` leaves not None, on five inputs.

    >>> try:
    ...     check_params_that_get_grad(lambda x, params: routed_forward(x, params).backward() or set(params))
    ... except ExerciseError as error:
    ...     print(f"{error.kind}: {error.hint}")
    off-limits: reason about the code: which lines run for this x? The check runs your function with no graph possible.
    """
    why = _("reason about the code: which lines run for this x? The check runs your function with no graph possible.")
    learner = LearnerCall(
        params_that_get_grad, "params_that_get_grad", OffLimits(autograd=True, no_graph=True, why=why)
    )
    for case in _routed_cases():
        got = learner.on(case.label)(*case.args)
        if not isinstance(got, (set, frozenset)) or not got <= set(_PARAM_SLIPS):
            hint = _(
                "return a set of names among 'a', 'b', 'c', 'd', such as {'a', 'b'}: a set has no order and no repeats."
            )
            raise ExerciseError("type", _("`params_that_get_grad` returned {got!r} for {label}.").format(got=got, label=case.label), hint=hint)  # fmt: skip
        truth = _with_grad(*case.args)
        if got != truth:
            summary = _("Wrong for {label}: you said {got}; after backward the parameters with a gradient are {truth}.").format(label=case.label, got=sorted(got), truth=sorted(truth))  # fmt: skip
            raise named(next(_PARAM_SLIPS[n] for n in _PARAM_SLIPS if n in got ^ truth), summary, _PARAM_HINTS, "value")
    passed(_("params_that_get_grad is right on 5 inputs"))


# --- Exercise 2: repair a function whose graph is cut -----------------------------------------


def _scaled(x, t, *, mean=True, std=True, clamp="graph"):
    """The repaired function, or a version that keeps one of the cuts (for the hints)."""
    m = x.mean() if mean else x.mean().detach()
    s = x.std() if std else x.std().detach()
    z = (x - m) / s.clamp_min(1e-6)
    if clamp == "graph":
        z = z.clamp(-3.0, 3.0)
    elif clamp == "hidden":  # clamped in place under no_grad: autograd never sees the clamp
        with torch.no_grad():
            z.clamp_(-3.0, 3.0)
    return z / t.to(x.dtype)


_SCALED_GRADIENT_HINTS = {
    "mean-cut": N_("the mean still leaves the graph (`.item()`, `.detach()` or `float()` make it a constant): the gradient that flows through the mean is missing. Keep `x.mean()` a tensor in the graph."),
    "std-cut": N_("the std is still a constant (rebuilt with `torch.tensor(...)`, or detached): the gradient through the std is missing. Use `x.std()` itself (`.to(dtype)` converts and keeps the graph)."),
    "mean-and-std-cut": N_("both the mean and the std are still constants (`.item()`, `torch.tensor(...)`): only the direct path x -> output is in the graph."),
    "clamp-hidden": N_("the clamp changes the values but autograd never saw it (an in-place clamp under `no_grad` or on `.data`): scores capped at ±3 must get zero gradient. Clamp outside `no_grad`, out of place."),
}  # fmt: skip
_SCALED_GRADIENT_SLIPS = {
    "mean-cut": lambda x, t: _scaled(x, t, mean=False),
    "std-cut": lambda x, t: _scaled(x, t, std=False),
    "mean-and-std-cut": lambda x, t: _scaled(x, t, mean=False, std=False),
    "clamp-hidden": lambda x, t: _scaled(x, t, clamp="hidden"),
}
SCALED_GRADIENT_MISTAKES = mistakes(_SCALED_GRADIENT_HINTS, _SCALED_GRADIENT_SLIPS)

_SCALED_VALUE_HINTS = {
    "no-clamp": N_("the scores are not capped at ±3 (the clamp is missing)."),
    "biased-std": N_("x.std() divides by N - 1 (the default); you divided by N (correction=0)."),
    "times-temperature": N_("divide by the temperature, not multiply."),
    "clamped-x": N_("clamp the standardised scores, not x itself."),
}
_SCALED_VALUE_SLIPS = {
    "no-clamp": lambda x, t: _scaled(x, t, clamp="none"),
    "biased-std": lambda x, t: ((x - x.mean()) / x.std(correction=0)).clamp(-3.0, 3.0) / t,
    "times-temperature": lambda x, t: _scaled(x, t) * t * t,
    "clamped-x": lambda x, t: (lambda c: (c - c.mean()) / c.std())(x.clamp(-3.0, 3.0)) / t,
}
SCALED_VALUE_MISTAKES = mistakes(_SCALED_VALUE_HINTS, _SCALED_VALUE_SLIPS)


def _scaled_cases() -> list[Case]:
    gen, cases = seeded(21), []
    for shape, dtype, outliers, t, label in [  # outliers: (flat index, value)
        ((20,), torch.float64, [(3, 9.0)], 0.7, N_("x of shape (20,) with one outlier (its score is above 3)")),
        ((4, 6), torch.float64, [(5, -8.0), (17, 7.5)], 1.3, N_("x of shape (4, 6) with two outliers")),
        ((3, 5), torch.float64, [], 2.0, N_("x of shape (3, 5) with no score beyond ±3")),
        ((2, 3, 4), torch.float32, [(0, 10.0)], 0.5, N_("x of shape (2, 3, 4) in float32 with one outlier")),
    ]:
        x = torch.randn(shape, generator=gen, dtype=dtype)
        for i, value in outliers:
            x.view(-1)[i] = value
        cases.append(Case((x, torch.tensor(t, dtype=dtype)), _("{label}, temperature {t}").format(label=_(label), t=t)))
    return cases


def _grads(fn, x, t, weights):
    x, t = (v.detach().clone().requires_grad_(True) for v in (x, t))
    return torch.autograd.grad((fn(x, t) * weights).sum(), (x, t), allow_unused=True)


_CUT_HINTS = {
    "cut-x": N_("something between x and the output leaves the graph: here the clamp under `no_grad` returns a tensor with no history."),
    "cut-temperature": N_("the temperature was turned into a constant (`float()`, `.item()`, `torch.tensor(...)`)."),
}  # fmt: skip


def check_scaled_scores(scaled_scores) -> None:
    """Check ``scaled_scores(x, temperature)``: the values of ``broken_scaled_scores``, gradients through every path.

    ``broken_scaled_scores`` itself is rejected at the first cut it meets, with a hint naming that cut.
    """
    learner = LearnerCall(scaled_scores, "scaled_scores", OffLimits(course=_OWN_ANSWERS, why=_("write it yourself.")))
    for i, case in enumerate(_scaled_cases()):
        x, t = case.args
        lx, lt = x.clone().requires_grad_(True), t.clone().requires_grad_(True)
        got = learner.on(case.label)(lx, lt)
        wrong = {m: m.compute(x, t) for m in SCALED_VALUE_MISTAKES}
        compare(got, _scaled(x, t), what=_("The value of `scaled_scores`"), label=case.label, mistakes=wrong)
        if got.grad_fn is None:
            summary = _("`scaled_scores` returned a tensor with no grad_fn for {label}: the graph was cut after the last operation, so no gradient reaches x or the temperature.").format(label=case.label)  # fmt: skip
            raise ExerciseError("contract", summary, mistake="no-graph")
        weights = torch.randn(x.shape, generator=seeded(200 + i), dtype=x.dtype)
        got_grads = torch.autograd.grad((got * weights).sum(), (lx, lt), allow_unused=True)
        right = _grads(_scaled, x, t, weights)
        wrong = {m: _grads(m.compute, x, t, weights) for m in SCALED_GRADIENT_MISTAKES}
        for k, (name, shown) in enumerate((("x", "x"), ("temperature", _("the temperature")))):
            if got_grads[k] is None:
                summary = _("No gradient reaches {name} through `scaled_scores` for {label}.").format(name=shown, label=case.label)  # fmt: skip
                raise named(f"cut-{name}", summary, _CUT_HINTS)
            compare(
                got_grads[k].reshape(right[k].shape),
                right[k],
                what=_("The gradient that reaches {name}").format(name=shown),
                label=_("{label} (gradient of sum(weights * scaled_scores(x, t)))").format(label=case.label),
                mistakes={m: g[k] for m, g in wrong.items()},
            )
    passed(_("scaled_scores keeps the graph: values and gradients for x and temperature match autograd on 4 inputs"))


# --- Exercise 3: run the reverse sweep yourself ---------------------------------------------


def _leaf(shape, seed):
    return torch.randn(*shape, generator=seeded(seed), dtype=torch.float64, requires_grad=True)


def _sweep_graphs() -> list[tuple[str, object]]:
    """(label, build) pairs; ``build()`` returns (scalar output, {name: leaf}) for a fresh, identical graph."""

    def diamond():
        x = _leaf((3,), 3)
        h = x.exp()
        return (h.sin() + h.cos() * h).sum(), {"x": x}

    def data_and_two_paths():
        w, data = _leaf((3, 2), 4), torch.randn(5, 3, generator=seeded(40), dtype=torch.float64)
        return (data @ w).relu().mean() + 0.1 * (w**2).sum(), {"w": w, "data": data}

    def two_leaves_one_add():
        a, b = _leaf((4,), 5), _leaf((4,), 50)
        return (a + b).sum(), {"a": a, "b": b}

    def unbind():
        x = _leaf((3, 2), 6)
        u, v, _ = x.exp().unbind(0)
        return (u * v.sin()).sum(), {"x": x}

    def mlp_with_old_grads():
        torch.manual_seed(7)
        net = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1)).double()
        for p in net.parameters():
            p.grad = torch.full_like(p, 0.5)
        batch = torch.randn(6, 4, generator=seeded(8), dtype=torch.float64)
        return net(batch).pow(2).mean(), dict(net.named_parameters())

    def deep():
        x = h = _leaf((2,), 9)
        for _step in range(3000):
            h = h * 1.0001
        return h.sum(), {"x": x}

    return [
        ("x.exp().sin().sum()", lambda: (lambda x: (x.exp().sin().sum(), {"x": x}))(_leaf((4,), 1))),
        ("(w * w).sum()  (one leaf used twice by one node)", lambda: (lambda w: ((w * w).sum(), {"w": w}))(_leaf((3,), 2))),
        ("h = x.exp(); (h.sin() + h.cos() * h).sum()  (h feeds three nodes, along paths of different length)", diamond),
        ("(data @ w).relu().mean() + 0.1 * (w ** 2).sum()  (data needs no grad; w is reached along two paths)", data_and_two_paths),
        ("(a + b).sum()  (two leaves fed by one node)", two_leaves_one_add),
        ("u, v, _ = x.exp().unbind(0); (u * v.sin()).sum()  (one node with three outputs, one unused)", unbind),
        ("a Linear-Tanh-Linear MLP whose parameters already hold .grad = 0.5 from an earlier step", mlp_with_old_grads),
        ("a chain of 3,000 multiplications", deep),
    ]  # fmt: skip


def _ready_order(output: torch.Tensor, order: str) -> list:
    """The nodes in the order a sweep runs them.

    ``"topological"``: each node once all its consumers ran (Kahn's algorithm). Two typical
    mistakes, for the hints: ``"bfs"`` (breadth-first, run when first queued) and ``"dfs"``
    (depth-first, run when first popped), neither of which waits for all gradients.
    """
    if order == "dfs":
        ran, done, stack = [], set(), [output.grad_fn]
        while stack:
            node = stack.pop()
            if node not in done:
                done.add(node)
                ran.append(node)
                stack.extend(child for child, _nr in node.next_functions if child is not None)
        return ran
    pending: dict = {}
    seen, stack = {output.grad_fn}, [output.grad_fn]
    while stack:
        for child, _nr in stack.pop().next_functions:
            if child is not None:
                pending[child] = pending.get(child, 0) + 1
                if child not in seen:
                    seen.add(child)
                    stack.append(child)
    ran, ready, queued = [], [output.grad_fn], {output.grad_fn}
    while ready:
        node = ready.pop(0)
        ran.append(node)
        for child, _nr in node.next_functions:
            if child is None:
                continue
            pending[child] -= 1
            if pending[child] == 0 if order == "topological" else child not in queued:
                queued.add(child)
                ready.append(child)
    return ran


def _sweep(output: torch.Tensor, *, order="topological", sum_=True, accumulate=True) -> None:
    """A reverse sweep; the keyword arguments switch on typical mistakes (used for the hints)."""
    grads = {output.grad_fn: [torch.ones_like(output)]}
    with torch.no_grad():
        for node in _ready_order(output, order):
            slots = grads.pop(node, None) or [None] * len(internals.input_metadata(node))
            if hasattr(node, "variable"):
                leaf, g = node.variable, slots[0]
                if g is not None:
                    leaf.grad = g.clone() if leaf.grad is None or not accumulate else leaf.grad + g
                continue
            results = node(*slots)
            results = (results,) if isinstance(results, torch.Tensor) else results
            for (child, nr), g in zip(node.next_functions, results):
                if child is None or g is None:
                    continue
                g = g.sum_to_size(internals.input_metadata(child)[nr].shape)  # undo a broadcast, as the engine does
                box = grads.setdefault(child, [None] * len(internals.input_metadata(child)))
                box[nr] = g if box[nr] is None or not sum_ else box[nr] + g


_SWEEP_HINTS = {  # mistake id: hint, for what a sweep leaves behind (None: no known slip matched)
    "order": N_("a node ran before all of its gradient had arrived: a node must wait until every node that feeds it (every consumer of its forward output) has run. Count each node's consumers first and run it when the count reaches zero (a topological order); a plain DFS or BFS over next_functions is not enough."),
    "not-summed": N_("a node that receives gradients along several edges kept only one of them: sum every gradient that arrives for the same (node, input_nr) before calling the node."),
    "overwrote-grad": N_("a leaf's new gradient replaced its .grad: backward() adds to whatever .grad already holds (here 0.5 from an earlier step). Accumulate: leaf.grad = leaf.grad + g when it is not None, or call the AccumulateGrad node itself, which does that."),
    "changed-leaf": N_("backward() only writes .grad; the leaves themselves (parameters, inputs) stay as they are."),
    "node-ran-twice": N_("do not call a node once per edge that reaches it; collect (sum) all its gradients first, then call it once."),
    "grad-has-graph": N_("calling a node with grad mode on records the backward computation, as backward(create_graph=True) would. backward() does not: run the sweep under torch.no_grad()."),
    "expanded-grad": N_("backward() gives each leaf a proper tensor of its own: call the AccumulateGrad node, or store a clone."),
    "shared-grad": N_("an in-place change to one .grad would change the other; call the AccumulateGrad node, or store a clone."),
    "grad-missing": N_("every leaf that requires grad is reached through an AccumulateGrad node: its `.variable` is the leaf; add the arriving gradient into `.grad` (or call the AccumulateGrad node)."),
    None: N_("check that a node runs only after every node that feeds it has run, and that gradients arriving for the same (node, input_nr) are summed. Print each node and what arrives, next to backward()."),
}  # fmt: skip
# The slips a wrong .grad is compared with, as options of _sweep: (mistake id, options).
SWEEP_MISTAKES = (
    ("order", {"order": "bfs"}),
    ("order", {"order": "dfs"}),
    ("not-summed", {"sum_": False}),
    ("overwrote-grad", {"accumulate": False}),
)

_SWEEP_ERROR_HINTS = {  # kinds of autogradlab.tracebacks.ERROR_KINDS, tried in this order
    "none_value": N_("next_functions holds (None, 0) for an input that needs no gradient (like `data`), and a node returns None for it: skip those entries."),
    "recursion": N_("a recursive walk fails on deep graphs (real models have thousands of nodes): use a loop with an explicit stack or queue."),
    "node_arity": N_("a node takes one gradient per output of its forward op, in output order (`len(node._input_metadata)` of them; `input_nr` in next_functions says which output an edge comes from). Pass None for an output that received no gradient."),
    "grad_shape": N_("a node can return a gradient in the broadcast shape of its forward input (nn.Linear's bias is added to every row). The engine sums it down to the shape the next node expects, `child._input_metadata[input_nr].shape`: do the same with `g.sum_to_size(shape)`."),
    "not_iterable": N_("a node with one input returns a single tensor, one with several returns a tuple (AccumulateGrad returns ()): normalise before zipping with next_functions."),
}  # fmt: skip
_ENGINE_OFF = OffLimits(
    autograd=True,
    course=_OWN_ANSWERS,
    why=N_("this exercise rebuilds what backward() does, so the engine is switched off here: call each node yourself, `node(*grads)`, in a valid order."),
)  # fmt: skip


def _grads_after(build, sweep) -> dict:
    output, leaves = build()
    sweep(output)
    return {name: (None if t.grad is None else t.grad.detach().clone()) for name, t in leaves.items()}


def _same_grads(leaves: dict, reference: dict) -> list[str]:
    """The names whose ``.grad`` differs from ``reference`` (None where it is None, else the same values)."""
    return [name for name, leaf in leaves.items() if not close(leaf.grad, reference[name])]


def check_reverse_sweep(reverse_sweep) -> None:
    """Check ``reverse_sweep(output)``: what ``output.backward()`` leaves in ``.grad``, with the engine switched off.

    Every node must run once (counted by saved-tensor hooks), the leaves' ``.grad`` must match a
    real ``backward()`` on the same graph (including ``.grad`` that was there before), carry no
    graph of their own, and not share memory with each other.

    >>> try:
    ...     check_reverse_sweep(lambda output: output.backward())
    ... except ExerciseError as error:
    ...     print(error.kind, error.mistake)
    off-limits `backward()`
    """
    learner = LearnerCall(reverse_sweep, "reverse_sweep", _ENGINE_OFF, _SWEEP_ERROR_HINTS)
    graphs = _sweep_graphs()
    for label, build in graphs:
        reference = _grads_after(build, lambda out: out.backward())
        runs = NodeRuns()
        with runs.recording():
            output, leaves = build()
        values = {name: leaf.detach().clone() for name, leaf in leaves.items()}
        learner.on(label)(output)
        _check_sweep(label, build, leaves, values, runs.most, reference)
    passed(_("reverse_sweep matches backward() on {n} graphs: each node ran once, every leaf's .grad is right").format(n=len(graphs)))  # fmt: skip


def _check_sweep(label, build, leaves, values, most_runs, reference) -> None:
    """What a sweep must leave behind: the leaves unchanged, each node run once, the right ``.grad``, no graph, no sharing."""
    if any(not torch.equal(leaf.detach(), values[name]) for name, leaf in leaves.items()):
        summary = _("Your sweep changed the values of a leaf on {label}.").format(label=label)
        raise named("changed-leaf", summary, _SWEEP_HINTS, "changed-input")
    if most_runs > 1:
        summary = _("A node ran {most_runs} times in your sweep on {label} (a tensor it saved was read {most_runs} times; backward() runs every node exactly once).").format(most_runs=most_runs, label=label)  # fmt: skip
        raise named("node-ran-twice", summary, _SWEEP_HINTS)
    wrong = _same_grads(leaves, reference)
    if wrong:
        raise _wrong_grads(label, build, leaves, reference, wrong[0])
    owners: dict[int, str] = {}
    for name, g in ((name, leaf.grad) for name, leaf in leaves.items() if leaf.grad is not None):
        ptr = g.untyped_storage().data_ptr()
        if g.requires_grad:
            summary = _("{name}.grad carries a graph of its own (grad_fn={node}) after your sweep on {label}.").format(name=name, node=g.grad_fn and g.grad_fn.name(), label=label)  # fmt: skip
            raise named("grad-has-graph", summary, _SWEEP_HINTS)
        if any(stride == 0 and size > 1 for stride, size in zip(g.stride(), g.shape)):
            summary = _("{name}.grad after your sweep on {label} is an expanded view (strides {stride}): many elements share one memory location, so in-place updates such as clip_grad_norm_ fail on it.").format(name=name, label=label, stride=g.stride())  # fmt: skip
            raise named("expanded-grad", summary, _SWEEP_HINTS)
        if ptr in owners:
            summary = _("{owners}.grad and {name}.grad are the same memory after your sweep on {label}: a node (AddBackward0 here) can return one tensor for several inputs, and you stored it twice.").format(owners=owners[ptr], name=name, label=label)  # fmt: skip
            raise named("shared-grad", summary, _SWEEP_HINTS)
        owners[ptr] = name


def _wrong_grads(label, build, leaves, reference, name) -> ExerciseError:
    got, right = leaves[name].grad, reference[name]
    head = _("After your sweep on {label}, {name}.grad is wrong").format(label=label, name=name)
    if right is None:
        summary = _("{head}: backward() leaves it None (it needs no gradient), you set it.").format(head=head)
        return ExerciseError("value", summary, mistake="grad-set")
    if got is None:
        return named("grad-missing", _("{head}: it is None, but backward() gives it a gradient.").format(head=head), _SWEEP_HINTS, "value")  # fmt: skip
    measured = {"max_abs_error": float((got.double() - right.double()).abs().max())}
    head += _(" (max |error| {error:.3g}).").format(error=measured["max_abs_error"])
    rerun = lambda options: _grads_after(build, lambda out: _sweep(out, **options))
    mistake = next((m for m, options in SWEEP_MISTAKES if not _same_grads(leaves, rerun(options))), None)
    return ExerciseError("value", head, hint=_SWEEP_HINTS[mistake], mistake=mistake, measured=measured)
