"""Watch a training step without changing it: hooks, snapshots and per-step records.

:class:`Observer` is a context manager. While it is open it has installed

- a forward hook on every module (which ran, in which mode, with grad enabled or not),
- a gradient hook on every tracked parameter (did a gradient arrive, finite, nonzero,
  and was an old gradient from before an ``optimizer.step()`` still in ``.grad``),
- step pre/post hooks on each optimizer (values, versions and gradients around the update),
- wrappers around ``torch.nn.utils.clip_grad_*`` (clipping while the scaler's gradients
  are still scaled) and around the GradScaler's ``step`` (skipped steps),
- a wrapper around ``torch.autograd.backward`` (which ``Tensor.backward`` calls): the
  leaves of every graph the step backpropagates, also when it returns ``loss.item()``.

It never calls ``zero_grad``/``step`` and only reads tensors (clones), so the step
computes exactly what it computes without the observer. On exit every hook is removed
and every wrapped function restored, also when the step raised.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import torch
from torch import nn

from autogradlab import torch_internals as internals
from autogradlab.graph.traverse import walk
from autogradlab.i18n import _
from autogradlab.models.doctor.findings import UNDONE_FRACTION, UPDATE_RATIO_MIN_NUMEL
from autogradlab.tracebacks import error_frames, learner_frames, stack_frames

MODE_MODULES = internals.MODE_MODULES
_CLIP_NAMES = {
    "torch.nn.utils": ("clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "clip_grads_with_norm_"),
    "torch.nn.utils.clip_grad": (
        "clip_grad_norm_",
        "clip_grad_norm",
        "clip_grad_value_",
        internals.CLIP_WITH_NORM_PRIVATE,
    ),
}


def learner_line(frames: list[traceback.FrameSummary]) -> str:
    """``line N: `code``` for the last frame that is the learner's (not torch, not this package)."""
    mine = learner_frames(frames)
    if not mine:
        return _("inside torch")
    last = mine[-1]
    return _("line {number}: `{code}`").format(number=last.lineno, code=(last.line or "").strip())


def graph_leaves(output: Any) -> list[torch.Tensor]:
    """The leaf tensors (AccumulateGrad nodes) that backward from ``output`` reaches, in engine order.

    Uses the graph layer's walk (the one graph walker): it still works after backward,
    which frees saved tensors but keeps the graph's structure.

    >>> w = torch.ones(2, requires_grad=True)
    >>> [t is w for t in graph_leaves((w * 3).sum())]
    [True]
    """
    if not isinstance(output, torch.Tensor) or output.grad_fn is None:
        return []
    nodes, _, _ = walk([output])
    leaves, leaf_ids = [], set()
    for fn in nodes:
        variable = getattr(fn, "variable", None)
        if isinstance(variable, torch.Tensor) and id(variable) not in leaf_ids:
            leaf_ids.add(id(variable))
            leaves.append(variable)
    return leaves


def watch_scaler(scaler: Any, around: dict[str, Callable[..., Any]]) -> contextlib.ExitStack:
    """Route calls of some of ``scaler``'s methods through ``around[name](original, *args, **kwargs)``, for this
    one object, until the returned context exits (``with watch_scaler(...):``).

    GradScaler has no hooks (an optimizer has ``register_step_pre_hook``/``register_step_post_hook``:
    use those), so this is the one place that wraps a scaler's methods: the doctor's observer and the
    checkers' call log both use it. Instance attributes shadow the class's methods and are removed on
    exit (``mock.patch.object``), also when a wrapper is already there.

    >>> scaler, seen = torch.amp.GradScaler("cpu"), []
    >>> def logged(original, *args, **kwargs):
    ...     seen.append("get_scale")
    ...     return original(*args, **kwargs)
    >>> with watch_scaler(scaler, {"get_scale": logged}):
    ...     scaler.get_scale()
    65536.0
    >>> seen, "get_scale" in vars(scaler)
    (['get_scale'], False)
    """
    stack = contextlib.ExitStack()
    for name, wrapper in around.items():
        stack.enter_context(mock.patch.object(scaler, name, functools.partial(wrapper, getattr(scaler, name))))
    return stack


