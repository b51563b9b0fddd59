"""Every private PyTorch attribute or module the package relies on, in one place.

The course looks inside autograd further than PyTorch's public API reaches: the
tensors a backward node saved, a tensor's version counter, the engine that runs
backward. Each such read is one small named function or constant here, with why it
is needed and why no public alternative does the job. ``tests/test_torch_internals.py``
names every one and checks it still exists and behaves as assumed, so a PyTorch
upgrade that moves one fails loudly in that one test, not deep inside a chapter.
The package supports torch 2.11 and later: where an older torch lacks something,
the function here detects it and falls back, and its test says which versions offer it.

>>> import torch
>>> x = torch.ones(2, requires_grad=True)
>>> y = x.exp()
>>> saved_names(y.grad_fn), version(x)
(('result',), 0)
"""

from __future__ import annotations

from typing import Any

import torch
import torch.autograd.graph
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: F401 - re-exported
from torch.utils._pytree import tree_leaves  # noqa: F401 - re-exported

__all__ = [
    "RAW_SAVED_PREFIX",
    "UNPACKED_SAVED_PREFIX",
    "saved_names",
    "raw_saved",
    "unpack_saved",
    "custom_raw_saved",
    "saved_data",
    "saved_unpack_hook",
    "unpack_raw",
    "HAS_SAVED_UNPACK",
    "version",
    "sequence_nr",
    "input_metadata",
    "TorchDispatchMode",
    "TorchFunctionMode",
    "tree_leaves",
    "ATEN_TO_COPY",
    "functorch_transform_entry_points",
    "engine_patch_points",
    "execution_engine",
    "SCALER_GROWTH_TRACKER_KEY",
    "SCHEDULER_LAST_LR_KEY",
]

# --------------------------------------------------------------------------- saved tensors
# PyTorch has no public way to list what a backward node saved. ``saved_tensors_hooks``
# sees tensors as they are packed, but not which node or attribute holds them, nor
# whether backward freed them since; the graph view and GraphStats need exactly that.

RAW_SAVED_PREFIX = "_raw_saved_"  # grad_fn._raw_saved_<name>: a SavedTensor (or a list of them)
UNPACKED_SAVED_PREFIX = "_saved_"  # grad_fn._saved_<name>: the same, unpacked as backward unpacks it
_CUSTOM_RAW = "_raw_saved_tensors"  # a custom autograd.Function's ctx.save_for_backward tensors
_names_by_type: dict[type, tuple[str, ...]] = {}


def saved_names(fn: Any) -> tuple[str, ...]:
    """The names of the tensors a built-in backward node saved (``('self', 'other')`` for a MulBackward0).

    Every node of one type has the same names, and ``dir()`` is slow: cached per type.
    A custom ``autograd.Function``'s tensors are not named: see :func:`custom_raw_saved`.
    """
    kind = type(fn)
    names = _names_by_type.get(kind)
    if names is None:
        prefix = RAW_SAVED_PREFIX
        names = tuple(a[len(prefix) :] for a in dir(fn) if a.startswith(prefix) and a != _CUSTOM_RAW)
        _names_by_type[kind] = names
    return names


def raw_saved(fn: Any, name: str) -> Any:
    """``fn``'s saved ``name`` as a ``SavedTensor`` (or a list of them), without unpacking it.

    It is how we reach a saved tensor that changed in place or that backward freed
    (unpacking raises in both cases); only a *list* of saved tensors raises once freed.
    """
    return getattr(fn, RAW_SAVED_PREFIX + name)


def unpack_saved(fn: Any, name: str) -> Any:
    """``fn``'s saved ``name`` unpacked exactly as backward unpacks it (same checks, same errors).

    Unlike ``SavedTensor.unpack()``, the node's own attribute knows which node saved an
    output, so a saved output (``ExpBackward0.result``) unpacks too.
    """
    return getattr(fn, UNPACKED_SAVED_PREFIX + name)


def custom_raw_saved(fn: Any) -> tuple:
    """The ``SavedTensor`` objects behind a custom Function's ``ctx.saved_tensors`` (raises once freed).

    ``ctx.saved_tensors`` unpacks them all at once and raises for all of them together;
    this reaches them one by one.
    """
    return getattr(fn, _CUSTOM_RAW)


def saved_data(saved: Any) -> Any:
    """The tensor a ``SavedTensor`` holds as it is now, without the version check (None once freed)."""
    return saved.data


