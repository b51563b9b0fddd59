"""Checkers for chapter 04 (saved tensors, version counters and memory).

1. ``check_saved_activation_bytes``: predict, storage by storage, the activations an MLP saves for
   backward with ReLU, tanh or GELU (against a ``SavedBytes`` measurement; measuring inside the answer is off limits).
2. ``check_inplace_chain``: a chain of ops in place wherever that saves an allocation and backward allows it,
   and nowhere else (gradients checked, ops counted by a dispatch mode).
3. ``check_ema``: an exponential moving average kept as views of one flat buffer, updated in place under
   ``torch.no_grad()`` so the version counter moves.
"""

from __future__ import annotations

import torch

from autogradlab.checks.core import ExerciseError, LearnerCall, OffLimits, Routine, compare, mistakes, named, passed
from autogradlab.graph.saved_bytes import SavedBytes, storage_key
from autogradlab.i18n import N_, _
from autogradlab.models.fixtures import make_mlp, mlp_loss
from autogradlab.torch_internals import TorchDispatchMode, TorchFunctionMode, version
from autogradlab.tracebacks import error_kind, is_kind

# --- Exercise 1: the saved activations of an MLP, storage by storage --------------------------


def measured_activation_storages(batch_size: int, sizes: list[int], dtype: torch.dtype, activation: str) -> list[int]:
    """Bytes of each activation storage the MLP saves for backward, in forward order (measured)."""
    with torch.random.fork_rng(devices=[]):
        model = make_mlp(sizes, dtype, activation=activation)
        x = torch.randn(batch_size, sizes[0], dtype=dtype)
    with SavedBytes(exclude=model.parameters()) as saved:
        mlp_loss(model, x)
    return [stored.nbytes for stored in saved.storages.values()]


PREDICT_DO_NOT_MEASURE = OffLimits(
    no_graph=True,  # a model run inside the answer records no graph: there is nothing to measure
    routines=(Routine(torch.autograd.graph.saved_tensors_hooks, "__enter__", "`saved_tensors_hooks`"),),
    course=("autogradlab.graph", "autogradlab.models.fixtures"),
    why=N_("predict the list from what each op's derivative needs; running the model and measuring it is the checker's job, not the answer."),
)  # fmt: skip