def _clip_factor(total_norm: Any, max_norm: Any, scale: float) -> float | None:
    """How much smaller the gradients are after clip-then-unscale than after unscale-then-clip.

    clip_grad_norm_ returned the norm N of the *scaled* gradients; the true norm is N/S.

    >>> _clip_factor(torch.tensor(65536.0), 1.0, 65536.0)  # true norm 1: the right clip does nothing
    1.52587890625e-05
    """
    try:
        norm, limit = float(total_norm), float(max_norm)
    except (TypeError, ValueError):
        return None
    if not (norm > 0 and limit > 0 and scale > 0) or norm != norm:
        return None
    return min(1.0, limit / norm) / min(1.0, limit * scale / norm)


# Optimizers whose update divides by sqrt(second moment) + eps: a common factor on all
# gradients cancels, except against eps.
_ADAPTIVE = ("Adam", "AdamW", "NAdam", "RAdam", "Adamax", "RMSprop", "Adagrad")


def _is_adaptive(optimizer: torch.optim.Optimizer) -> bool:
    return any(cls.__name__ in _ADAPTIVE for cls in type(optimizer).__mro__) and "eps" in optimizer.param_groups[0]


def adam_first_step_ratio(grads: torch.Tensor, factor: float, eps: float) -> float:
    """‖u(g)‖ / ‖u(g / factor)‖ for Adam's first update u(g) = g / (|g| + eps).

    ``grads`` are the gradients the optimizer received, ``factor`` times the right ones.
    Where |g| ≫ eps the factor cancels; where |g| ≲ eps it survives.

    >>> g = torch.tensor([1e-3, -2e-3])
    >>> round(adam_first_step_ratio(g, 1e-2, 1e-8), 4)  # |g| ≫ eps: almost no effect
    1.0
    >>> round(adam_first_step_ratio(g * 1e-9, 1e-2, 1e-8), 2)  # |g| ≪ eps: the full factor 1e-2
    0.01
    """
    g = grads.double()
    right = g / factor
    return float((g / (g.abs() + eps)).norm() / (right / (right.abs() + eps)).norm().clamp_min(1e-300))


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal values, NaN counting as equal to NaN."""
    if a.shape != b.shape:
        return False
    if a.is_floating_point():
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return bool(torch.equal(a, b))


# A gradient smaller than this fraction of the parameter's size cannot move it in
# float32 at any usual learning rate (e.g. the bias of a layer followed by batch norm,
# whose exact gradient is 0 and whose computed one is rounding noise ~1e-9).
NEGLIGIBLE_GRAD = 1e-6


def _usable_grad(grad: torch.Tensor | None, param: torch.Tensor) -> bool:
    """A gradient that should move the parameter: present, finite and not negligible."""
    if grad is None:
        return False
    dense = grad.to_dense() if grad.is_sparse else grad
    if not bool(torch.isfinite(dense).all()):
        return False
    size = float(param.detach().abs().max()) if param.numel() else 0.0
    return float(dense.abs().max()) > NEGLIGIBLE_GRAD * size if dense.numel() else False


@dataclass
class Tracked:
    """A parameter the doctor watches: its display name, owning module and optimizers."""

    name: str
    tensor: torch.Tensor
    module: str | None  # name of the owning module in the model, None if not in the model
    optimizers: list[int] = field(default_factory=list)

    @property
    def trainable(self) -> bool:
        return self.tensor.requires_grad and bool(self.optimizers)


@dataclass
class ModuleRun:
    """How one module ran during a step."""

    eval_mode: bool = False  # ran in eval mode with gradients enabled (a no_grad validation pass does not count)
    with_grad: bool = False
    output_required_grad: bool = False


@dataclass
class OptStep:
    """One ``optimizer.step()`` that really ran: per parameter, gradient state and ‖Δθ‖/‖θ‖."""

    optimizer: int
    grad_nonzero: dict[str, bool] = field(default_factory=dict)
    no_grad: list[str] = field(default_factory=list)  # .grad None or all zero when step() began
    ratio: dict[str, float] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)


@dataclass
class Clip:
    """One call of a clipping function during a step."""

    label: str
    still_scaled: bool
    line: str
    # clip_grad_norm_ on scaled gradients: the factor by which the gradients the optimizer
    # receives differ from the right order's, min(1, m/N) / min(1, m*S/N) for the scaled norm N
    factor: float | None = None


@dataclass
class AdaptiveEffect:
    """What a clip before unscale_ does to an optimizer that divides by sqrt(v) + eps (Adam and kin)."""

    optimizer: str
    eps: float
    median_grad: float  # median |g| of the (too small) gradients the optimizer received
    first_step_ratio: float  # ‖update‖ bug / right for a first Adam step on these gradients


@dataclass
class StepLog:
    """Everything seen during one call of the learner's step."""

    index: int
    loss: float | None = None
    raised: str | None = None
    where_raised: str = ""
    grads: dict[str, dict] = field(default_factory=dict)  # name -> {'nonzero': bool, 'finite': bool}
    carried: set[str] = field(default_factory=set)
    bypass: dict[str, float] = field(default_factory=dict)  # name -> max |change|
    opt_steps: list[OptStep] = field(default_factory=list)
    opt_step_calls: int = 0
    scaler_steps: list[tuple[bool | None, float]] = field(default_factory=list)  # (skipped, scale)
    clips: list[Clip] = field(default_factory=list)
    adaptive: list[AdaptiveEffect] = field(default_factory=list)
    undone: dict[str, float] = field(default_factory=dict)  # name -> ‖θ_end − θ_before‖ / ‖θ_after − θ_before‖
    modules: dict[str, ModuleRun] = field(default_factory=dict)
    leaves: list[torch.Tensor] = field(default_factory=list)


