"""Checkers for chapter 04 (saved tensors, version counters and memory).

1. ``check_saved_activation_bytes``: predict, storage by storage, the activations an MLP
   saves for backward with ReLU, tanh or GELU (checked against a ``saved_tensors_hooks``
   measurement of the real model).
2. ``check_inplace_chain``: make a chain of ops in place wherever backward allows it, and
   nowhere else (gradients checked, in-place ops counted with a dispatch mode).
3. ``check_ema``: keep an exponential moving average of a model's parameters: a snapshot
   that shares no memory, updated in place under ``torch.no_grad()`` so version counters move.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from autogradlab.checks.core import ExerciseError, call_learner, passed
from autogradlab.torch_internals import TorchDispatchMode, version

# --- Exercise 1: the saved activations of an MLP, storage by storage --------------------------

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "gelu": nn.GELU}


def make_mlp(
    sizes: list[int], dtype: torch.dtype = torch.float32, seed: int = 0, activation: str = "relu"
) -> nn.Sequential:
    """Linear(sizes[0], sizes[1]) -> activation -> ... -> Linear(sizes[-2], sizes[-1]) (none after the last)."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(n_in, n_out, dtype=dtype))
        if i < len(sizes) - 2:
            layers.append(ACTIVATIONS[activation]())
    return nn.Sequential(*layers)


