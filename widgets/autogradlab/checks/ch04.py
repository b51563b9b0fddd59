"""Checkers for chapter 04 (saved tensors, version counters and memory).

1. ``check_saved_activation_bytes``: predict the bytes an MLP saves for backward
   (checked against a ``saved_tensors_hooks`` measurement of the real model).
2. ``check_what_gets_saved``: which tensor each op saves, hence which in-place change
   breaks backward (checked by running both in-place changes for real).
3. ``check_scale_parameter``: change a parameter in place the way optimizers do
   (``torch.no_grad()``, version counter moves), not through ``.data``.
"""

from __future__ import annotations

import torch
from torch import nn

from autogradlab.checks.core import ExerciseError, call_learner, passed

# --- Exercise 1: the saved-activation bytes of an MLP -----------------------------------------


def make_mlp(sizes: list[int], dtype: torch.dtype = torch.float32, seed: int = 0) -> nn.Sequential:
    """Linear(sizes[0], sizes[1]) -> ReLU -> ... -> Linear(sizes[-2], sizes[-1]) (no ReLU after the last)."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(n_in, n_out, dtype=dtype))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def mlp_loss(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The loss of the exercise: mean of the squared outputs."""
    return model(x).pow(2).mean()


def measure_saved_bytes(build, exclude: set[int] = frozenset()) -> tuple[torch.Tensor, int]:
    """Run ``build()`` under ``saved_tensors_hooks``; return its result and the bytes saved for backward.

    Each storage counts once, with its full size; storages whose ``data_ptr`` is in
    ``exclude`` (parameters) are left out.
    """
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in exclude:
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        result = build()
    return result, sum(storages.values())


def measured_activation_bytes(batch_size: int, sizes: list[int], dtype: torch.dtype) -> int:
    """Bytes the MLP of ``sizes`` saves for backward on a batch, parameters left out (measured)."""
    model = make_mlp(sizes, dtype)
    x = torch.randn(batch_size, sizes[0], dtype=dtype)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    _, saved = measure_saved_bytes(lambda: mlp_loss(model, x), exclude=params)
    return saved


