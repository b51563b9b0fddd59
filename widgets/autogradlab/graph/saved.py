"""Read the tensors a backward node saved, and tell whether each is ok, stale or freed.

PyTorch keeps them as ``SavedTensor`` objects (a list of them for ops like indexing),
reached through :mod:`autogradlab.torch_internals` (the one module that reads private
torch attributes). Unpacking one is what backward itself does: it raises when the
tensor was freed by backward or changed in place since it was saved, and its message
carries both versions. Its ``data`` is the tensor without that check, which gives us
its shape and storage either way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch

from autogradlab import torch_internals as internals
from autogradlab.i18n import _
from autogradlab.tracebacks import is_kind, stale_versions


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


def inplace_op_name(grad_fn_name: str) -> str:
    """The in-place call that leaves this backward node behind: ``'AddBackward0'`` -> ``'add_'``."""
    match = re.fullmatch(r"(.+?)Backward\d*", grad_fn_name)
    if grad_fn_name == "CopySlices":
        return "an indexed assignment such as x[i] = ... (CopySlices)"
    if match is None:
        return grad_fn_name
    base = match.group(1)
    return re.sub(r"(?<!^)(?=[A-Z])", "_", base).lower() + "_"


def _stale(then: int, now: int, op: str | None = None) -> str:
    """Why a saved tensor is stale, for the learner (after the ``STALE: `` prefix the view and tests read)."""
    if op:
        return _("changed in place by {op} after it was saved (version {then} → {now}); backward will raise").format(
            op=op, then=then, now=now
        )
    return _("changed in place after it was saved (version {then} → {now}); backward will raise").format(
        then=then, now=now
    )


def _one(name: str, saved: Any, fn: Any = None) -> RawSaved | None:
    if internals.saved_unpack_hook(saved) is not None:
        # A saved_tensors_hooks pack hook decided what is stored; unpacking would run the
        # learner's unpack hook (side effects), and PyTorch skips the version check anyway.
        data = internals.saved_data(saved)
        tensor = data if isinstance(data, torch.Tensor) else None
        return RawSaved(name, tensor, "ok", note=_("packed by a saved_tensors_hooks pack hook"))
    try:
        # Reading the attribute unpacks the way backward does (and knows which node saved an output);
        # list entries are unpacked one by one so one stale entry does not hide the others.
        unpacked = internals.unpack_saved(fn, name) if fn is not None else internals.unpack_raw(saved)
    except RuntimeError as exc:
        if is_kind(exc, "freed"):
            return RawSaved(
                name, None, "freed", note=_("freed by backward (call backward(retain_graph=True) to keep it)")
            )
        versions = stale_versions(exc)
        if versions is None:
            raise
        data = internals.saved_data(saved)  # the tensor as it is now, without the version check
        now, then = versions
        op = None
        if isinstance(data, torch.Tensor) and data.grad_fn is not None:
            op = inplace_op_name(data.grad_fn.name().removeprefix("torch::autograd::"))
        note = "STALE: " + _stale(then, now, op)
        return RawSaved(name, data if isinstance(data, torch.Tensor) else None, "stale", then, now, op, note)
    if unpacked is None:  # an optional input that was not given (e.g. a LayerNorm without weight)
        return None
    return RawSaved(name, unpacked, "ok")


def saved_of(fn: Any) -> list[RawSaved]:
    """The saved tensors of one backward node ``fn``, in attribute order."""
    result: list[RawSaved] = []
    for name in internals.saved_names(fn):
        try:
            raw = internals.raw_saved(fn, name)
        except RuntimeError as exc:  # a list of saved tensors (indexing's indices) is gone once freed
            if not is_kind(exc, "freed"):
                raise
            result.append(
                RawSaved(name, None, "freed", note="freed by backward (call backward(retain_graph=True) to keep it)")
            )
            continue
        if isinstance(raw, (list, tuple)):
            result.extend(r for i, item in enumerate(raw) if (r := _one(f"{name}[{i}]", item)) is not None)
        elif (r := _one(name, raw, fn)) is not None:
            result.append(r)
    if isinstance(fn, torch.autograd.function.BackwardCFunction):
        result.extend(_custom_saved(fn))
    return result


def _custom_saved(fn: Any) -> list[RawSaved]:
    """What a custom ``autograd.Function`` kept: ``ctx.save_for_backward`` tensors and tensors set on ctx."""
    result: list[RawSaved] = []
    try:
        raw = internals.custom_raw_saved(fn)
    except RuntimeError as exc:
        if not is_kind(exc, "freed"):
            raise
        # After backward PyTorch no longer says how many there were.
        result.append(RawSaved("saved_tensors", None, "freed", note="freed by backward (all that it saved)"))
    else:
        result.extend(_custom_items(fn, raw))
    for key, value in sorted(vars(fn).items()):
        if isinstance(value, torch.Tensor):
            # ctx.x = tensor bypasses save_for_backward: never freed, never version-checked.
            result.append(
                RawSaved(
                    f"ctx.{key}",
                    value,
                    "ok",
                    note="stored on ctx directly: not freed by backward, "
                    "not checked for in-place changes (use ctx.save_for_backward)",
                )
            )
    return result


def _custom_items(fn: Any, raw: Any) -> list[RawSaved]:
    # ctx.saved_tensors unpacks them all the way backward will; only if that fails do we look
    # item by item (SavedTensor.unpack() cannot unpack a saved output without its node).
    try:
        fn.saved_tensors  # noqa: B018 (raises as backward would when one is stale)
        problem = None
    except RuntimeError as exc:
        problem = stale_versions(exc)
        if problem is None:
            raise
    items = []
    for i, item in enumerate(raw):
        data = internals.saved_data(item)
        name = f"saved_tensors[{i}]"
        if data is None:
            continue
        if internals.saved_unpack_hook(item) is not None or not isinstance(data, torch.Tensor):
            items.append(_one(name, item))
            continue
        now, then = problem or (None, None)
        if problem and internals.version(data) == now:
            note = "STALE: " + _stale(then, now)
            items.append(RawSaved(name, data, "stale", then, now, None, note))
        else:
            items.append(RawSaved(name, data, "ok"))
    return items
