"""Checkers for chapter 01 (the dynamic computation graph).

1. ``check_params_that_get_grad``: predict, without running it, which parameters a
   control-flow-dependent forward pass reaches (checked against a real backward for
   every branch; the answer runs with autograd switched off).
2. ``check_scaled_scores``: repair a function whose graph is cut in three disguised
   places (values and gradients for both inputs against autograd; each remaining cut named).
3. ``check_reverse_sweep``: run backward by hand on PyTorch's own graph, calling each
   node once in a valid order and accumulating into the leaves, with the engine
   (``backward``, ``autograd.grad``) out of reach.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from autogradlab import torch_internals as internals
from autogradlab.checks.core import Case, ExerciseError, call_learner, compare, passed, seeded
from autogradlab.tracebacks import hint_for, is_kind

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


_SETTINGS = [(mode, steps) for mode in ("gate", "plain") for steps in (0, 1, 2, 5)]


def _hint(name: str, extra: bool, mode: str, steps: int) -> str:
    if name == "d":
        return "d is used only as d.detach(): detach returns a tensor outside the graph, so no gradient reaches d."
    if name == "b":
        if extra:
            return (
                f"with mode={mode!r} the `if mode == 'gate'` branch does not run, so no op that uses b is "
                "recorded: the graph is built by the code that actually ran, and b.grad stays None."
            )
        return "with mode='gate' the branch runs: b is multiplied in, so it is in the graph and gets a gradient."
    if name == "c":
        if extra:
            return "with steps=0 the for loop body never runs: no op with c is recorded, so c gets no gradient."
        return f"with steps={steps} the loop runs and adds c each time: c is in the graph."
    return "a is always used (h = x * a) and requires grad: it always gets a gradient."


def check_params_that_get_grad(params_that_get_grad) -> None:
    """Check ``params_that_get_grad(mode, steps)`` -> set of names, for every mode and step count.

    The answer runs with autograd out of reach: the exercise asks for reasoning about
    the code, not for running it and reading ``.grad``.

    >>> def answer(mode, steps):
    ...     return {"a"} | ({"b"} if mode == "gate" else set()) | ({"c"} if steps > 0 else set())
    >>> check_params_that_get_grad(answer)
    ✓ params_that_get_grad is right for all 8 settings of mode and steps
    """
    for mode, steps in _SETTINGS:
        label = f"mode={mode!r}, steps={steps}"
        try:
            got = call_learner(params_that_get_grad, (mode, steps), "params_that_get_grad", label, no_autograd=True)
        except ExerciseError as error:
            text = str(error)
            # our own words (by_hand, capture) or torch's for a backward without a graph
            if any(sign in text for sign in ("used autograd", "no grad_fn")) or is_kind(text, "no_graph"):
                where = text[text.index("\n  in your code:") :] if "\n  in your code:" in text else ""
                raise ExerciseError(
                    f"`params_that_get_grad` ran the forward pass and asked autograd for {label}.\n"
                    "Hint: this exercise asks you to reason about the code (which lines run for this mode and "
                    "step count?), not to run it: the check runs your function with autograd switched off." + where
                ) from None
            raise
        if isinstance(got, str) or not isinstance(got, (set, frozenset, list, tuple)):
            raise ExerciseError(
                f"`params_that_get_grad` should return a set of names like {{'a', 'b'}}, "
                f"got {type(got).__name__} for {label}."
            )
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


# --- the checker's own references are not an answer --------------------------------------------

_learner_running: list[str] = []  # non-empty while a learner's function runs


class _ReferenceUsed(RuntimeError):
    """A learner's function called one of this module's reference answers."""


def _not_while_learner_runs(what: str) -> None:
    if _learner_running:
        raise _ReferenceUsed(f"{what} is the checker's own reference answer")


@contextlib.contextmanager
def _learner_call() -> Iterator[None]:
    _learner_running.append("learner")
    try:
        yield
    finally:
        _learner_running.pop()


def _reference_hint(error: ExerciseError, name: str, label: str) -> ExerciseError | None:
    if "checker's own reference answer" not in str(error):
        return None
    return ExerciseError(
        f"`{name}` called the checker's reference answer for {label}.\nHint: the exercise is to "
        "write it yourself; the reference is only what the check compares with."
    )


# --- Exercise 2: repair a function whose graph is cut -----------------------------------------


def broken_scaled_scores(x: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """Standardise ``x`` over all its elements, cap the scores at ±3, divide by a learned temperature.

    The values are right; the graph is cut in three places (chapter 01, exercise 2).
    """
    mean = x.mean().item()
    std = torch.tensor(x.std(), dtype=x.dtype)
    z = (x - mean) / std.clamp_min(1e-6)
    with torch.no_grad():
        z = z.clamp(-3.0, 3.0)
    return z / temperature.to(x.dtype)


def _scaled(x, t, *, mean=True, std=True, clamp="graph"):
    """The repaired function, or a version that keeps one of the cuts (for the hints)."""
    _not_while_learner_runs("autogradlab.checks.ch01._scaled")
    m = x.mean() if mean else x.mean().detach()
    s = x.std() if std else x.std().detach()
    z = (x - m) / s.clamp_min(1e-6)
    if clamp == "graph":
        z = z.clamp(-3.0, 3.0)
    elif clamp == "hidden":  # clamped in place under no_grad: autograd never sees the clamp
        with torch.no_grad():
            z.clamp_(-3.0, 3.0)
    return z / t.to(x.dtype)


SCALED_GRADIENT_MISTAKES = {
    "the mean still leaves the graph (`.item()` makes it a Python number): the gradient that flows "
    "through the mean is missing. Keep `x.mean()` a tensor.": lambda x, t: _scaled(x, t, mean=False),
    "the std is still rebuilt with `torch.tensor(...)`, which copies the value out of the graph: the gradient "
    "through the std is missing. Use `x.std()` itself (`.to(dtype)` converts and keeps the graph).": lambda x, t: (
        _scaled(x, t, std=False)
    ),
    "both the mean and the std are still constants (`.item()`, `torch.tensor(...)`): only the direct path "
    "x -> output is in the graph.": lambda x, t: _scaled(x, t, mean=False, std=False),
    "the clamp changes the values but autograd never saw it (an in-place clamp under `no_grad` or on `.data`): "
    "scores capped at ±3 must get zero gradient. Clamp outside `no_grad`, out of place.": lambda x, t: _scaled(
        x, t, clamp="hidden"
    ),
}

SCALED_VALUE_MISTAKES = {
    "the scores are not capped at ±3 (the clamp is missing).": lambda x, t: _scaled(x, t, clamp="none"),
    "x.std() divides by N - 1 (the default); you divided by N (correction=0).": lambda x, t: (
        ((x - x.mean()) / x.std(correction=0)).clamp(-3.0, 3.0) / t
    ),
    "divide by the temperature, not multiply.": lambda x, t: _scaled(x, t) * t * t,
    "clamp the standardised scores, not x itself.": lambda x, t: (
        (x.clamp(-3.0, 3.0) - x.clamp(-3.0, 3.0).mean()) / x.clamp(-3.0, 3.0).std() / t
    ),
}


def _with_outliers(gen, shape, dtype, outliers):
    x = torch.randn(shape, generator=gen, dtype=dtype)
    flat = x.view(-1)
    for i, value in outliers:
        flat[i] = value
    return x


def _scaled_cases() -> list[Case]:
    gen = seeded(21)
    f64 = torch.float64
    return [
        Case(
            (_with_outliers(gen, (20,), f64, [(3, 9.0)]), torch.tensor(0.7, dtype=f64)),
            "x of shape (20,) with one outlier (its score is above 3), temperature 0.7",
        ),
        Case(
            (_with_outliers(gen, (4, 6), f64, [(5, -8.0), (17, 7.5)]), torch.tensor(1.3, dtype=f64)),
            "x of shape (4, 6) with two outliers, temperature 1.3",
        ),
        Case(
            (torch.randn(3, 5, generator=gen, dtype=f64), torch.tensor(2.0, dtype=f64)),
            "x of shape (3, 5) with no score beyond ±3, temperature 2.0",
        ),
        Case(
            (_with_outliers(gen, (2, 3, 4), torch.float32, [(0, 10.0)]), torch.tensor(0.5)),
            "x of shape (2, 3, 4) in float32 with one outlier, temperature 0.5",
        ),
    ]


def _grads(fn, x, t, weights):
    x = x.detach().clone().requires_grad_(True)
    t = t.detach().clone().requires_grad_(True)
    return torch.autograd.grad((fn(x, t) * weights).sum(), (x, t), allow_unused=True)


def check_scaled_scores(scaled_scores) -> None:
    """Check ``scaled_scores(x, temperature)``: the values of ``broken_scaled_scores``, gradients through every path.

    >>> check_scaled_scores(lambda x, t: ((x - x.mean()) / x.std()).clamp(-3, 3) / t)
    ✓ scaled_scores keeps the graph: values and gradients for x and temperature match autograd on 4 inputs
    """
    for i, case in enumerate(_scaled_cases()):
        x, t = case.args
        lx, lt = x.clone().requires_grad_(True), t.clone().requires_grad_(True)
        try:
            with _learner_call():
                got = call_learner(scaled_scores, (lx, lt), "scaled_scores", case.label)
        except ExerciseError as error:
            raise (_reference_hint(error, "scaled_scores", case.label) or error) from None
        if not torch.equal(lx.detach(), x) or not torch.equal(lt.detach(), t):
            raise ExerciseError(
                f"`scaled_scores` changed its input in place for {case.label}.\nHint: an in-place op "
                "on x (`x.clamp_`, `x -= ...`) modifies the caller's tensor; compute new tensors."
            )
        compare(
            got,
            _scaled(x, t),
            what="The value of `scaled_scores`",
            label=case.label,
            mistakes={hint: fn(x, t) for hint, fn in SCALED_VALUE_MISTAKES.items()},
        )
        if got.grad_fn is None:
            raise ExerciseError(
                f"`scaled_scores` returned a tensor with no grad_fn for {case.label}: the graph was "
                "cut after the last operation, so no gradient reaches x or the temperature."
            )
        weights = torch.randn(x.shape, generator=seeded(200 + i), dtype=x.dtype)
        got_gx, got_gt = torch.autograd.grad((got * weights).sum(), (lx, lt), allow_unused=True)
        right_gx, right_gt = _grads(_scaled, x, t, weights)
        for name, got_g in (("x", got_gx), ("the temperature", got_gt)):
            if got_g is None:
                where = (
                    "something between x and the output leaves the graph: here the clamp under `no_grad` "
                    "returns a tensor with no history"
                    if name == "x"
                    else "the temperature was turned into a constant (`float()`, `.item()`, `torch.tensor(...)`)"
                )
                raise ExerciseError(
                    f"No gradient reaches {name} through `scaled_scores` for {case.label}.\nHint: {where}."
                )
        wrong = {hint: _grads(fn, x, t, weights) for hint, fn in SCALED_GRADIENT_MISTAKES.items()}
        compare(
            got_gx,
            right_gx,
            what="The gradient that reaches x",
            label=f"{case.label} (gradient of sum(weights * scaled_scores(x, t)))",
            mistakes={hint: g[0] for hint, g in wrong.items()},
        )
        compare(
            got_gt.reshape(right_gt.shape),
            right_gt,
            what="The gradient that reaches the temperature",
            label=case.label,
            mistakes={hint: g[1] for hint, g in wrong.items()},
        )
    passed("scaled_scores keeps the graph: values and gradients for x and temperature match autograd on 4 inputs")


# --- Exercise 3: run the reverse sweep yourself ---------------------------------------------


class _Engine:
    """Stands in for PyTorch's autograd engine while a learner's sweep runs: any use is recorded and refused."""

    def __init__(self, used: list[str]):
        self.used = used

    def run_backward(self, *args, **kwargs):
        self.used.append("the autograd engine")
        raise RuntimeError("the autograd engine is switched off while your reverse_sweep runs")

    def __getattr__(self, name):
        return getattr(_REAL_ENGINE, name)


_REAL_ENGINE = internals.execution_engine()


@contextlib.contextmanager
def engine_off() -> Iterator[list[str]]:
    """Make ``backward()``, ``torch.autograd.grad`` and the engine behind them raise; yield what was tried.

    Unlike ``by_hand()``, grad mode stays as it is: the graph's nodes must stay callable. The
    engine itself is replaced too, so a ``grad`` imported under another name earlier is caught.

    >>> x = torch.ones(2, requires_grad=True)
    >>> with engine_off() as used:
    ...     try:
    ...         (x * 2).sum().backward()
    ...     except RuntimeError:
    ...         pass
    >>> used
    ['`backward()`']
    """
    used: list[str] = []

    def refuse(what):
        def refused(*args, **kwargs):
            used.append(what)
            raise RuntimeError(f"{what} is switched off while your reverse_sweep runs")

        return refused

    patches = [
        (torch.autograd, "backward", refuse("`backward()`")),
        (torch.autograd, "grad", refuse("`torch.autograd.grad`")),
    ]
    for owner, attr in internals.engine_patch_points():
        engine = owner is torch.autograd.variable.Variable  # the C++ engine object; the others are functions
        patches.append((owner, attr, _Engine(used) if engine else refuse("the autograd engine")))
    saved = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in patches if hasattr(owner, attr)]
    try:
        for owner, attr, replacement in patches:
            if hasattr(owner, attr):
                setattr(owner, attr, replacement)
        yield used
    finally:
        for owner, attr, original in saved:
            setattr(owner, attr, original)


class _CountUnpacks:
    """Saved-tensor hooks that count how often each saved tensor is unpacked: once per call of its node."""

    def __init__(self):
        self.counts: list[int] = []

    def pack(self, tensor):
        self.counts.append(0)
        return len(self.counts) - 1, tensor

    def unpack(self, packed):
        index, tensor = packed
        self.counts[index] += 1
        return tensor

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)


def _sweep_graphs() -> list[tuple[str, object]]:
    """(label, build) pairs; ``build()`` returns (scalar output, {name: leaf}) for a fresh, identical graph."""

    def gen(seed):
        return seeded(seed)

    def chain():
        x = torch.randn(4, generator=gen(1), dtype=torch.float64, requires_grad=True)
        return x.exp().sin().sum(), {"x": x}

    def square():
        w = torch.randn(3, generator=gen(2), dtype=torch.float64, requires_grad=True)
        return (w * w).sum(), {"w": w}

    def diamond():
        x = torch.randn(3, generator=gen(3), dtype=torch.float64, requires_grad=True)
        h = x.exp()
        return (h.sin() + h.cos() * h).sum(), {"x": x}

    def data_and_two_paths():
        g = gen(4)
        w = torch.randn(3, 2, generator=g, dtype=torch.float64, requires_grad=True)
        data = torch.randn(5, 3, generator=g, dtype=torch.float64)
        return (data @ w).relu().mean() + 0.1 * (w**2).sum(), {"w": w, "data": data}

    def two_leaves_one_add():
        g = gen(5)
        a = torch.randn(4, generator=g, dtype=torch.float64, requires_grad=True)
        b = torch.randn(4, generator=g, dtype=torch.float64, requires_grad=True)
        return (a + b).sum(), {"a": a, "b": b}

    def unbind():
        x = torch.randn(3, 2, generator=gen(6), dtype=torch.float64, requires_grad=True)
        u, v, _ = x.exp().unbind(0)
        return (u * v.sin()).sum(), {"x": x}

    def mlp_with_old_grads():
        torch.manual_seed(7)
        net = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1)).double()
        for p in net.parameters():
            p.grad = torch.full_like(p, 0.5)
        batch = torch.randn(6, 4, generator=gen(8), dtype=torch.float64)
        return net(batch).pow(2).mean(), dict(net.named_parameters())

    def deep():
        x = torch.randn(2, generator=gen(9), dtype=torch.float64, requires_grad=True)
        h = x
        for _ in range(3000):
            h = h * 1.0001
        return h.sum(), {"x": x}

    return [
        ("x.exp().sin().sum()", chain),
        ("(w * w).sum()  (one leaf used twice by one node)", square),
        ("h = x.exp(); (h.sin() + h.cos() * h).sum()  (h feeds three nodes, along paths of different length)", diamond),
        (
            "(data @ w).relu().mean() + 0.1 * (w ** 2).sum()  (data needs no grad; w is reached along two paths)",
            data_and_two_paths,
        ),
        ("(a + b).sum()  (two leaves fed by one node)", two_leaves_one_add),
        ("u, v, _ = x.exp().unbind(0); (u * v.sin()).sum()  (one node with three outputs, one unused)", unbind),
        ("a Linear-Tanh-Linear MLP whose parameters already hold .grad = 0.5 from an earlier step", mlp_with_old_grads),
        ("a chain of 3,000 multiplications", deep),
    ]


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
                stack.extend(child for child, _ in node.next_functions if child is not None)
        return ran
    pending: dict = {}
    seen, stack = {output.grad_fn}, [output.grad_fn]
    while stack:
        for child, _ in stack.pop().next_functions:
            if child is not None:
                pending[child] = pending.get(child, 0) + 1
                if child not in seen:
                    seen.add(child)
                    stack.append(child)
    ran, ready, queued = [], [output.grad_fn], {output.grad_fn}
    while ready:
        node = ready.pop(0)
        ran.append(node)
        for child, _ in node.next_functions:
            if child is None:
                continue
            pending[child] -= 1
            if pending[child] == 0 if order == "topological" else child not in queued:
                queued.add(child)
                ready.append(child)
    return ran


def _sweep(output: torch.Tensor, *, order="topological", sum_=True, accumulate=True) -> None:
    """A reverse sweep; the keyword arguments switch on typical mistakes (used for the hints)."""
    _not_while_learner_runs("autogradlab.checks.ch01._sweep")
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


_ORDER_HINT = (
    "a node ran before all of its gradient had arrived: a node must wait until every node that feeds it "
    "(every consumer of its forward output) has run. Count each node's consumers first and run it when the "
    "count reaches zero (a topological order); a plain DFS or BFS over next_functions is not enough."
)

SWEEP_MISTAKES = [
    (_ORDER_HINT, {"order": "bfs"}),
    (_ORDER_HINT, {"order": "dfs"}),
    (
        "a node that receives gradients along several edges kept only one of them: sum every gradient that "
        "arrives for the same (node, input_nr) before calling the node.",
        {"sum_": False},
    ),
    (
        "a leaf's new gradient replaced its .grad: backward() adds to whatever .grad already holds "
        "(here 0.5 from an earlier step). Accumulate: leaf.grad = leaf.grad + g when it is not None, or call the "
        "AccumulateGrad node itself, which does that.",
        {"accumulate": False},
    ),
]


def _leaf_report(leaves: dict, reference: dict) -> list[str]:
    wrong = []
    for name, leaf in leaves.items():
        got, right = leaf.grad, reference[name]
        if (got is None) != (right is None):
            wrong.append(name)
        elif got is not None and (
            got.shape != right.shape or not torch.allclose(got.double(), right.double(), rtol=1e-7, atol=1e-9)
        ):
            wrong.append(name)
    return wrong


def _grads_after(build, sweep) -> dict:
    output, leaves = build()
    sweep(output)
    return {name: (None if t.grad is None else t.grad.detach().clone()) for name, t in leaves.items()}


def _overlapping(t: torch.Tensor) -> bool:
    return any(stride == 0 and size > 1 for stride, size in zip(t.stride(), t.shape))


def check_reverse_sweep(reverse_sweep) -> None:
    """Check ``reverse_sweep(output)``: what ``output.backward()`` leaves in ``.grad``, with the engine switched off.

    Every node must run once (counted by saved-tensor hooks), the leaves' ``.grad`` must
    match a real ``backward()`` on the same graph (including ``.grad`` that was there before),
    carry no graph of their own, and not share memory with each other.

    >>> try:
    ...     check_reverse_sweep(lambda output: output.backward())
    ... except ExerciseError as error:
    ...     print(str(error).splitlines()[0])
    `reverse_sweep` called `backward()` on x.exp().sin().sum().
    """
    graphs = _sweep_graphs()
    for label, build in graphs:
        reference = _grads_after(build, lambda out: out.backward())
        counter = _CountUnpacks()
        with counter.hooks():
            output, leaves = build()
        values = {name: leaf.detach().clone() for name, leaf in leaves.items()}
        with engine_off() as used, _learner_call():
            try:
                call_learner(reverse_sweep, (output,), "reverse_sweep", label)
            except ExerciseError as error:
                reference_used = _reference_hint(error, "reverse_sweep", label)
                if reference_used:
                    raise reference_used from None
                raise ExerciseError(_sweep_error_hint(str(error), used, label)) from None
        changed = [name for name, leaf in leaves.items() if not torch.equal(leaf.detach(), values[name])]
        if changed:
            raise ExerciseError(
                f"Your sweep changed the values of {changed[0]} on {label}.\nHint: backward() only "
                "writes .grad; the leaves themselves (parameters, inputs) stay as they are."
            )
        if used:
            raise ExerciseError(_engine_hint(used, label))
        twice = [n for n in counter.counts if n > 1]
        if twice:
            raise ExerciseError(
                f"A node ran {max(twice)} times in your sweep on {label} (a tensor it saved was read {max(twice)} "
                "times; backward() runs every node exactly once).\nHint: do not call a node once per edge that "
                "reaches it; collect (sum) all its gradients first, then call it once."
            )
        wrong = _leaf_report(leaves, reference)
        if wrong:
            raise ExerciseError(_wrong_grads_message(build, leaves, reference, wrong, label))
        for name, leaf in leaves.items():
            g = leaf.grad
            if g is not None and (g.requires_grad or g.grad_fn is not None):
                raise ExerciseError(
                    f"{name}.grad carries a graph of its own (grad_fn={type(g.grad_fn).__name__}) after your sweep "
                    f"on {label}.\nHint: calling a node with grad mode on records the backward computation, as "
                    "backward(create_graph=True) would. backward() does not: run the sweep under torch.no_grad()."
                )
        _check_no_shared_grads(leaves, label)
    passed(f"reverse_sweep matches backward() on {len(graphs)} graphs: each node ran once, every leaf's .grad is right")


def _sweep_error_hint(message: str, used: list[str], label: str) -> str:
    if used:
        return _engine_hint(used, label)
    hint = hint_for(message, _SWEEP_ERROR_HINTS)
    return f"{message}\nHint: {hint}" if hint else message


_SWEEP_ERROR_HINTS = {  # kinds of autogradlab.tracebacks.ERROR_KINDS, tried in this order
    "none_value": "next_functions holds (None, 0) for an input that needs no gradient (like `data`), "
    "and a node returns None for it: skip those entries.",
    "recursion": "a recursive walk fails on deep graphs (real models have thousands of nodes): "
    "use a loop with an explicit stack or queue.",
    "node_arity": "a node takes one gradient per output of its forward op, in output order "
    "(`len(node._input_metadata)` of them; `input_nr` in next_functions says which output an edge "
    "comes from). Pass None for an output that received no gradient.",
    "grad_shape": "a node can return a gradient in the broadcast shape of its forward input (nn.Linear's "
    "bias is added to every row). The engine sums it down to the shape the next node expects, "
    "`child._input_metadata[input_nr].shape`: do the same with `g.sum_to_size(shape)`.",
    "not_iterable": "a node with one input returns a single tensor, one with several returns a tuple "
    "(AccumulateGrad returns ()): normalise before zipping with next_functions.",
}


def _engine_hint(used: list[str], label: str) -> str:
    return (
        f"`reverse_sweep` called {used[0]} on {label}.\nHint: this exercise rebuilds what backward() does, so "
        "the engine is switched off here: call each node yourself, `node(*grads)`, in a valid order."
    )


def _wrong_grads_message(build, leaves, reference, wrong, label) -> str:
    name = wrong[0]
    got, right = leaves[name].grad, reference[name]
    head = f"After your sweep on {label}, {name}.grad is wrong"
    if right is None:
        return f"{head}: backward() leaves it None (it needs no gradient), you set it."
    if got is None:
        return (
            f"{head}: it is None, but backward() gives it a gradient.\nHint: every leaf that requires grad is "
            "reached through an AccumulateGrad node: its `.variable` is the leaf; add the arriving gradient "
            "into `.grad` (or call the AccumulateGrad node)."
        )
    head += f" (max |error| {float((got.double() - right.double()).abs().max()):.3g})"
    for hint, flags in SWEEP_MISTAKES:
        mistaken = _grads_after(build, lambda out: _sweep(out, **flags))
        if not _leaf_report(leaves, mistaken):
            return f"{head}.\nHint: {hint}"
    return (
        f"{head}.\nHint: check that a node runs only after every node that feeds it has run, and that gradients "
        "arriving for the same (node, input_nr) are summed. Print each node and what arrives, next to backward()."
    )


def _check_no_shared_grads(leaves: dict, label: str) -> None:
    owners: dict[int, str] = {}
    for name, leaf in leaves.items():
        g = leaf.grad
        if g is None:
            continue
        if _overlapping(g):
            raise ExerciseError(
                f"{name}.grad after your sweep on {label} is an expanded view (strides {g.stride()}): many "
                "elements share one memory location, so in-place updates such as clip_grad_norm_ fail on it.\n"
                "Hint: backward() gives each leaf a proper tensor of its own: call the AccumulateGrad node, or "
                "store a clone."
            )
        ptr = g.untyped_storage().data_ptr()
        if ptr in owners:
            raise ExerciseError(
                f"{owners[ptr]}.grad and {name}.grad are the same memory after your sweep on {label}: a node "
                "(AddBackward0 here) can return one tensor for several inputs, and you stored it twice.\nHint: "
                "an in-place change to one .grad would change the other; call the AccumulateGrad node, or store a clone."
            )
        owners[ptr] = name
