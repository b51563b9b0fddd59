"""Read the tensors a backward node saved, and tell whether each is ok, stale or freed.

PyTorch exposes them as ``grad_fn._raw_saved_<name>`` (a ``SavedTensor``; a list of
them for ops like indexing) and, for a custom ``autograd.Function``, as
``grad_fn._raw_saved_tensors``. ``SavedTensor.unpack()`` is what backward itself
calls: it raises when the tensor was freed by backward or changed in place since
it was saved, and its message carries both versions. ``SavedTensor.data`` reads the
tensor without that check, which gives us its shape and storage either way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch

_RAW = "_raw_saved_"
_VERSIONS = re.compile(r"is at version (\d+); expected version (\d+)")
_FREED_TEXT = "backward through the graph a second time"
_raw_names_by_type: dict[type, tuple[tuple[str, ...], bool]] = {}


@dataclass
class RawSaved:
    """What we could learn about one saved tensor; ``tensor`` is None once freed."""

    name: str
    tensor: torch.Tensor | None
    state: str
    version_saved: int | None = None
    version_now: int | None = None
    modified_by: str | None = None
    note: str = ""


def _raw_names(fn: Any) -> tuple[tuple[str, ...], bool]:
    """The saved-attribute names of ``fn``'s type, and whether it is a custom autograd.Function."""
    # Every node of one op type has the same saved attributes, and dir() is slow: cache it per type.
    kind = type(fn)
    found = _raw_names_by_type.get(kind)
    if found is None:
        names = tuple(a[len(_RAW):] for a in dir(fn) if a.startswith(_RAW) and a != "_raw_saved_tensors")
        found = _raw_names_by_type[kind] = (names, isinstance(fn, torch.autograd.function.BackwardCFunction))
    return found


def inplace_op_name(grad_fn_name: str) -> str:
    """The in-place call that leaves this backward node behind: ``'AddBackward0'`` -> ``'add_'``."""
    match = re.fullmatch(r"(.+?)Backward\d*", grad_fn_name)
    if grad_fn_name == "CopySlices":
        return "an indexed assignment such as x[i] = ... (CopySlices)"
    if match is None:
        return grad_fn_name
    base = match.group(1)
    return re.sub(r"(?<!^)(?=[A-Z])", "_", base).lower() + "_"


def _one(name: str, saved: Any, fn: Any = None) -> RawSaved | None:
    if saved.unpack_hook is not None:
        # A saved_tensors_hooks pack hook decided what is stored; unpacking would run the
        # learner's unpack hook (side effects), and PyTorch skips the version check anyway.
        data = saved.data
        tensor = data if isinstance(data, torch.Tensor) else None
        return RawSaved(name, tensor, "ok", note="packed by a saved_tensors_hooks pack hook")
    try:
        # Reading the attribute unpacks the way backward does (and knows which node saved an output);
        # list entries are unpacked one by one so one stale entry does not hide the others.
        unpacked = getattr(fn, "_saved_" + name) if fn is not None else saved.unpack()
    except RuntimeError as exc:
        text = str(exc)
        if _FREED_TEXT in text:
            return RawSaved(name, None, "freed", note="freed by backward (call backward(retain_graph=True) to keep it)")
        versions = _VERSIONS.search(text)
        if versions is None:
            raise
        data = saved.data  # the tensor as it is now, without the version check
        now, then = int(versions.group(1)), int(versions.group(2))
        op = None
        if isinstance(data, torch.Tensor) and data.grad_fn is not None:
            op = inplace_op_name(data.grad_fn.name().removeprefix("torch::autograd::"))
        by = f" by {op}" if op else ""
        note = f"STALE: changed in place{by} after it was saved (version {then} → {now}); backward will raise"
        return RawSaved(name, data if isinstance(data, torch.Tensor) else None, "stale", then, now, op, note)
    if unpacked is None:  # an optional input that was not given (e.g. a LayerNorm without weight)
        return None
    return RawSaved(name, unpacked, "ok")


def saved_of(fn: Any) -> list[RawSaved]:
    """The saved tensors of one backward node ``fn``, in attribute order."""
    names, custom = _raw_names(fn)
    result: list[RawSaved] = []
    for name in names:
        raw = getattr(fn, _RAW + name)
        if isinstance(raw, (list, tuple)):
            result.extend(r for i, item in enumerate(raw) if (r := _one(f"{name}[{i}]", item)) is not None)
        elif (r := _one(name, raw, fn)) is not None:
            result.append(r)
    if custom:
        result.extend(_custom_saved(fn))
    return result


def _custom_saved(fn: Any) -> list[RawSaved]:
    """What a custom ``autograd.Function`` kept: ``ctx.save_for_backward`` tensors and tensors set on ctx."""
    result: list[RawSaved] = []
    try:
        raw = fn._raw_saved_tensors
    except RuntimeError as exc:
        if _FREED_TEXT not in str(exc):
            raise
        # After backward PyTorch no longer says how many there were.
        result.append(RawSaved("saved_tensors", None, "freed", note="freed by backward (all that it saved)"))
    else:
        result.extend(_custom_items(fn, raw))
    for key, value in sorted(vars(fn).items()):
        if isinstance(value, torch.Tensor):
            # ctx.x = tensor bypasses save_for_backward: never freed, never version-checked.
            result.append(RawSaved(f"ctx.{key}", value, "ok", note="stored on ctx directly: not freed by backward, "
                                   "not checked for in-place changes (use ctx.save_for_backward)"))
    return result


def _custom_items(fn: Any, raw: Any) -> list[RawSaved]:
    # ctx.saved_tensors unpacks them all the way backward will; only if that fails do we look
    # item by item (SavedTensor.unpack() cannot unpack a saved output without its node).
    try:
        fn.saved_tensors
        problem = None
    except RuntimeError as exc:
        problem = _VERSIONS.search(str(exc))
        if problem is None:
            raise
    items = []
    for i, item in enumerate(raw):
        data = item.data
        name = f"saved_tensors[{i}]"
        if data is None:
            continue
        if item.unpack_hook is not None or not isinstance(data, torch.Tensor):
            items.append(_one(name, item))
            continue
        now = int(problem.group(1)) if problem else None
        if problem and data._version == now:
            then = int(problem.group(2))
            note = f"STALE: changed in place after it was saved (version {then} → {now}); backward will raise"
            items.append(RawSaved(name, data, "stale", then, now, None, note))
        else:
            items.append(RawSaved(name, data, "ok"))
    return items