def saved_unpack_hook(saved: Any) -> Any:
    """The ``saved_tensors_hooks`` unpack hook of a ``SavedTensor``, or None when it was saved plainly."""
    return saved.unpack_hook


# What each torch version offers (the floor is 2.11, widgets/pyproject.toml): SavedTensor.unpack is in
# 2.13 and not in 2.11. Without it, a saved tensor reached alone (an entry of a saved list: indexing's
# indices, cat's inputs) is read as stored, without backward's version check.
HAS_SAVED_UNPACK = hasattr(torch._C._autograd.SavedTensor, "unpack")


def unpack_raw(saved: Any) -> Any:
    """Unpack a ``SavedTensor`` with backward's checks (cannot unpack a saved output: use :func:`unpack_saved`).

    Where torch has no ``SavedTensor.unpack`` (2.11): the tensor as stored, and the error backward
    gives when it was freed; a stale entry is not detected there.
    """
    if HAS_SAVED_UNPACK:
        return saved.unpack()
    data = saved.data
    if data is None:
        raise RuntimeError(
            "Trying to backward through the graph a second time (or directly access saved tensors after they "
            "have already been freed)."
        )
    return data


# --------------------------------------------------------------------------- nodes and tensors


def version(tensor: torch.Tensor) -> int:
    """The tensor's version counter: +1 on every in-place change of its memory.

    Autograd compares it with the version it recorded when a tensor was saved; there
    is no public getter. ``torch.equal`` against a copy misses an in-place op that
    writes the same values, which is why checkers read the counter.
    """
    return tensor._version


def sequence_nr(fn: Any) -> int:
    """The creation number of a backward node: the engine runs ready nodes highest first.

    No public API exposes the order backward will run nodes in; the graph's stable ids follow it.
    """
    return fn._sequence_nr()


def input_metadata(fn: Any) -> tuple:
    """One entry per gradient a node receives (per output of its forward op), each with ``.shape`` and ``.dtype``.

    The only way to know how many gradients a node takes and what shape each must have
    (the engine sums a broadcast gradient down to it); public ``next_functions`` describes
    the node's inputs, not its outputs.
    """
    return fn._input_metadata


# --------------------------------------------------------------------------- modes and pytrees
# TorchDispatchMode (private module torch.utils._python_dispatch) sees every aten op with
# its real tensors: the only way to measure a learner's peak allocation or op count in
# pure Python. tree_leaves (torch.utils._pytree) flattens an op's nested arguments.
# TorchFunctionMode is importable from torch.overrides but not in its documented API.
TorchFunctionMode = torch.overrides.TorchFunctionMode

# The aten op every dtype conversion (``.to(dtype)``, ``.half()``, autocast's casts) runs:
# counting it under a TorchDispatchMode counts the casts autocast inserts. The op has no
# public name (``aten.to`` is a composite that dispatches to it).
ATEN_TO_COPY = torch.ops.aten._to_copy.default


# --------------------------------------------------------------------------- entry points the checkers switch off


def functorch_transform_entry_points() -> tuple[Any, tuple[str, str]]:
    """The module and the two context managers every ``torch.func`` transform enters.

    ``torch.func.grad``, ``vjp``, ``jacrev``, ``hessian`` enter ``grad_increment_nesting``;
    ``jvp``, ``jacfwd`` enter ``jvp_increment_nesting``. Replacing these two catches all
    of them (also a transform imported under another name), which patching the public
    names cannot.
    """
    from torch._functorch import eager_transforms

    return eager_transforms, ("grad_increment_nesting", "jvp_increment_nesting")


def engine_patch_points() -> list[tuple[Any, str]]:
    """Where ``backward()`` and ``autograd.grad`` hand over to the C++ engine: ``(owner, attribute)`` pairs.

    ``torch.autograd._engine_run_backward`` (also imported into ``torch.autograd.graph``)
    and ``Variable._execution_engine``. Replacing them switches the engine off even for a
    ``backward`` the learner imported earlier under another name. Pairs missing on the
    installed torch are left out (the test says which).
    """
    points = [
        (torch.autograd, "_engine_run_backward"),
        (torch.autograd.graph, "_engine_run_backward"),
        (torch.autograd.variable.Variable, "_execution_engine"),
    ]
    return [(owner, attr) for owner, attr in points if hasattr(owner, attr)]