def _item(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _relu_like(b, s, d):
    return [b * n * _item(d) for n in s]


def _gelu_like(b, s, d):
    return [b * s[0] * _item(d), *(b * n * _item(d) for n in s[1:-1] for _ in (0, 1)), b * s[-1] * _item(d)]


def _right(b, s, d, a):
    return (_gelu_like if a == "gelu" else _relu_like)(b, s, d)


_STORAGE_HINTS = {
    "gelu-like-relu": N_("GELU's derivative needs its input (the Linear's output), and the next Linear needs GELU's output: for GELU every hidden layer saves two storages. ReLU and tanh rebuild their derivative from their output, which the next Linear saves anyway, so there it is one."),
    "relu-like-gelu": N_("ReLU's mask and tanh's derivative 1 − tanh² come from the output, and the output is also the next Linear's input: one storage per hidden layer, counted once (GELU is the one that needs its input too)."),
    "no-input": N_("the first Linear saves its input x (the weight gradient is xᵀ·g): the input batch is the first storage."),
    "no-output": N_("the loss out.pow(2) saves its input `out` (the derivative of out² is 2·out): the final output is the last storage."),
    "elements": N_("count bytes, not elements: multiply by the element size (4 for float32, 8 for float64, 2 for bfloat16)."),
    "always-4-bytes": N_("the element size depends on the dtype: float64 takes 8 bytes, bfloat16 2."),
    "per-example": N_("activations are per example: multiply by the batch size."),
}  # fmt: skip
_STORAGE_SLIPS = {  # the list a learner with that misconception writes (None where it does not apply)
    "gelu-like-relu": lambda b, s, d, a: _relu_like(b, s, d) if a == "gelu" else None,
    "relu-like-gelu": lambda b, s, d, a: _gelu_like(b, s, d) if a != "gelu" else None,
    "no-input": lambda b, s, d, a: _right(b, s, d, a)[1:],
    "no-output": lambda b, s, d, a: _right(b, s, d, a)[:-1],
    "elements": lambda b, s, d, a: [n // _item(d) for n in _right(b, s, d, a)],
    "always-4-bytes": lambda b, s, d, a: (
        [n // _item(d) * 4 for n in _right(b, s, d, a)] if d != torch.float32 else None
    ),
    "per-example": lambda b, s, d, a: [n // b for n in _right(b, s, d, a)] if b != 1 else None,
}
ACTIVATION_MISTAKES = mistakes(_STORAGE_HINTS, _STORAGE_SLIPS)

_ACTIVATION_CASES = [
    (3, [5, 7, 6, 2], torch.float64, "relu"),
    (4, [6, 9, 3], torch.float32, "tanh"),
    (5, [4, 6, 7, 3], torch.float32, "gelu"),
    (16, [8, 4], torch.float32, "gelu"),
    (2, [3, 9, 5, 1], torch.bfloat16, "gelu"),
    (7, [3, 5, 4, 6, 2], torch.float32, "tanh"),
]


def _byte_list(got, label: str) -> list[int]:
    got = got.tolist() if isinstance(got, torch.Tensor) else got
    if isinstance(got, (int, float)) and not isinstance(got, bool):
        hint = _("return a list with the bytes of each saved activation storage, in the order the forward pass creates them (the total alone can be right for the wrong reasons).")  # fmt: skip
        summary = _("`saved_activation_bytes` returned one number ({got}) for {label}.").format(got=got, label=label)
        raise ExerciseError("type", summary, hint=hint, mistake="total")
    whole = lambda n: isinstance(n, (int, float)) and not isinstance(n, bool) and float(n).is_integer()
    if not isinstance(got, (list, tuple)) or not all(whole(n) for n in got):
        raise ExerciseError("type", _("`saved_activation_bytes` should return a list of whole byte counts, got {got!r}.").format(got=got))  # fmt: skip
    return [int(n) for n in got]


def check_saved_activation_bytes(saved_activation_bytes) -> None:
    """Check ``saved_activation_bytes(batch_size, sizes, dtype, activation)`` -> bytes per saved activation storage.

    >>> try:
    ...     check_saved_activation_bytes(lambda b, sizes, dtype, activation: [b * n * 4 for n in sizes])
    ... except ExerciseError as error:
    ...     print(f"{error.mistake}: {error.hint}")
    always-4-bytes: the element size depends on the dtype: float64 takes 8 bytes, bfloat16 2.
    """
    learner = LearnerCall(saved_activation_bytes, "saved_activation_bytes", PREDICT_DO_NOT_MEASURE)
    for case in _ACTIVATION_CASES:
        label = "batch_size={}, sizes={}, dtype={}, activation={!r}".format(*case)
        got = _byte_list(learner.on(label)(case[0], list(case[1]), *case[2:]), label)
        truth = measured_activation_storages(*case)
        if got == truth:
            continue
        found = next((m for m in ACTIVATION_MISTAKES if m.compute(*case) == got), None)
        same_total = found is None and sum(got) == sum(truth)
        agree = " The totals agree, the storages do not." if same_total else ""
        detail = _("You listed {got} (total {total} B); a saved_tensors_hooks measurement of this model finds {truth} (total {truth_total} B).{agree}").format(got=got, total=sum(got), truth=truth, truth_total=sum(truth), agree=agree)  # fmt: skip
        hint = _("go layer by layer: what does Linear's backward need, what does the activation's derivative need, what does pow need? Then count a tensor that two layers save once.")  # fmt: skip
        mistake = found.id if found else ("same-total" if same_total else None)
        summary, measured = _("`saved_activation_bytes` is wrong for {label}.").format(label=label), {"got": got, "expected": truth}  # fmt: skip
        raise ExerciseError(
            "value", summary, detail=detail, hint=found.hint if found else hint, mistake=mistake, measured=measured
        )
    passed(_("saved_activation_bytes matches the measured saved storages of {n} MLPs (ReLU, tanh, GELU), storage by storage").format(n=len(_ACTIVATION_CASES)))  # fmt: skip


# --- Exercise 2: in place wherever it saves memory ----------------------------------------------

# The chain of Exercise 2, step by step: (the aten op, what it computes, what its backward saves).
CHAIN = [
    ("sin", "h = h.sin()", "input"),
    ("mul", "h = h * 3", "nothing"),
    ("exp", "h = h.exp()", "output"),
    ("add", "h = h + 1", "nothing"),
    ("tanh", "h = h.tanh()", "output"),
    ("div", "h = h / 2", "nothing"),
    ("pow", "h = h ** 2", "input"),
    ("sub", "h = h - 0.5", "nothing"),
]
_STEPS = [name for name, _, _ in CHAIN]
_SAVED_BEFORE = dict(zip(_STEPS, ["nothing"] + [saves for _, _, saves in CHAIN[:-1]]))  # what the step before saved


def chain(h: torch.Tensor) -> torch.Tensor:
    """The chain of Exercise 2, all out of place: sin, ×3, exp, +1, tanh, /2, square, −0.5."""
    return ((((h.sin() * 3).exp() + 1).tanh() / 2) ** 2) - 0.5


def inplace_saves_memory() -> dict[str, bool]:
    """Step k can overwrite its input and save an allocation iff it does not save its input (else autograd
    clones the input first) and step k−1 did not save its output (else backward raises)."""
    return {name: saves != "input" and _SAVED_BEFORE[name] != "output" for name, _, saves in CHAIN}


class _OpTrace(TorchDispatchMode):
    """Records the aten ops run inside it: the in-place ones (``mul_``) and the ones that allocate a new tensor."""

    def __init__(self):
        super().__init__()
        self.in_place: list[str] = []
        self.allocating: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name.endswith("_") and not name.startswith("_"):
            self.in_place.append(name[:-1])
        elif name not in {"detach", "alias", "view", "_unsafe_view"}:
            self.allocating.append(name)
        return func(*args, **(kwargs or {}))


class _Aliases(TorchFunctionMode):
    """Records ``.data`` and ``detach()`` (a dispatch mode sees both as one ``aten.detach``)."""

    def __init__(self):
        super().__init__()
        self.used: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func == torch.Tensor.data.__get__:  # a new method-wrapper on every access: compare, not `is`
            self.used.append("data")
        elif func in (torch.Tensor.detach, torch.detach):
            self.used.append("detach")
        return func(*args, **(kwargs or {}))


ALIAS_HINTS = {
    "data": N_("`.data` has its own version counter: a change through it is invisible to autograd, so a saved tensor changes without an error and the gradient goes silently wrong (or a later in-place op on the tensor trips the check). The spec rules out `.data`: leave a step whose input was saved out of place."),
    "detach": N_("`detach()` shares memory and the version counter with the tensor: an in-place change through it still makes a saved tensor stale, and it saves nothing. The spec rules out detach(): run each step on `h` itself, in place only where nothing saved the tensor it overwrites."),
}  # fmt: skip


def _allocation_error(trace: _OpTrace, label: str, fewest: int) -> ExerciseError | None:
    allowed = inplace_saves_memory()
    wasted = next((n for n in trace.in_place if n in allowed and not allowed[n]), None)
    missed = next((n for n, ok in allowed.items() if ok and n not in trace.in_place), None)
    if wasted and CHAIN[_STEPS.index(wasted)][2] == "input":
        hint = _("`{wasted}` saves its input for backward, so autograd clones the input before `{wasted}_` overwrites it: still {n} allocations. The spec asks for out of place wherever in place saves nothing.").format(wasted=wasted, n=len(trace.allocating))  # fmt: skip
        summary = _("`chain_inplace` runs `{wasted}_` in place for {label}, which saves no memory.").format(wasted=wasted, label=label)  # fmt: skip
        return ExerciseError("contract", summary, hint=hint, mistake="in-place-saves-nothing")
    if missed:
        saves = CHAIN[_STEPS.index(missed)][2]
        hint = _("`{missed}` saves {saves} for its backward, and the step before saved {before}: nothing needs the tensor `{missed}_` would overwrite. In-place versions: mul_, exp_, add_, tanh_, div_, pow_, sub_.").format(missed=missed, saves=_("its output") if saves == "output" else _("nothing"), before=_("its input, not its output") if _SAVED_BEFORE[missed] == "input" else _("nothing"))  # fmt: skip
        summary = _("`chain_inplace` is right, but step `{step}` could overwrite its input and does not ({n} new tensors where {fewest} are enough).").format(step=CHAIN[_STEPS.index(missed)][1], n=len(trace.allocating), fewest=fewest)  # fmt: skip
        return ExerciseError("contract", summary, hint=hint, mistake="missed-in-place")
    if len(trace.allocating) > fewest:
        summary = _("`chain_inplace` allocates {n} new tensors for {label} ({allocating}); {fewest} are enough.").format(n=len(trace.allocating), label=label, allocating=', '.join(trace.allocating), fewest=fewest)  # fmt: skip
        hint = _("no copies (clone, contiguous, x * 1) are needed beyond the steps that cannot run in place.")
        return ExerciseError("contract", summary, hint=hint, mistake="extra-copy")
    return None


def _backward_error(exc: RuntimeError, trace: _OpTrace, label: str) -> ExerciseError:
    # a stale save: the first in-place step right after a step that saved its output overwrote that output
    culprit = next((n for n in trace.in_place if n in _STEPS and _SAVED_BEFORE[n] == "output"), None)
    if culprit and is_kind(exc, "stale"):
        hint = _("the step before, `{before}`, saved its output for backward, and `{culprit}_` overwrites exactly that tensor.").format(before=_STEPS[_STEPS.index(culprit) - 1], culprit=culprit)  # fmt: skip
        mistake = f"{culprit}-overwrites-saved"
    else:
        hint, mistake = _("the result must stay in the graph: backward runs from it to h."), error_kind(exc)
    summary = _("backward through `chain_inplace` fails for {label}: {error}").format(label=label, error=str(exc).splitlines()[0][:160])  # fmt: skip
    return ExerciseError("contract", summary, hint=hint, mistake=mistake)


def check_inplace_chain(chain_inplace) -> None:
    """Check ``chain_inplace(h)``: the value and gradient of :func:`chain` with the fewest new tensors, h untouched.

    >>> try:
    ...     check_inplace_chain(lambda h: torch.no_grad()(chain)(h))
    ... except ExerciseError as error:
    ...     print(f"{error.mistake}: {error.hint}")
    no_graph: the result must stay in the graph: backward runs from it to h.
    """
    fewest = sum(not ok for ok in inplace_saves_memory().values())
    learner = LearnerCall(chain_inplace, "chain_inplace", frozen_inputs=False)  # h is checked below, its version too
    gen = torch.Generator().manual_seed(40)
    for shape in ((5,), (3, 4)):
        label = _("h of shape {shape}").format(shape=shape)
        x = torch.randn(shape, generator=gen, dtype=torch.float64, requires_grad=True)
        h = x * 1
        h_before, h_version = h.detach().clone(), version(h)
        with _OpTrace() as trace, _Aliases() as aliases:
            out = learner.on(label)(h)
        if version(h) != h_version or not torch.equal(h.detach(), h_before):
            hint = _("start with an out-of-place step. (An in-place sin_ would not save memory anyway: sin saves its input, so autograd clones the input before overwriting it.)")  # fmt: skip
            summary = _("`chain_inplace` changed its argument h in place for {label}.").format(label=label)
            raise ExerciseError("changed-input", summary, hint=hint)
        compare(out, chain(x.detach()), what="`chain_inplace`", label=label)
        if aliases.used:
            used = aliases.used[0]
            raise named(used, _("`chain_inplace` used `{used}` for {label}.").format(used=used, label=label), ALIAS_HINTS, "off-limits")  # fmt: skip
        try:
            (grad,) = torch.autograd.grad(out.sum(), x)
        except RuntimeError as exc:
            raise _backward_error(exc, trace, label) from None
        if not torch.allclose(grad, torch.autograd.grad(chain(x).sum(), x)[0]):
            hint = _("something changed a saved tensor where autograd could not see it: backward used the new values.")
            summary = _("`chain_inplace` gives a wrong gradient for {label}, with no error.").format(label=label)
            raise ExerciseError("value", summary, hint=hint, mistake="hidden-change")
        error = _allocation_error(trace, label, fewest)
        if error is not None:
            raise error
    in_place = [n for n, ok in inplace_saves_memory().items() if ok]
    passed(_("chain_inplace allocates {fewest} new tensors for {n} steps ({in_place} run in place), the fewest backward allows").format(fewest=fewest, n=len(CHAIN), in_place=", ".join(in_place)))  # fmt: skip


# --- Exercise 3: an exponential moving average in one flat buffer ------------------------------


def _model(seed: int) -> torch.nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))


EMA_HINTS = {
    "not-a-dict": N_("`{name: view for name, p in model.named_parameters()}`: the names are what evaluation code looks up."),
    "values": N_("each entry starts at its parameter's value and has its shape: `.view(p.shape)` of a slice of the buffer."),
    "in-graph": N_("the average is plain data: build it from `p.detach()` and update it under `torch.no_grad()` (`torch.cat` of parameters is a graph node)."),
    "shares-model": N_("`detach()` and views share memory with the parameter, so every optimizer step would change the average too; `torch.cat` (or a new `torch.empty` you copy into) allocates new memory."),
    "separate-storages": N_("allocate one 1-D buffer for all parameters (`torch.cat` of the flattened copies), then hand out views of it: `flat.split(sizes)` and `.view(shape)` create no new memory."),
    "moved-model": N_("write into the average's tensors, never into `p`."),
    "replaced": N_("you put a new tensor into the dict; whoever holds the average (an evaluation model, a checkpoint) still has the old one, and the new one is no view of the buffer. Update in place: mul_, add_, lerp_."),
    "decay-swapped": N_("decay weighs the old average: new = decay · ema + (1 − decay) · param."),
    "updated-a-copy": N_("`torch.cat(...)` and `clone()` make a new tensor: an in-place op on it leaves the buffer behind the views alone. Update the views themselves (mul_, add_, lerp_)."),
    "formula": N_("new = decay · ema + (1 − decay) · param, for every parameter."),
    "through-data": N_("a change through `.data` is invisible to autograd: a graph that used the average would silently see new values. Use `with torch.no_grad():` and in-place ops on the tensor itself."),
}  # fmt: skip


def _init_problem(ema, model) -> tuple[str, str] | None:
    """(mistake, what is wrong) for the dict init_ema returned, or None."""
    params = dict(model.named_parameters())
    for name, e in ema.items():
        p = params[name]
        if not isinstance(e, torch.Tensor) or e.shape != p.shape or not torch.equal(e.detach(), p.detach()):
            return "values", _("`init_ema`'s {name} should start at the parameter's value, shape {shape}.").format(name=name, shape=tuple(p.shape))  # fmt: skip
        if e.requires_grad or e.grad_fn is not None:
            return "in-graph", _("`init_ema`'s {name} is part of autograd (requires_grad={requires_grad}).").format(name=name, requires_grad=e.requires_grad)  # fmt: skip
    storages = {storage_key(e) for e in ema.values()}
    if storages & {storage_key(p) for p in params.values()}:
        return "shares-model", _("`init_ema` returned tensors that share memory with the model.")
    if len(storages) != 1:
        return "separate-storages", _("`init_ema`'s tensors live in {n} separate storages, not one buffer.").format(n=len(storages))  # fmt: skip
    return None


def _update_problem(ema, held, before, params, decay, versions) -> tuple[str, str] | None:
    """(mistake, what is wrong) after ema_update_, or None."""
    for name in before:
        e = ema.get(name)
        expected = decay * before[name] + (1 - decay) * params[name]
        if e is not held[name]:
            return "replaced", _("`ema_update_` replaced ema[{name!r}] instead of updating it.").format(name=name)
        if e.requires_grad or e.grad_fn is not None:
            return "in-graph", _("ema[{name!r}] became part of a graph after `ema_update_`.").format(name=name)
        if torch.allclose(e.detach(), (1 - decay) * before[name] + decay * params[name]) and decay != 0.5:
            return "decay-swapped", _("`ema_update_` computed wrong values for {name}.").format(name=name)
        if not torch.allclose(e.detach(), expected):
            if torch.equal(e.detach(), before[name]):
                return "updated-a-copy", _("`ema_update_` left wrong values in {name}: they did not change.").format(name=name)  # fmt: skip
            return "formula", _("`ema_update_` left wrong values in {name}.").format(name=name)
        if version(e) == versions[name]:
            return "through-data", _("ema[{name!r}] changed but its version counter did not move.").format(name=name)
    return None


def check_ema(init_ema, ema_update_) -> None:
    """Check ``init_ema(model)`` -> {name: view of one flat buffer} and ``ema_update_(ema, model, decay)`` (in place).

    >>> try:
    ...     check_ema(lambda model: dict(model.named_parameters()), lambda ema, model, decay: None)
    ... except ExerciseError as error:
    ...     print(f"{error.mistake}: {error.hint}")
    in-graph: the average is plain data: build it from `p.detach()` and update it under `torch.no_grad()` (`torch.cat` of parameters is a graph node).
    """
    init = LearnerCall(init_ema, "init_ema")
    update = LearnerCall(ema_update_, "ema_update_", error_hints=EMA_HINTS["in-graph"], frozen_inputs=False)
    for seed, decay in ((0, 0.9), (1, 0.99)):
        model = _model(seed)
        label = _("a 2-layer model (seed {seed}), decay {decay}").format(seed=seed, decay=decay)
        ema = init.on(label)(model)
        names = [n for n, _ in model.named_parameters()]
        if not isinstance(ema, dict) or sorted(ema) != sorted(names):
            summary = _("`init_ema` should return a dict keyed by parameter name ({names}), got {type}.").format(names=names, type=type(ema).__name__)  # fmt: skip
            raise named("not-a-dict", summary, EMA_HINTS, "type")
        problem = _init_problem(ema, model)
        if problem is None:
            optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
            model(torch.ones(5, 4)).pow(2).mean().backward()
            optimizer.step()
            held, before = dict(ema), {name: e.detach().clone() for name, e in ema.items()}
            versions = {name: version(e) for name, e in ema.items()}
            params = {name: p.detach().clone() for name, p in model.named_parameters()}
            param_versions = [version(p) for p in model.parameters()]
            update.on(label)(ema, model, decay)
            if [version(p) for p in model.parameters()] != param_versions:
                problem = "moved-model", "`ema_update_` changed the model's parameters; only the average should change."
            else:
                problem = _update_problem(ema, held, before, params, decay, versions)
        if problem is not None:
            mistake, summary = problem
            kind = "value" if mistake in ("values", "decay-swapped", "updated-a-copy", "formula") else "contract"
            raise named(mistake, f"{summary} ({label})", EMA_HINTS, kind)
    passed(_("init_ema keeps the average in one buffer of its own; ema_update_ updates it in place, visibly to autograd, leaving the model alone"))  # fmt: skip