def _loss_value(out: Any) -> float | None:
    if isinstance(out, torch.Tensor) and out.numel() == 1:
        return float(out.detach().float())
    if isinstance(out, (int, float)) and not isinstance(out, bool):
        return float(out)
    return None


class Observer:
    """Hooks around ``model``, ``optimizers`` and ``scaler``; :meth:`run_step` runs one observed step."""

    def __init__(self, model: nn.Module, optimizers: list[torch.optim.Optimizer], scaler: Any = None) -> None:
        self.model = model
        self.optimizers = optimizers
        self.scaler = scaler
        self.steps: list[StepLog] = []
        self.tracked: dict[int, Tracked] = {}
        self._module_names: dict[int, str] = {}
        self._handles: list[Any] = []
        self._restore: list[Callable[[], None]] = []
        self._current: StepLog | None = None
        self._last: dict[int, tuple[torch.Tensor, int]] = {}
        self._pre: dict[int, tuple[torch.Tensor, int]] = {}
        self._pre_grad: dict[int, bool] = {}
        self._pre_empty: set[int] = set()
        self._stepped_since_grad: dict[int, bool] = {}
        # per parameter moved by the last optimizer.step(): (value before, value after) the step
        self._undo_check: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._in_clip = 0
        self._in_backward = 0
        self._track_parameters()

    # ------------------------------------------------------------------ what is watched

    def _track_parameters(self) -> None:
        for mod_name, module in self.model.named_modules():
            self._module_names.setdefault(id(module), mod_name)
        for name, p in self.model.named_parameters(remove_duplicate=True):
            owner = name.rsplit(".", 1)[0] if "." in name else ""
            self.tracked[id(p)] = Tracked(name, p, owner)
        for i, opt in enumerate(self.optimizers):
            for g, group in enumerate(opt.param_groups):
                for j, p in enumerate(group["params"]):
                    if id(p) not in self.tracked:
                        label = (
                            f"optimizer[{i}] group {g} #{j} {tuple(p.shape)}"
                            if len(self.optimizers) > 1
                            else f"optimizer group {g} #{j} {tuple(p.shape)}"
                        )
                        self.tracked[id(p)] = Tracked(label, p, None)
                    if i not in self.tracked[id(p)].optimizers:
                        self.tracked[id(p)].optimizers.append(i)

    def optimizers_of(self, tensors: list[torch.Tensor]) -> set[int]:
        return {i for t in tensors if id(t) in self.tracked for i in self.tracked[id(t)].optimizers}

    # ------------------------------------------------------------------ install / remove

    def __enter__(self) -> Observer:
        try:
            self._install()
        except BaseException:
            self._remove()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self._remove()

    def _install(self) -> None:
        for module in self.model.modules():
            self._handles.append(module.register_forward_hook(self._forward_hook))
        for t in self.tracked.values():
            if t.tensor.requires_grad:
                self._handles.append(t.tensor.register_hook(self._grad_hook(t)))
        for i, opt in enumerate(self.optimizers):
            self._handles.append(opt.register_step_pre_hook(self._step_pre_hook(i)))
            self._handles.append(opt.register_step_post_hook(self._step_post_hook(i)))
        self._wrap_clipping()
        self._wrap_backward()
        if self.scaler is not None:
            self._wrap_scaler_step()

    def _remove(self) -> None:
        for handle in reversed(self._handles):
            handle.remove()
        self._handles.clear()
        for restore in reversed(self._restore):
            restore()
        self._restore.clear()

    # ------------------------------------------------------------------ snapshots

    def _snapshot(self) -> dict[int, tuple[torch.Tensor, int]]:
        with torch.no_grad():
            return {k: (t.tensor.detach().clone(), internals.version(t.tensor)) for k, t in self.tracked.items()}

    def _close_interval(self) -> None:
        """Values that changed since the last snapshot outside optimizer.step() with no version bump."""
        step = self._current
        for k, (before, version) in self._last.items():
            t = self.tracked[k].tensor
            if internals.version(t) == version and not _same(before, t.detach()):
                change = float((t.detach().double() - before.double()).abs().nan_to_num().max())
                step.bypass[self.tracked[k].name] = max(change, step.bypass.get(self.tracked[k].name, 0.0))
        self._last = {}

    def _check_undone(self) -> None:
        """Parameters that the last optimizer.step() moved and a later write put back (almost) where they were."""
        step = self._current
        for k, (before, after) in list(self._undo_check.items()):
            now = self.tracked[k].tensor.detach()
            if _same(after, now):
                continue  # not written since the step (yet): decide at the next check
            del self._undo_check[k]
            moved = float((after.double() - before.double()).norm())
            left = float((now.double() - before.double()).norm())
            if moved > 0 and left <= UNDONE_FRACTION * moved:
                step.undone[self.tracked[k].name] = left / moved

    # ------------------------------------------------------------------ hooks

    def _forward_hook(self, module: nn.Module, inputs: Any, output: Any) -> None:
        step = self._current
        if step is None:
            return
        name = self._module_names.get(id(module), type(module).__name__)
        run = step.modules.setdefault(name, ModuleRun())
        run.eval_mode |= not module.training and torch.is_grad_enabled()
        run.with_grad |= torch.is_grad_enabled()
        outputs = output if isinstance(output, (tuple, list)) else (output,)
        run.output_required_grad |= any(isinstance(o, torch.Tensor) and o.requires_grad for o in outputs)

    def _grad_hook(self, tracked: Tracked) -> Callable:
        key = id(tracked.tensor)

        def hook(grad: torch.Tensor) -> None:
            step = self._current
            if step is None:
                return None
            with torch.no_grad():
                seen = step.grads.setdefault(tracked.name, {"nonzero": False, "finite": True})
                dense = grad.to_dense() if grad.is_sparse else grad
                seen["nonzero"] |= bool(dense.any())
                seen["finite"] &= bool(torch.isfinite(dense).all())
                old = tracked.tensor.grad
                if self._stepped_since_grad.get(key) and old is not None:
                    old = old.to_dense() if old.is_sparse else old
                    if bool(old.any()):
                        step.carried.add(tracked.name)
            self._stepped_since_grad[key] = False
            return None

        return hook

    def _step_pre_hook(self, index: int) -> Callable:
        def hook(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
            step = self._current
            if step is None:
                return None
            step.opt_step_calls += 1
            self._close_interval()
            self._check_undone()
            self._adaptive_effect(optimizer)
            self._pre, self._pre_grad, self._pre_empty = {}, {}, set()
            with torch.no_grad():
                for group in optimizer.param_groups:
                    for p in group["params"]:
                        self._pre[id(p)] = (p.detach().clone(), internals.version(p))
                        self._pre_grad[id(p)] = _usable_grad(p.grad, p)
                        if p.grad is None or not bool(p.grad.any()):
                            self._pre_empty.add(id(p))
            return None

        return hook

    def _step_post_hook(self, index: int) -> Callable:
        def hook(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
            step = self._current
            if step is None:
                return None
            record = OptStep(index)
            with torch.no_grad():
                for group in optimizer.param_groups:
                    for p in group["params"]:
                        if id(p) not in self._pre or id(p) not in self.tracked:
                            continue
                        name = self.tracked[id(p)].name
                        before = self._pre[id(p)][0]
                        nonzero = self._pre_grad.get(id(p), False)
                        record.grad_nonzero[name] = nonzero
                        if id(p) in self._pre_empty:
                            record.no_grad.append(name)
                        if nonzero and _same(before, p.detach()):
                            record.unchanged.append(name)
                        if p.dim() >= 2 and p.numel() >= UPDATE_RATIO_MIN_NUMEL and p.is_floating_point():
                            norm = float(before.double().norm())
                            if norm > 0 and nonzero:
                                record.ratio[name] = float((p.detach().double() - before.double()).norm()) / norm
                        if p.grad is not None and bool(p.grad.any()):
                            self._stepped_since_grad[id(p)] = True
                        if p.is_floating_point() and p.numel() >= 2 and not _same(before, p.detach()):
                            self._undo_check[id(p)] = (before, p.detach().clone())
            step.opt_steps.append(record)
            self._last = self._snapshot()
            return None

        return hook

    def _wrap_clipping(self) -> None:
        for module_name, names in _CLIP_NAMES.items():
            module = sys.modules.get(module_name)
            for name in names:
                original = getattr(module, name, None) if module is not None else None
                if original is None:
                    continue
                setattr(module, name, self._clip_wrapper(original, name.lstrip("_")))
                self._restore.append(lambda m=module, n=name, o=original: setattr(m, n, o))

    def _clip_wrapper(self, original: Callable, label: str) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self._in_clip or self._current is None:
                return original(*args, **kwargs)
            args = list(args)
            if args:
                params = args[0]
            else:
                params = kwargs.get("parameters")
            # a generator can be read once: hand the original a list with the same items
            if params is not None and not isinstance(params, torch.Tensor):
                params = list(params)
                if args:
                    args[0] = params
                else:
                    kwargs["parameters"] = params
            tensors = [params] if isinstance(params, torch.Tensor) else list(params or [])
            scaled = self._still_scaled(tensors)
            line = learner_line(stack_frames()[:-1])
            clip = Clip(label, scaled, line)
            self._current.clips.append(clip)
            self._in_clip += 1
            try:
                result = original(*args, **kwargs)
            finally:
                self._in_clip -= 1
            if scaled and label == "clip_grad_norm_":
                clip.factor = _clip_factor(
                    result, args[1] if len(args) > 1 else kwargs.get("max_norm"), float(self.scaler.get_scale())
                )
            return result

        wrapper.__wrapped__ = original
        wrapper.__doc__ = original.__doc__
        return wrapper

    def _still_scaled(self, tensors: list[torch.Tensor]) -> bool:
        """True if a GradScaler in use has not unscaled the gradients of these tensors' optimizers yet."""
        scaler = self.scaler
        if scaler is None or not getattr(scaler, "is_enabled", lambda: False)():
            return False
        if not internals.scaler_started(scaler) or not any(t.grad is not None for t in tensors):
            return False
        return any(internals.scaler_stage(scaler, self.optimizers[i]) == "READY" for i in self.optimizers_of(tensors))

    def _adaptive_effect(self, optimizer: torch.optim.Optimizer) -> None:
        """After a clip on scaled gradients, estimate what it does to an Adam-like optimizer's first update."""
        step = self._current
        factors = [c.factor for c in step.clips if c.still_scaled and c.factor]
        if not factors or not _is_adaptive(optimizer):
            return
        grads = [
            p.grad.detach().double().flatten()
            for g in optimizer.param_groups
            for p in g["params"]
            if p.grad is not None
        ]
        if not grads:
            return
        g = torch.cat(grads)
        eps = float(optimizer.param_groups[0].get("eps", 1e-8))
        step.adaptive.append(
            AdaptiveEffect(
                type(optimizer).__name__, eps, float(g.abs().median()), adam_first_step_ratio(g, factors[-1], eps)
            )
        )

    def _wrap_backward(self) -> None:
        """Record the leaves of every graph backward runs on (the returned loss may be a number)."""
        original = torch.autograd.backward

        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            step = self._current
            if step is not None and not self._in_backward:
                roots = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
                tensors = roots[0] if len(roots) == 1 and isinstance(roots[0], torch.Tensor) else roots
                known = {id(t) for t in step.leaves}
                for root in roots:
                    for leaf in graph_leaves(root):
                        if leaf.requires_grad and id(leaf) not in known:
                            known.add(id(leaf))
                            step.leaves.append(leaf)
            self._in_backward += 1
            try:
                return original(tensors, *args, **kwargs)
            finally:
                self._in_backward -= 1

        backward.__wrapped__ = original
        backward.__doc__ = original.__doc__
        torch.autograd.backward = backward
        self._restore.append(lambda: setattr(torch.autograd, "backward", original))

    def _wrap_scaler_step(self) -> None:
        def step(original: Callable, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
            current = self._current
            if current is None:
                return original(optimizer, *args, **kwargs)
            scale = float(self.scaler.get_scale()) if self.scaler.is_enabled() else 1.0
            calls = current.opt_step_calls
            result = original(optimizer, *args, **kwargs)
            known = any(optimizer is o for o in self.optimizers)
            current.scaler_steps.append((current.opt_step_calls == calls if known else None, scale))
            with torch.no_grad():
                for group in optimizer.param_groups:
                    for p in group["params"]:
                        if p.grad is not None and bool(p.grad.any()):
                            self._stepped_since_grad[id(p)] = True
            return result

        watching = watch_scaler(self.scaler, {"step": step})
        watching.__enter__()
        self._restore.append(lambda: watching.__exit__(None, None, None))

    # ------------------------------------------------------------------ one step

    def run_step(self, train_step: Callable, batch: Any) -> bool:
        """Run ``train_step(batch)`` under observation; False if it raised (recorded, not re-raised)."""
        step = StepLog(index=len(self.steps) + 1)
        self.steps.append(step)
        self._current = step
        self._last = self._snapshot()
        out = None
        try:
            out = train_step(batch)
        except Exception as exc:  # the learner's bug: recorded as a finding, not a crash
            step.raised = f"{type(exc).__name__}: {exc}"
            step.where_raised = learner_line(error_frames(exc))
        finally:
            if self._last:
                self._close_interval()
            self._check_undone()
            self._current = None
        step.loss = _loss_value(out)
        known = {id(t) for t in step.leaves}
        step.leaves += [t for t in graph_leaves(out) if t.requires_grad and id(t) not in known]
        return step.raised is None