def execution_engine() -> Any:
    """The C++ autograd engine object (``Variable._execution_engine``), to delegate to while it is replaced."""
    return torch.autograd.variable.Variable._execution_engine


# --------------------------------------------------------------------------- state_dict keys
# Keys of public state_dicts that PyTorch names privately; shown in chapter 06's checkpoint table.
SCALER_GROWTH_TRACKER_KEY = "_growth_tracker"  # GradScaler: steps since the scale last grew
SCHEDULER_LAST_LR_KEY = "_last_lr"  # LRScheduler: the learning rates of the last step


# The doctor watches which modules change behaviour with train()/eval(): the base classes of
# Dropout and BatchNorm are private, and no public tuple of "mode-dependent modules" exists.
MODE_MODULES = (torch.nn.modules.dropout._DropoutNd, torch.nn.modules.batchnorm._BatchNorm)

# torch.nn.utils.clip_grad's private helper behind clip_grad_norm_ (the doctor wraps every
# entry point a learner's clip can reach, this one too).
CLIP_WITH_NORM_PRIVATE = "_clip_grads_with_norm_"


# --------------------------------------------------------------------------- GradScaler
# The doctor asks "are these gradients still multiplied by the scale?" when a clip runs. GradScaler
# answers it only privately: ``get_scale()`` returns a number even before the first ``scale()``,
# and the per-optimizer stage (READY / UNSCALED / STEPPED) of the current iteration has no getter.


def scaler_started(scaler: Any) -> bool:
    """Whether ``scaler.scale(...)`` has run at least once (before it, no gradient can be scaled)."""
    return getattr(scaler, "_scale", None) is not None


def scaler_stage(scaler: Any, optimizer: Any) -> str:
    """``optimizer``'s stage in ``scaler``'s current iteration: ``"READY"`` (its gradients are still
    scaled), ``"UNSCALED"`` (after ``unscale_``) or ``"STEPPED"``; reading adds no entry for it."""
    state = scaler._per_optimizer_states.get(id(optimizer))
    stage = state.get("stage") if state else None
    return getattr(stage, "name", "READY")


__all__ += ["scaler_started", "scaler_stage"]


# --------------------------------------------------------------------------- torch.compile (chapter 11)
# Chapter 11 reads what torch.compile records. Everything else it uses is public (``torch.compile``,
# ``torch.compiler.reset``, ``functorch.compile``'s partitioners and ``aot_module_simplified``, the
# graphs' ``OpOverload.is_view``); these three are not.


def explain(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Dynamo's report on ``fn(*args)``: ``graph_count``, ``graph_break_count``, ``break_reasons``.

    Each break reason has ``.reason`` (text, first line the cause) and ``.user_stack`` (frames with
    ``.filename``, ``.lineno``, ``.line``). ``torch._dynamo.explain`` is the only API that lists the
    breaks as data (``TORCH_LOGS=graph_breaks`` prints them to a log). It runs ``fn`` once.
    """
    import torch._dynamo

    return torch._dynamo.explain(fn)(*args, **kwargs)


def compiled_autograd(compiler: Any) -> Any:
    """A context manager under which ``backward()`` is traced and compiled by ``compiler`` (compiled autograd).

    ``torch._dynamo.compiled_autograd._enable`` is what ``torch._dynamo.config.compiled_autograd = True``
    turns on for a ``backward()`` inside ``torch.compile``; the context manager scopes it to one block
    and hands the traced backward graph to a compiler of our choice (a recording one).
    """
    from torch._dynamo import compiled_autograd as ca

    return ca._enable(compiler)


def inductor_decompositions() -> dict:
    """The decomposition table inductor hands AOTAutograd (``torch._inductor.decomposition.select_decomp_table``).

    Tracing with it gives the joint graph inductor partitions (GELU as erf and multiplications, ...),
    without compiling any kernel; no public API exposes the table.
    """
    from torch._inductor.decomposition import select_decomp_table

    return select_decomp_table()


def attention_kernels() -> tuple:
    """The aten ops ``F.scaled_dot_product_attention`` dispatches to (CPU flash, CUDA flash, memory-efficient, cuDNN).

    A selective-checkpoint policy sees these, not the public function; their names start with an
    underscore. Kernels missing on the installed torch are left out.
    """
    names = (
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
    )
    return tuple(getattr(torch.ops.aten, n).default for n in names if hasattr(torch.ops.aten, n))


__all__ += ["explain", "inductor_decompositions", "attention_kernels"]