def mlp_loss(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The loss of the exercise: mean of the squared outputs."""
    return model(x).pow(2).mean()


def saved_storages(build: Callable, exclude: set[int] = frozenset()) -> tuple[object, dict[int, int]]:
    """Run ``build()`` under ``saved_tensors_hooks``; return its result and {storage ptr: bytes} in the order first saved.

    Storages whose ``data_ptr`` is in ``exclude`` (parameters) are left out.
    """
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in exclude:
            storages.setdefault(storage.data_ptr(), storage.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        result = build()
    return result, storages


def measure_saved_bytes(build: Callable, exclude: set[int] = frozenset()) -> tuple[object, int]:
    """Run ``build()`` under ``saved_tensors_hooks``; return its result and the bytes saved (each storage once)."""
    result, storages = saved_storages(build, exclude)
    return result, sum(storages.values())


def measured_activation_storages(batch_size: int, sizes: list[int], dtype: torch.dtype, activation: str) -> list[int]:
    """Bytes of each activation storage the MLP saves for backward, in forward order (measured)."""
    model = make_mlp(sizes, dtype, activation=activation)
    x = torch.randn(batch_size, sizes[0], dtype=dtype)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    _, storages = saved_storages(lambda: mlp_loss(model, x), exclude=params)
    return list(storages.values())


def _item(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _relu_like(b, s, d):
    return [b * n * _item(d) for n in s]


def _gelu_like(b, s, d):
    hidden = [b * n * _item(d) for n in s[1:-1] for _ in (0, 1)]
    return [b * s[0] * _item(d), *hidden, b * s[-1] * _item(d)]


def _per_activation(b, s, d, a):
    return (_gelu_like if a == "gelu" else _relu_like)(b, s, d)


# (hint, the wrong list a learner with that misconception writes, or None where it does not apply)
ACTIVATION_MISTAKES = [
    (
        "GELU's derivative needs its input (the Linear's output), and the next Linear needs GELU's output: for GELU "
        "every hidden layer saves two storages. ReLU and tanh rebuild their derivative from their output, which the "
        "next Linear saves anyway, so there it is one.",
        lambda b, s, d, a: _relu_like(b, s, d) if a == "gelu" else None,
    ),
    (
        "ReLU's mask and tanh's derivative 1 − tanh² come from the output, and the output is also the next Linear's "
        "input: one storage per hidden layer, counted once (GELU is the one that needs its input too).",
        lambda b, s, d, a: _gelu_like(b, s, d) if a != "gelu" else None,
    ),
    (
        "the first Linear saves its input x too (the weight gradient is xᵀ·g): the input batch is the first storage.",
        lambda b, s, d, a: _per_activation(b, s, d, a)[1:],
    ),
    (
        "the loss out.pow(2) saves its input `out` (the derivative of out² is 2·out): the final output is the last "
        "storage.",
        lambda b, s, d, a: _per_activation(b, s, d, a)[:-1],
    ),
    (
        "count bytes, not elements: multiply by the element size (4 for float32, 8 for float64, 2 for bfloat16).",
        lambda b, s, d, a: [n // _item(d) for n in _per_activation(b, s, d, a)],
    ),
    (
        "the element size depends on the dtype: float64 takes 8 bytes, bfloat16 2.",
        lambda b, s, d, a: [n // _item(d) * 4 for n in _per_activation(b, s, d, a)] if d != torch.float32 else None,
    ),
    (
        "activations are per example: multiply by the batch size.",
        lambda b, s, d, a: [n // b for n in _per_activation(b, s, d, a)] if b != 1 else None,
    ),
]


_ACTIVATION_CASES = [
    (3, [5, 7, 6, 2], torch.float64, "relu"),
    (4, [6, 9, 3], torch.float32, "tanh"),
    (5, [4, 6, 7, 3], torch.float32, "gelu"),
    (16, [8, 4], torch.float32, "gelu"),
    (2, [3, 9, 5, 1], torch.bfloat16, "gelu"),
    (7, [3, 5, 4, 6, 2], torch.float32, "tanh"),
]


def _as_int_list(got, label: str) -> list[int]:
    if isinstance(got, torch.Tensor):
        got = got.tolist()
    if isinstance(got, (int, float)) and not isinstance(got, bool):
        raise ExerciseError(
            f"`saved_activation_bytes` returned one number ({got}) for {label}; return a list with the bytes of "
            "each saved activation storage, in the order the forward pass creates them (the total alone can be "
            "right for the wrong reasons)."
        )
    if not isinstance(got, (list, tuple)) or not all(
        isinstance(n, (int, float)) and not isinstance(n, bool) and float(n).is_integer() for n in got
    ):
        raise ExerciseError(
            f"`saved_activation_bytes` should return a list of whole byte counts, got {got!r} for {label}."
        )
    return [int(n) for n in got]


def check_saved_activation_bytes(saved_activation_bytes) -> None:
    """Check ``saved_activation_bytes(batch_size, sizes, dtype, activation)`` -> bytes per saved activation storage.

    >>> def answer(b, sizes, dtype, activation):
    ...     item = torch.empty((), dtype=dtype).element_size()
    ...     per = 2 if activation == "gelu" else 1
    ...     return [b * sizes[0] * item] + [b * n * item for n in sizes[1:-1] for _ in range(per)] + [b * sizes[-1] * item]
    >>> check_saved_activation_bytes(answer)
    ✓ saved_activation_bytes matches the measured saved storages of 6 MLPs (ReLU, tanh, GELU), storage by storage
    """
    for batch, sizes, dtype, activation in _ACTIVATION_CASES:
        label = f"batch_size={batch}, sizes={sizes}, dtype={dtype}, activation={activation!r}"
        got = call_learner(
            saved_activation_bytes, (batch, list(sizes), dtype, activation), "saved_activation_bytes", label
        )
        got = _as_int_list(got, label)
        truth = measured_activation_storages(batch, sizes, dtype, activation)
        if got == truth:
            continue
        hint = next((h for h, f in ACTIVATION_MISTAKES if f(batch, sizes, dtype, activation) == got), None)
        first = next((i for i, (g, t) in enumerate(zip(got, truth)) if g != t), min(len(got), len(truth)))
        message = (
            f"Wrong for {label}: you listed {got} (total {sum(got)} B), but a saved_tensors_hooks "
            f"measurement of this model finds {truth} (total {sum(truth)} B); the first difference is at "
            f"position {first}."
        )
        if sum(got) == sum(truth):
            message += " The totals agree, the storages do not."
        raise ExerciseError(
            message
            + (
                f"\nHint: {hint}"
                if hint
                else "\nHint: go layer by layer: what does Linear's backward need, what does "
                "the activation's derivative need, what does pow need? Then count a "
                "tensor that two layers save once."
            )
        )
    passed(
        f"saved_activation_bytes matches the measured saved storages of {len(_ACTIVATION_CASES)} MLPs "
        "(ReLU, tanh, GELU), storage by storage"
    )


# --- Exercise 2: in place wherever backward allows it -----------------------------------------

OPS = {
    "exp": torch.exp,
    "sin": torch.sin,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "relu": torch.relu,
    "log": torch.log,
    "sqrt": torch.sqrt,
    "square": lambda a: a**2,
    "add_one": lambda a: a + 1,
    "times_three": lambda a: a * 3,
    "softmax": lambda a: a.softmax(-1),
    "abs": torch.abs,
    "reciprocal": torch.reciprocal,
}

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


def chain(h: torch.Tensor) -> torch.Tensor:
    """The chain of Exercise 2, all out of place: sin, ×3, exp, +1, tanh, /2, square, −0.5."""
    return ((((h.sin() * 3).exp() + 1).tanh() / 2) ** 2) - 0.5


def inplace_saves_memory() -> dict[str, bool]:
    """Step k can overwrite its input and save an allocation iff it does not save its input (else autograd
    clones the input first) and step k−1 did not save its output (else backward raises)."""
    allowed, previous = {}, "nothing"
    for name, _, saves in CHAIN:
        allowed[name] = saves != "input" and previous != "output"
        previous = saves
    return allowed


_NO_ALLOCATION = {"detach", "alias", "view", "_unsafe_view"}


class _OpTrace(TorchDispatchMode):
    """Records every aten op run inside it: in-place ones (``mul_``) and the ones that allocate a new tensor."""

    def __init__(self):
        super().__init__()
        self.in_place: list[str] = []
        self.allocating: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name.endswith("_") and not name.startswith("_"):
            self.in_place.append(name[:-1])
        elif name not in _NO_ALLOCATION:
            self.allocating.append(name)
        return func(*args, **(kwargs or {}))


def _breaks_backward(name: str) -> str:
    index = [n for n, _, _ in CHAIN].index(name)
    previous = CHAIN[index - 1][0]
    return f"the step before, `{previous}`, saved its output for backward, and `{name}_` overwrites exactly that tensor"


def check_inplace_chain(chain_inplace) -> None:
    """Check ``chain_inplace(h)``: the value and gradient of :func:`chain` with the fewest new tensors, h untouched.

    >>> def answer(h):
    ...     h = h.sin()
    ...     h.mul_(3)
    ...     h.exp_()
    ...     h = h + 1
    ...     h.tanh_()
    ...     h = h / 2
    ...     h = h ** 2
    ...     return h.sub_(0.5)
    >>> check_inplace_chain(answer)
    ✓ chain_inplace allocates 4 new tensors for 8 steps (mul, exp, tanh, sub run in place), the fewest backward allows
    """
    saves_memory = inplace_saves_memory()
    fewest = sum(not ok for ok in saves_memory.values())
    gen = torch.Generator().manual_seed(40)
    for shape in ((5,), (3, 4)):
        label = f"h of shape {shape}"
        x = torch.randn(shape, generator=gen, dtype=torch.float64, requires_grad=True)
        h = x * 1
        h_before, h_version = h.detach().clone(), version(h)
        with _OpTrace() as trace:
            out = call_learner(chain_inplace, (h,), "chain_inplace", label)
        if not isinstance(out, torch.Tensor):
            raise ExerciseError(f"`chain_inplace` should return the final tensor, got {type(out).__name__}.")
        if version(h) != h_version or not torch.equal(h.detach(), h_before):
            raise ExerciseError(
                f"`chain_inplace` changed its argument h in place for {label}; the caller may still need it.\n"
                "Hint: start with an out-of-place step. (An in-place sin_ would not save memory anyway: sin saves "
                "its input, so autograd clones the input before overwriting it.)"
            )
        expected = chain(x.detach())
        if out.shape != expected.shape or not torch.allclose(out.detach(), expected):
            raise ExerciseError(
                f"`chain_inplace` computes a different value than the chain for {label}.\n"
                "Hint: keep every step of the chain: sin, ×3, exp, +1, tanh, /2, square, −0.5."
            )
        try:
            (grad,) = torch.autograd.grad(out.sum(), x)
        except RuntimeError as exc:
            culprit = next(
                (
                    n
                    for n in trace.in_place
                    if n in saves_memory
                    and [c for c, _, _ in CHAIN].index(n) > 0
                    and CHAIN[[c for c, _, _ in CHAIN].index(n) - 1][2] == "output"
                ),
                None,
            )
            raise ExerciseError(
                f"backward through `chain_inplace` fails for {label}: {str(exc).split(' Hint:')[0][:160]}...\n"
                + (
                    f"Hint: {_breaks_backward(culprit)}."
                    if culprit
                    else "Hint: an in-place op overwrote a tensor that an earlier step saved for backward."
                )
            ) from None
        (reference,) = torch.autograd.grad(chain(x).sum(), x)
        if not torch.allclose(grad, reference):
            raise ExerciseError(
                f"`chain_inplace` gives a wrong gradient for {label}, with no error.\nHint: something changed a "
                "saved tensor where autograd could not see it (`.data`, or a detach()ed alias): backward used the "
                "new values. Leave that step out of place."
            )
        missed = [n for n, ok in saves_memory.items() if ok and n not in trace.in_place]
        if missed:
            index = [n for n, _, _ in CHAIN].index(missed[0])
            name, step, saves = CHAIN[index]
            previous = CHAIN[index - 1][2] if index else "nothing"
            raise ExerciseError(
                f"`chain_inplace` is right, but step `{step}` could overwrite its input and does not "
                f"({len(trace.allocating)} new tensors where {fewest} are enough).\nHint: `{name}` saves "
                f"{'its output' if saves == 'output' else 'nothing'} for its backward, and the step before saved "
                f"{'its input, not its output' if previous == 'input' else 'nothing'}: nothing needs the tensor "
                f"`{name}_` would overwrite. In-place versions: mul_, exp_, add_, tanh_, div_, pow_, sub_."
            )
        if len(trace.allocating) > fewest:
            raise ExerciseError(
                f"`chain_inplace` allocates {len(trace.allocating)} new tensors for {label} ({', '.join(trace.allocating)}); "
                f"{fewest} are enough.\nHint: no copies (clone, contiguous, x * 1) are needed beyond the steps "
                "that cannot run in place."
            )
    in_place = [n for n, ok in saves_memory.items() if ok]
    passed(
        f"chain_inplace allocates {fewest} new tensors for {len(CHAIN)} steps ({', '.join(in_place)} run in place), "
        "the fewest backward allows"
    )


# --- Exercise 3: an exponential moving average of the parameters ------------------------------


def _model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2))


def check_ema(init_ema, ema_update_) -> None:
    """Check ``init_ema(model)`` -> {name: copy} and ``ema_update_(ema, model, decay)`` (in place).

    >>> def init_ema(model):
    ...     return {name: p.detach().clone() for name, p in model.named_parameters()}
    >>> def ema_update_(ema, model, decay):
    ...     with torch.no_grad():
    ...         for name, p in model.named_parameters():
    ...             ema[name].mul_(decay).add_(p, alpha=1 - decay)
    >>> check_ema(init_ema, ema_update_)
    ✓ init_ema makes independent snapshots; ema_update_ updates them in place, visibly to autograd, leaving the model alone
    """
    for seed, decay in ((0, 0.9), (1, 0.99)):
        model = _model(seed)
        label = f"a 2-layer model (seed {seed}), decay {decay}"
        ema = call_learner(init_ema, (model,), "init_ema", label)
        names = [n for n, _ in model.named_parameters()]
        if not isinstance(ema, dict) or sorted(ema) != sorted(names):
            raise ExerciseError(
                f"`init_ema` should return a dict keyed by parameter name ({names}), got "
                f"{type(ema).__name__}{' with keys ' + str(sorted(ema)) if isinstance(ema, dict) else ''}."
            )
        for name, p in model.named_parameters():
            e = ema[name]
            if not isinstance(e, torch.Tensor) or not torch.equal(e.detach(), p.detach()):
                raise ExerciseError(f"`init_ema` should start each average at the parameter's value ({name}).")
            if e.untyped_storage().data_ptr() == p.untyped_storage().data_ptr():
                raise ExerciseError(
                    f"`init_ema`'s copy of {name} shares memory with the parameter, so every optimizer step "
                    "changes the average too.\nHint: `detach()` shares memory (and the version counter); a "
                    "snapshot is `detach().clone()`."
                )
            if e.requires_grad or e.grad_fn is not None:
                raise ExerciseError(
                    f"`init_ema`'s copy of {name} is part of autograd (requires_grad={e.requires_grad}, "
                    f"grad_fn={type(e.grad_fn).__name__ if e.grad_fn else None}).\nHint: `p.clone()` stays in the "
                    "graph; the average is plain data: `p.detach().clone()`."
                )
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        model(torch.ones(5, 4)).pow(2).mean().backward()
        optimizer.step()
        objects = {name: ema[name] for name in names}
        before = {name: ema[name].detach().clone() for name in names}
        versions = {name: version(ema[name]) for name in names}
        param_versions = {name: version(p) for name, p in model.named_parameters()}
        params_before = {name: p.detach().clone() for name, p in model.named_parameters()}
        result = call_learner(ema_update_, (ema, model, decay), "ema_update_", label)
        for name, p in model.named_parameters():
            if not torch.equal(p.detach(), params_before[name]) or version(p) != param_versions[name]:
                raise ExerciseError(
                    f"`ema_update_` changed the model's parameter {name}; only the average should change."
                )
            expected = decay * before[name] + (1 - decay) * params_before[name]
            e = ema[name]
            if e is not objects[name]:
                hint = (
                    "you put a new tensor into the dict; whoever holds the average (an evaluation model, "
                    "a checkpoint) still has the old one. Update the tensor in place: mul_, add_, lerp_."
                )
                raise ExerciseError(f"`ema_update_` replaced ema[{name!r}] instead of updating it.\nHint: {hint}")
            if not torch.allclose(e.detach(), expected):
                swapped = (1 - decay) * before[name] + decay * params_before[name]
                hint = (
                    "decay weighs the old average: new = decay · ema + (1 − decay) · param."
                    if torch.allclose(e.detach(), swapped)
                    else "new = decay · ema + (1 − decay) · param, for every parameter."
                )
                raise ExerciseError(f"`ema_update_` computed wrong values for {name} ({label}).\nHint: {hint}")
            if version(e) == versions[name]:
                raise ExerciseError(
                    f"ema[{name!r}] changed but its version counter did not move.\nHint: a change through "
                    "`.data` is invisible to autograd: a graph that used the average would silently see new "
                    "values. Use `with torch.no_grad():` and in-place ops on the tensor itself."
                )
            if e.requires_grad or e.grad_fn is not None:
                raise ExerciseError(
                    f"ema[{name!r}] became part of a graph after `ema_update_`.\nHint: update "
                    "under `with torch.no_grad():`."
                )
        del result
    passed(
        "init_ema makes independent snapshots; ema_update_ updates them in place, visibly to autograd, "
        "leaving the model alone"
    )