def _item(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _param_bytes(sizes, dtype) -> int:
    return sum((a * b + b) * _item(dtype) for a, b in zip(sizes, sizes[1:]))


ACTIVATION_MISTAKES = {
    "ReLU's output and the next Linear's input are the same tensor (one storage): count it once, not twice.":
        lambda b, s, d: b * (sum(s) + sum(s[1:-1])) * _item(d),
    "the first Linear saves its input x too (the weight gradient is xᵀ·g): count the input batch.":
        lambda b, s, d: b * (sum(s) - s[0]) * _item(d),
    "the loss out.pow(2) saves its input `out` (the derivative of out² is 2·out): count the final output.":
        lambda b, s, d: b * (sum(s) - s[-1]) * _item(d),
    "count bytes, not elements: multiply by the element size (x.element_size(): 4 for float32, 8 for "
    "float64, 2 for bfloat16).":
        lambda b, s, d: b * sum(s),
    "the element size depends on the dtype: float64 takes 8 bytes, bfloat16 2 (x.element_size()).":
        lambda b, s, d: b * sum(s) * 4,
    "parameters are saved too (addmm keeps Wᵀ), but they exist anyway: leave them out of activation memory.":
        lambda b, s, d: b * sum(s) * _item(d) + _param_bytes(s, d),
    "activations are per example: multiply by the batch size.":
        lambda b, s, d: sum(s) * _item(d),
}

_ACTIVATION_CASES = [
    (3, [5, 7, 6, 2], torch.float64),
    (4, [6, 9, 3], torch.float32),
    (1, [4, 6, 6, 3], torch.float32),
    (16, [8, 4], torch.float32),
    (2, [3, 9, 5, 1], torch.bfloat16),
]


def check_saved_activation_bytes(saved_activation_bytes) -> None:
    """Check ``saved_activation_bytes(batch_size, sizes, dtype)`` against a measurement of the real MLP.

    >>> check_saved_activation_bytes(lambda b, sizes, dtype: b * sum(sizes) * torch.empty((), dtype=dtype).element_size())
    ✓ saved_activation_bytes matches the measured saved tensors of 5 MLPs
    """
    for batch, sizes, dtype in _ACTIVATION_CASES:
        label = f"batch_size={batch}, sizes={sizes}, dtype={dtype}"
        got = call_learner(saved_activation_bytes, (batch, list(sizes), dtype), "saved_activation_bytes", label)
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if isinstance(got, float) and got.is_integer():
            got = int(got)
        if isinstance(got, bool) or not isinstance(got, int):
            raise ExerciseError(f"`saved_activation_bytes` should return a number of bytes (an int), "
                                f"got {type(got).__name__} for {label}.")
        truth = measured_activation_bytes(batch, sizes, dtype)
        if got == truth:
            continue
        hint = next((h for h, f in ACTIVATION_MISTAKES.items() if f(batch, sizes, dtype) == got), None)
        message = (f"Wrong for {label}: you computed {got} bytes, but the saved_tensors_hooks measurement of this "
                   f"model finds {truth} bytes of saved activations (parameters left out).")
        raise ExerciseError(message + (f"\nHint: {hint}" if hint else
                                       "\nHint: list what each layer saves: Linear its input, ReLU its output, "
                                       "pow its input; then count shared tensors once."))
    passed(f"saved_activation_bytes matches the measured saved tensors of {len(_ACTIVATION_CASES)} MLPs")


# --- Exercise 2: which tensor does each op save? ----------------------------------------------

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

WHY = {
    "exp": "d/dx eˣ = eˣ is the output itself",
    "sin": "d/dx sin x = cos x needs the input x",
    "tanh": "d/dx tanh x = 1 − tanh²x = 1 − y² needs only the output y",
    "sigmoid": "d/dx σ(x) = σ(x)(1 − σ(x)) = y(1 − y) needs only the output y",
    "relu": "the mask (y > 0) can be read from the output y",
    "log": "d/dx log x = 1/x needs the input x",
    "sqrt": "d/dx √x = 1/(2√x) = 1/(2y) needs only the output y",
    "square": "d/dx x² = 2x needs the input x",
    "add_one": "d/dx (x + 1) = 1: there is nothing to remember",
    "times_three": "d/dx 3x = 3: only the constant 3, neither x nor the output",
    "softmax": "the softmax backward y ⊙ (g − ⟨g, y⟩) needs the output y",
    "abs": "d/dx |x| = sign(x) needs the input x",
    "reciprocal": "d/dx 1/x = −1/x² = −y² needs only the output y",
}

ANSWERS = ("input", "output", "nothing")


def _breaks(op: str, changed: str) -> bool:
    """Run f, change its input or output in place, and see whether backward raises."""
    x = torch.rand(4, dtype=torch.float64, requires_grad=True)
    a = x * 1 + 0.5  # a non-leaf: in-place changes are allowed on it
    y = OPS[op](a)
    (a if changed == "input" else y).mul_(2)
    try:
        y.sum().backward()
    except RuntimeError:
        return True
    return False


def check_what_gets_saved(what_gets_saved) -> None:
    """Check ``what_gets_saved(op)`` -> "input", "output" or "nothing" for every op in ``OPS``.

    >>> saves = {"exp": "output", "sin": "input", "tanh": "output", "sigmoid": "output", "relu": "output",
    ...          "log": "input", "sqrt": "output", "square": "input", "add_one": "nothing",
    ...          "times_three": "nothing", "softmax": "output", "abs": "input", "reciprocal": "output"}
    >>> check_what_gets_saved(saves.get)
    ✓ what_gets_saved is right for all 13 ops: you can predict which in-place change breaks backward
    """
    for op in OPS:
        got = call_learner(what_gets_saved, (op,), "what_gets_saved", f"op={op!r}")
        if got not in ANSWERS:
            raise ExerciseError(f"`what_gets_saved({op!r})` returned {got!r}; answer with one of "
                                f"{', '.join(map(repr, ANSWERS))}.")
        breaks_input, breaks_output = _breaks(op, "input"), _breaks(op, "output")
        truth = "input" if breaks_input else "output" if breaks_output else "nothing"
        if got == truth:
            continue
        consequence = {
            "input": "so changing the input in place breaks backward, and changing the output does not",
            "output": "so changing the output in place breaks backward, and changing the input does not",
            "nothing": "so neither in-place change breaks backward",
        }[truth]
        raise ExerciseError(f"Wrong for {op!r}: you said it saves its {got}, but it saves "
                            f"{'its ' + truth if truth != 'nothing' else 'nothing from x or y'}.\n"
                            f"Hint: {WHY[op]}, {consequence} (checked by running both).")
    passed(f"what_gets_saved is right for all {len(OPS)} ops: you can predict which in-place change breaks backward")


# --- Exercise 3: change a parameter in place, the way optimizers do ---------------------------


def check_scale_parameter(scale_parameter_) -> None:
    """Check ``scale_parameter_(param, factor)``: multiplies a leaf parameter in place, visibly to autograd.

    >>> def scale(param, factor):
    ...     with torch.no_grad():
    ...         param.mul_(factor)
    >>> check_scale_parameter(scale)
    ✓ scale_parameter_ changes the parameter in place, stays a leaf, and autograd sees the change
    """
    gen = torch.Generator().manual_seed(4)
    cases = [((3, 4), 0.5, torch.float64), ((5,), -2.0, torch.float32), ((), 3.0, torch.float64)]
    for shape, factor, dtype in cases:
        label = f"a parameter of shape {shape} ({dtype}), factor {factor}"
        param = nn.Parameter(torch.randn(shape, generator=gen, dtype=dtype))
        before = param.detach().clone()
        saved_by_graph = (param**2).sum()  # pow saves param: the graph depends on its current value
        version = param._version
        try:
            result = scale_parameter_(param, factor)
        except RuntimeError as exc:
            if "leaf Variable that requires grad" in str(exc):
                raise ExerciseError(
                    f"`scale_parameter_` raised for {label}: {str(exc).splitlines()[0]}\nHint: autograd refuses "
                    "to record an in-place change of a leaf that requires grad. Do it with recording switched "
                    "off: `with torch.no_grad(): param.mul_(factor)` (what optimizer.step() does)."
                ) from None
            result = call_learner(scale_parameter_, (param, factor), "scale_parameter_", label)
        except Exception:  # the learner's error, with the line that raised it
            result = call_learner(scale_parameter_, (param, factor), "scale_parameter_", label)
        expected = before * factor
        if not torch.allclose(param.detach(), expected):
            if torch.equal(param.detach(), before):
                hint = ("the parameter did not change. `param = param * factor` only rebinds a local name; "
                        "the caller's tensor must change in place (mul_, copy_).")
                if isinstance(result, torch.Tensor) and torch.allclose(result.detach(), expected):
                    hint = ("you returned a new tensor, but the parameter itself did not change: the optimizer and "
                            "the model still hold the old tensor. Change it in place (mul_, copy_).")
                raise ExerciseError(f"Wrong for {label}: {hint}")
            raise ExerciseError(f"Wrong values for {label}: expected every element multiplied by {factor}.")
        if not (param.is_leaf and param.requires_grad and param.grad_fn is None):
            raise ExerciseError(
                f"After `scale_parameter_` on {label} the parameter is no longer a trainable leaf "
                f"(is_leaf={param.is_leaf}, requires_grad={param.requires_grad}).\nHint: keep the same tensor "
                "and switch recording off with torch.no_grad() instead of changing requires_grad."
            )
        if param._version == version:
            raise ExerciseError(
                f"For {label} the values changed but the version counter did not move ({version} → "
                f"{param._version}).\nHint: `.data` gives a tensor with its own version counter, so autograd "
                "cannot see the change: a graph that saved this parameter would now compute wrong gradients "
                "without any error. Use `with torch.no_grad(): param.mul_(factor)`."
            )
        try:
            saved_by_graph.backward()
        except RuntimeError:
            pass  # right: autograd noticed that a saved tensor changed
        else:
            raise ExerciseError(f"For {label}, a graph that saved the parameter did not notice the change.")
    passed("scale_parameter_ changes the parameter in place, stays a leaf, and autograd sees the change")
