"""What a mystery script does when it runs, recorded through public hooks: the behaviour a fix is judged by.

A mystery script (see :mod:`autogradlab.models.mysteries`) has a ``Config`` dataclass with a ``seed``,
and a ``Trainer(cfg)`` with ``model``, ``optimizer``, ``fit(log)`` (returns the loss of every
optimizer step), ``epoch_batches()`` and ``train_step(batch)``. :func:`record` runs ``fit`` with hooks on
the trainer's model (what enters it, what its first call returns) and optimizer (learning rates and
gradients at each ``step()``), so two scripts are compared by what they do, whatever their text.

>>> from autogradlab.models.mysteries import original
>>> run = record(original(4), seed=0, steps=5)
>>> run.steps, len(run.grads), run.complete, run.settings["optimizer"]
(5, 3, False, 'Adam')
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch

KEEP_GRADS = 3  # optimizer steps whose gradients are kept (the first ones: the same state in every correct fix)


@dataclass
class Recording:
    """One run of a script: what went in, what the optimizer was told and given, what ``fit`` returned."""

    losses: list[float]
    inputs: list[str]  # a digest of the tensors of every model call (training and validation), in order
    first_output: torch.Tensor | None  # what the model's first call returned
    lrs: list[tuple[float, ...]]  # each param group's learning rate at every optimizer step
    settings: dict[str, Any]  # optimizer type and hyper-parameters except lr; the GradScaler's settings
    start: dict[str, torch.Tensor]  # the parameters before training, by name
    grads: list[dict[str, torch.Tensor | None]] = field(default_factory=list)  # at the first KEEP_GRADS steps
    end: dict[str, torch.Tensor] = field(default_factory=dict)
    complete: bool = True  # False when the run was stopped after its first steps

    @property
    def steps(self) -> int:
        return len(self.lrs)


def digest(value: Any) -> str:
    """Shapes, dtypes and exact bytes of the tensors in ``value`` (a tensor, or a tuple/list/dict of them).

    >>> digest((torch.ones(2), 3)) == digest((torch.ones(2), 4)), digest(torch.ones(2)) == digest(torch.zeros(2))
    (True, False)
    """
    tensors = [value] if isinstance(value, torch.Tensor) else []
    if isinstance(value, (tuple, list)):
        tensors = [t for t in value if isinstance(t, torch.Tensor)]
    elif isinstance(value, dict):
        tensors = [t for t in value.values() if isinstance(t, torch.Tensor)]
    h = hashlib.sha1()
    for t in tensors:
        t = t.detach().contiguous().cpu()
        h.update(f"{tuple(t.shape)}{t.dtype}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def settings_of(trainer: Any) -> dict[str, Any]:
    """The optimizer's type and hyper-parameters (all but lr, per group) and the GradScaler's, if any."""
    optimizer = trainer.optimizer
    groups = [
        {k: (tuple(v) if isinstance(v, list) else v) for k, v in g.items() if k not in ("params", "lr", "initial_lr")}
        for g in optimizer.param_groups
    ]
    found: dict[str, Any] = {"optimizer": type(optimizer).__name__, "groups": groups}
    scaler = getattr(trainer, "scaler", None)
    if scaler is not None:
        found["loss scale"] = scaler.get_scale() if scaler.is_enabled() else None
        found["scaler"] = (scaler.is_enabled(), scaler.get_growth_factor(), scaler.get_backoff_factor())
    return found


class _Enough(BaseException):
    """Stops a run after its first steps (a BaseException, so the script's own ``except Exception`` lets it pass)."""


def record(script: ModuleType, seed: int = 0, steps: int | None = None) -> Recording:
    """Build ``script.Trainer(script.Config(seed=seed))`` and run ``fit``, watching it.

    With ``steps``, the run stops when the optimizer is about to take step ``steps`` (``complete`` False,
    no losses): the first steps tell most wrong fixes apart, at a fraction of the cost.
    """
    trainer = script.Trainer(script.Config(seed=seed))
    model, optimizer = trainer.model, trainer.optimizer
    names = {id(p): n for n, p in model.named_parameters()}
    run = Recording(
        losses=[],
        inputs=[],
        first_output=None,
        lrs=[],
        settings=settings_of(trainer),
        start={n: p.detach().clone() for n, p in model.named_parameters()},
    )

    def entering(module, args, kwargs):
        run.inputs.append(digest([*args, *kwargs.values()]))

    def leaving(module, args, output):
        if run.first_output is None and isinstance(output, torch.Tensor):
            run.first_output = output.detach().float().clone()

    def stepping(opt, args, kwargs):
        if steps is not None and len(run.lrs) == steps:
            raise _Enough
        run.lrs.append(tuple(float(g["lr"]) for g in opt.param_groups))
        if len(run.grads) < KEEP_GRADS:
            params = [p for g in opt.param_groups for p in g["params"]]
            run.grads.append({names.get(id(p), f"(not in the model) #{i}"): _grad(p) for i, p in enumerate(params)})

    handles = [
        model.register_forward_pre_hook(entering, with_kwargs=True),
        model.register_forward_hook(leaving),
        optimizer.register_step_pre_hook(stepping),
    ]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # these models are small: one thread is fastest, and the same for every run compared
    try:
        run.losses = [float(v) for v in trainer.fit(log=lambda *args, **kwargs: None)]
    except _Enough:
        run.complete = False
    finally:
        torch.set_num_threads(threads)
        for handle in handles:
            handle.remove()
    run.end = {n: p.detach().clone() for n, p in model.named_parameters()}
    return run


def _grad(p: torch.Tensor) -> torch.Tensor | None:
    return None if p.grad is None else p.grad.detach().clone()


def first_difference(got: list, expected: list, complete: bool = True) -> int | None:
    """The first index where two sequences differ; a partial run (``complete=False``) is compared with the start.

    >>> first_difference([1, 2], [1, 2, 3]), first_difference([1, 2], [1, 2, 3], complete=False)
    (2, None)
    """
    n = max(len(got), len(expected)) if complete else len(got)
    return next((i for i in range(n) if i >= len(got) or i >= len(expected) or got[i] != expected[i]), None)


def common_factor(got: dict, expected: dict) -> float | None:
    """c when every gradient in ``got`` is c × the one in ``expected`` (c ≠ 1; clipping, a rescaled loss), else None.

    >>> common_factor({"w": torch.tensor([2.0, 4.0])}, {"w": torch.tensor([1.0, 2.0])})
    2.0
    """
    if got.keys() != expected.keys() or any((got[k] is None) != (expected[k] is None) for k in got):
        return None
    g = torch.cat([got[k].double().flatten() for k in got if got[k] is not None] or [torch.zeros(0)])
    e = torch.cat([expected[k].double().flatten() for k in got if got[k] is not None] or [torch.zeros(0)])
    if not e.numel() or float(e @ e) == 0:
        return None
    c = float(g @ e) / float(e @ e)
    return c if float((g - c * e).norm()) <= 1e-4 * float(g.norm()) and abs(c - 1) > 1e-3 else None
