"""One small function per doctor code: observations in, findings out.

Every rule reads an :class:`~autogradlab.models.doctor.observe.Observer` after the steps
ran and returns a list of :class:`~autogradlab.models.doctor.findings.Finding`. Findings
about several parameters with the same cause are grouped into one.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable

import torch
from torch import nn

from autogradlab.i18n import _
from autogradlab.models.doctor.findings import SCALE_FLOOR, UPDATE_RATIO_HIGH, UPDATE_RATIO_LOW, Finding
from autogradlab.models.doctor.observe import MODE_MODULES, Observer, StepLog


def _names(names: Iterable[str], obs: Observer | None = None) -> str:
    """Parameter names in model order (sets have no stable order across runs), shortened after three."""
    names = list(dict.fromkeys(names))
    if obs is not None:
        known = [t.name for t in obs.tracked.values()] + [m for m, _ in obs.model.named_modules()]
        order = {n: i for i, n in reversed(list(enumerate(known)))}
        names.sort(key=lambda n: (order.get(n, len(order)), n))
    if len(names) <= 3:
        return ", ".join(names)
    return _("{names} (+{more} more)").format(names=", ".join(names[:3]), more=len(names) - 3)


def _steps(indices: Iterable[int]) -> str:
    indices = sorted(set(indices))
    text = _("step {indices}") if len(indices) == 1 else _("steps {indices}")
    return text.format(indices=", ".join(str(i) for i in indices))


def _completed(obs: Observer) -> list[StepLog]:
    return [s for s in obs.steps if s.raised is None]


# ---------------------------------------------------------------------------- codes


def step_raised(obs: Observer) -> list[Finding]:
    return [
        Finding(
            "step-raised",
            "error",
            _("step {index}, {where}").format(index=s.index, where=s.where_raised),
            s.raised or "",
        )
        for s in obs.steps
        if s.raised is not None
    ]


def _container_name(model: nn.Module, tensor: torch.Tensor) -> tuple[str, str] | None:
    """Where an unregistered tensor hides in the model: ('blocks.scales[0]', 'a Python list')."""
    for prefix, module in model.named_modules():
        for attr, value in vars(module).items():
            if attr.startswith("_"):
                continue
            dotted = f"{prefix}.{attr}" if prefix else attr
            if value is tensor:
                return dotted, _("a plain tensor attribute")
            if isinstance(value, (list, tuple)):
                for i, item in enumerate(value):
                    if item is tensor:
                        return f"{dotted}[{i}]", _("a Python {type}").format(type=type(value).__name__)
            if isinstance(value, dict):
                for key, item in value.items():
                    if item is tensor:
                        return f"{dotted}[{key!r}]", _("a Python dict")
    return None


def param_not_in_optimizer(obs: Observer) -> list[Finding]:
    completed = _completed(obs)
    got_grad = {name for s in completed for name in s.grads}
    in_graph = {id(t) for s in completed for t in s.leaves}
    findings = []
    registered = [
        t.name
        for t in obs.tracked.values()
        if t.module is not None
        and t.tensor.requires_grad
        and not t.optimizers
        and (t.name in got_grad or id(t.tensor) in in_graph)
    ]
    if registered:
        findings.append(
            Finding(
                "param-not-in-optimizer",
                "error",
                _names(registered, obs),
                _(
                    "{count} model parameter(s) received a gradient but are in no optimizer param group, "
                    "so they never change (was the optimizer built before these parameters were created or replaced?)"
                ).format(count=len(registered)),
            )
        )
    seen: set[int] = set()
    for s in completed:
        for leaf in s.leaves:
            if id(leaf) in obs.tracked or id(leaf) in seen:
                continue
            seen.add(id(leaf))
            found = _container_name(obs.model, leaf)
            shape = tuple(leaf.shape)
            if isinstance(leaf, nn.Parameter):
                if found:
                    where, holder = found
                    message = _(
                        "an nn.Parameter {shape} kept in {holder} is in the loss graph, so backward gives it "
                        "a gradient, but model.parameters() does not list it and no optimizer updates it"
                    ).format(shape=shape, holder=holder)
                else:
                    where = f"nn.Parameter {shape}"
                    message = _(
                        "an nn.Parameter outside the model is in the loss graph, so backward gives it a "
                        "gradient, but no optimizer updates it"
                    )
                findings.append(Finding("param-not-in-optimizer", "error", where, message))
            elif found:
                where, holder = found
                findings.append(
                    Finding(
                        "param-not-in-optimizer",
                        "error",
                        where,
                        _(
                            "a tensor {shape} with requires_grad=True kept in {holder} of the model is in the loss graph, "
                            "so backward gives it a gradient, but it is no nn.Parameter: model.parameters() does not list "
                            "it and no optimizer updates it"
                        ).format(shape=shape, holder=holder),
                    )
                )
            else:
                findings.append(
                    Finding(
                        "param-not-in-optimizer",
                        "warning",
                        _("leaf tensor {shape}").format(shape=shape),
                        _(
                            "a tensor {shape} with requires_grad=True is a leaf of the loss graph but in no optimizer; "
                            "if it is a weight, make it an nn.Parameter of the model; if it is an input that needs a "
                            "gradient on purpose, ignore this"
                        ).format(shape=shape),
                    )
                )
    return findings


def frozen_param_in_optimizer(obs: Observer) -> list[Finding]:
    frozen = [t.name for t in obs.tracked.values() if t.optimizers and not t.tensor.requires_grad]
    if not frozen:
        return []
    return [
        Finding(
            "frozen-param-in-optimizer",
            "warning",
            _names(frozen, obs),
            _(
                "{count} parameter(s) with requires_grad=False sit in the optimizer: they get no gradient and never "
                "change. Meant to train them? requires_grad_(True). Frozen on purpose? leave them out of the optimizer"
            ).format(count=len(frozen)),
        )
    ]


def _why_no_grad(obs: Observer, owner: str | None, completed: list[StepLog]) -> str:
    if owner is None:
        return _("it is not a parameter of the model passed to diagnose (an optimizer built for another model?)")
    runs = [s.modules[owner] for s in completed if owner in s.modules]
    label = _("module `{name}`").format(name=owner) if owner else _("the model")
    if not runs:
        return _("{module} never ran in the forward pass (unused)").format(module=label)
    if not any(r.with_grad for r in runs):
        return _("{module} ran with gradients disabled (torch.no_grad() or inference_mode)").format(module=label)
    if not any(r.output_required_grad for r in runs):
        return _("{module} ran, but its output did not require grad").format(module=label)
    return _(
        "{module} ran and its output required grad, so the path to the loss was cut after it "
        "(detach(), .data, .item(), a new tensor built from values, or a non-differentiable op)"
    ).format(module=label)


def missing_grad(obs: Observer) -> list[Finding]:
    completed = _completed(obs)
    if not completed:
        return []
    got_grad = {name for s in completed for name in s.grads}
    by_reason: dict[str, list[str]] = {}
    for t in obs.tracked.values():
        if t.trainable and t.name not in got_grad:
            by_reason.setdefault(_why_no_grad(obs, t.module, completed), []).append(t.name)
    return [
        Finding(
            "missing-grad",
            "error",
            _names(names, obs),
            _("{count} trainable parameter(s) in the optimizer got no gradient in {steps} step(s): {reason}").format(
                count=len(names), steps=len(completed), reason=reason
            ),
        )
        for reason, names in by_reason.items()
    ]


def _skipped_by_scaler(step: StepLog) -> bool:
    return any(skipped for skipped, _ in step.scaler_steps)


def nonfinite_grad(obs: Observer) -> list[Finding]:
    bad: dict[str, list[int]] = {}
    for s in _completed(obs):
        if _skipped_by_scaler(s):
            continue  # the scaler caught it: reported as amp-step-skipped
        for name, seen in s.grads.items():
            if not seen["finite"]:
                bad.setdefault(name, []).append(s.index)
    if not bad:
        return []
    steps = sorted({i for indices in bad.values() for i in indices})
    return [
        Finding(
            "nonfinite-grad",
            "error",
            _names(bad, obs),
            _("inf/NaN in the gradient of {count} parameter(s) in {steps}").format(count=len(bad), steps=_steps(steps)),
        )
    ]


def grad_not_cleared(obs: Observer) -> list[Finding]:
    carried: dict[str, list[int]] = {}
    for s in _completed(obs):
        for name in s.carried:
            carried.setdefault(name, []).append(s.index)
    if not carried:
        return []
    steps = sorted({i for indices in carried.values() for i in indices})
    return [
        Finding(
            "grad-not-cleared",
            "error",
            _names(carried, obs),
            _(
                "in {steps} backward added to a gradient still left from before the previous optimizer.step(): "
                ".grad holds the sum of several steps' gradients"
            ).format(steps=_steps(steps)),
        )
    ]


def data_bypass(obs: Observer) -> list[Finding]:
    changed: dict[str, list[int]] = {}
    size: dict[str, float] = {}
    for s in obs.steps:
        for name, change in s.bypass.items():
            changed.setdefault(name, []).append(s.index)
            size[name] = max(size.get(name, 0.0), change)
    if not changed:
        return []
    steps = sorted({i for indices in changed.values() for i in indices})
    return [
        Finding(
            "data-bypass",
            "warning",
            _names(changed, obs),
            _(
                "changed outside optimizer.step() in {steps} (max |change| {change:.3g}) while the "
                "version counter stayed put: a write through .data that autograd cannot see"
            ).format(steps=_steps(steps), change=max(size.values())),
        )
    ]


def _frozen_region(obs: Observer, module_name: str) -> bool:
    """True if the module and its parent block hold no trainable parameter."""
    parent = module_name.rsplit(".", 1)[0] if "." in module_name else ""
    prefix = f"{parent}." if parent else ""
    names = [
        t
        for t in obs.tracked.values()
        if t.module is not None and (t.module == parent or t.module.startswith(prefix) or parent == "")
    ]
    return not any(t.trainable for t in names)


def _typed(name: str, modules: dict) -> str:
    return f"{name} ({type(modules[name]).__name__})"


def eval_mode_in_training(obs: Observer) -> list[Finding]:
    modules = dict(obs.model.named_modules())
    in_eval: dict[str, list[int]] = {}
    for s in _completed(obs):
        for name, run in s.modules.items():
            if run.eval_mode and isinstance(modules.get(name), MODE_MODULES):
                in_eval.setdefault(name, []).append(s.index)
    if not in_eval:
        return []
    findings = []
    order = {name: i for i, name in enumerate(modules)}
    in_eval = dict(sorted(in_eval.items(), key=lambda kv: order.get(kv[0], len(order))))
    frozen = [n for n in in_eval if _frozen_region(obs, n)]
    live = [n for n in in_eval if n not in frozen]
    if live:
        steps = sorted({i for n in live for i in in_eval[n]})
        kinds = sorted({type(modules[n]).__name__ for n in live})
        findings.append(
            Finding(
                "eval-mode-in-training",
                "warning",
                _names([_typed(n, modules) for n in live]),
                _(
                    "{kinds} ran in eval mode in {steps}: dropout is off and batch norm uses its running statistics, "
                    "so training optimizes a different model (model.eval() left over from validation?)"
                ).format(kinds="/".join(kinds), steps=_steps(steps)),
            )
        )
    if frozen:
        findings.append(
            Finding(
                "eval-mode-in-training",
                "info",
                _names([_typed(n, modules) for n in frozen]),
                _(
                    "ran in eval mode inside a block with no trainable parameter (a frozen backbone kept in eval mode: "
                    "fine if deliberate)"
                ),
            )
        )
    return findings


def no_update(obs: Observer) -> list[Finding]:
    completed = _completed(obs)
    findings = []
    unchanged: dict[str, list[int]] = {}
    for s in completed:
        for record in s.opt_steps:
            for name in record.unchanged:
                unchanged.setdefault(name, []).append(s.index)
    if unchanged:
        lrs = sorted({g.get("lr") for opt in obs.optimizers for g in opt.param_groups if "lr" in g}, key=float)
        lr_note = (
            _(" (learning rate(s) in the param groups: {rates})").format(
                rates=", ".join(f"{float(lr):g}" for lr in lrs)
            )
            if lrs
            else ""
        )
        steps = sorted({i for indices in unchanged.values() for i in indices})
        findings.append(
            Finding(
                "no-update",
                "error",
                _names(unchanged, obs),
                _("nonzero gradients, but the value did not change over optimizer.step() in {steps}").format(
                    steps=_steps(steps)
                )
                + lr_note,
            )
        )
    cleared: dict[str, list[int]] = {}
    for s in completed:
        if not s.opt_steps:
            continue
        for name, seen in s.grads.items():
            if seen["nonzero"] and all(name in r.no_grad for r in s.opt_steps if name in r.grad_nonzero):
                if any(name in r.grad_nonzero for r in s.opt_steps):
                    cleared.setdefault(name, []).append(s.index)
    if cleared:
        steps = sorted({i for indices in cleared.values() for i in indices})
        findings.append(
            Finding(
                "no-update",
                "error",
                _names(cleared, obs),
                _(
                    "backward gave nonzero gradients, but .grad was empty when optimizer.step() ran in {steps}: "
                    "zero_grad() sits between backward() and step()"
                ).format(steps=_steps(steps)),
            )
        )
    calls = sum(s.opt_step_calls for s in completed)
    scaler_skips = sum(1 for s in completed for skipped, _ in s.scaler_steps if skipped)
    had_grad = any(seen["nonzero"] for s in completed for seen in s.grads.values())
    if completed and calls == 0 and scaler_skips == 0 and had_grad:
        findings.append(
            Finding(
                "no-update",
                "error",
                "optimizer.step()",
                _(
                    "gradients were nonzero, but optimizer.step() of the optimizer passed to diagnose never ran in "
                    "{count} step(s): the step calls step() on another optimizer, or skips it (a condition never "
                    "true, or accumulation over more calls than the batches given)"
                ).format(count=len(completed)),
            )
        )
    return findings


def update_undone(obs: Observer) -> list[Finding]:
    undone: dict[str, list[int]] = {}
    for s in _completed(obs):
        for name in s.undone:
            undone.setdefault(name, []).append(s.index)
    moved: dict[str, int] = {}
    for s in _completed(obs):
        for record in s.opt_steps:
            for name, nonzero in record.grad_nonzero.items():
                if nonzero and name not in record.unchanged:
                    moved[name] = moved.get(name, 0) + 1
    # undone in at least two steps and in at least half of the steps that moved it
    bad = {n: steps for n, steps in undone.items() if len(steps) >= 2 and 2 * len(steps) >= moved.get(n, 0)}
    if not bad:
        return []
    steps = sorted({i for indices in bad.values() for i in indices})
    return [
        Finding(
            "update-undone",
            "error",
            _names(bad, obs),
            (
                _(
                    "optimizer.step() changed it, but a write after the step put it back to the value from before "
                    "the step in {steps}: the updates never take effect (look for a clamp, a reset or a reload after "
                    "optimizer.step())"
                )
                if len(bad) == 1
                else _(
                    "optimizer.step() changed them, but a write after the step put them back to the value from before "
                    "the step in {steps}: the updates never take effect (look for a clamp, a reset or a reload after "
                    "optimizer.step())"
                )
            ).format(steps=_steps(steps)),
        )
    ]


def _ratios(obs: Observer) -> dict[str, list[tuple[int, float]]]:
    ratios: dict[str, list[tuple[int, float]]] = {}
    for s in _completed(obs):
        for record in s.opt_steps:
            for name, ratio in record.ratio.items():
                ratios.setdefault(name, []).append((s.index, ratio))
    return ratios


def update_ratio_high(obs: Observer) -> list[Finding]:
    high = {}
    for name, values in _ratios(obs).items():
        step, worst = max(values, key=lambda v: v[1])
        if worst > UPDATE_RATIO_HIGH:
            high[name] = (step, worst)
    if not high:
        return []
    name, (step, worst) = max(high.items(), key=lambda kv: kv[1][1])
    return [
        Finding(
            "update-ratio-high",
            "warning",
            _names(high, obs),
            _(
                "‖Δθ‖/‖θ‖ above {high:g} for {count} weight(s); largest {worst:.3g} for {name} in step "
                "{step}: one step rewrites a large part of the weight"
            ).format(high=UPDATE_RATIO_HIGH, count=len(high), worst=worst, name=name, step=step),
        )
    ]


def update_ratio_low(obs: Observer) -> list[Finding]:
    low = {}
    for name, values in _ratios(obs).items():
        median = statistics.median(v for _, v in values)
        if 0 < median < UPDATE_RATIO_LOW:
            low[name] = median
    if not low:
        return []
    name, median = min(low.items(), key=lambda kv: kv[1])
    return [
        Finding(
            "update-ratio-low",
            "warning",
            _names(low, obs),
            _(
                "median ‖Δθ‖/‖θ‖ below {low:g} for {count} weight(s); smallest {median:.3g} for {name}: "
                "the weights barely move"
            ).format(low=UPDATE_RATIO_LOW, count=len(low), median=median, name=name),
        )
    ]


def amp_step_skipped(obs: Observer) -> list[Finding]:
    """Skips that are GradScaler's calibration (info) told from skips that are trouble (error, warning).

    Calibration: the scale backs off from its start before any step was applied, or a skip comes right after
    the scale grew past the last scale that worked, with a finite loss. Trouble: a non-finite loss, a skip at
    a scale below :data:`SCALE_FLOOR`, or a skip at a scale that worked before.
    """
    history = [(s.index, skipped, scale, s.loss) for s in obs.steps for skipped, scale in s.scaler_steps]
    skips = [h for h in history if h[1]]
    if not skips:
        return []
    n, total = len(skips), len(history)
    scales = _("scale {first:g} → {last:g}").format(first=history[0][2], last=obs.scaler.get_scale())
    bad_loss = [i for i, _, _, loss in skips if loss is not None and not math.isfinite(loss)]
    low = [i for i, _, scale, _ in skips if scale < SCALE_FLOOR]
    loss_note = _("; the loss itself was inf/NaN in {steps}").format(steps=_steps(bad_loss)) if bad_loss else ""
    if n == total and (bad_loss or low):
        evidence = (
            _("the loss itself is inf/NaN in {steps}").format(steps=_steps(bad_loss))
            if bad_loss
            else _("the gradients stay inf/NaN at a scale below {floor:g}").format(floor=SCALE_FLOOR)
        )
        return [
            Finding(
                "amp-step-skipped",
                "error",
                "scaler.step()",
                _(
                    "the GradScaler skipped all {total} optimizer steps ({scales}) and {evidence}: the inf/NaN comes "
                    "from the inputs, the forward or the loss, not from an overflow of the scaled gradients"
                ).format(total=total, scales=scales, evidence=evidence),
            )
        ]
    worked: float | None = None  # the last scale at which a step was applied
    trouble = []
    for i, skipped, scale, _loss in history:
        if not skipped:
            worked = scale
        elif i in bad_loss or scale < SCALE_FLOOR or (worked is not None and scale <= worked):
            trouble.append(i)
    if trouble:
        return [
            Finding(
                "amp-step-skipped",
                "warning",
                "scaler.step()",
                _(
                    "the GradScaler skipped {count} of {total} optimizer steps at a scale that had worked before "
                    "({steps}; {scales})"
                ).format(count=len(trouble), total=total, steps=_steps(trouble), scales=scales)
                + loss_note,
            )
        ]
    if n == total:
        more = max(1, math.ceil(math.log2(obs.scaler.get_scale() / SCALE_FLOOR)))
        return [
            Finding(
                "amp-step-skipped",
                "info",
                "scaler.step()",
                _(
                    "the GradScaler skipped all {total} steps while its scale backed off from its start ({scales}) "
                    "with a finite loss: it is still calibrating, no update was applied yet. Observe more steps (up to "
                    "{more} more before the scale falls below {floor:g}): only skips that go on past that are a fault"
                ).format(total=total, scales=scales, more=more, floor=SCALE_FLOOR),
            )
        ]
    return [
        Finding(
            "amp-step-skipped",
            "info",
            "scaler.step()",
            _(
                "the GradScaler skipped {count} of {total} steps ({steps}; {scales}) while the scale "
                "calibrated (backing off from its start, or probing after it grew) with a finite loss: normal"
            ).format(count=n, total=total, steps=_steps(h[0] for h in skips), scales=scales),
        )
    ]


def _clip_effect(obs: Observer) -> str:
    """What the wrong order did to the update, for the optimizer(s) the doctor saw."""
    adaptive = [a for s in obs.steps for a in s.adaptive]
    factors = [c.factor for s in obs.steps for c in s.clips if c.still_scaled and c.factor]
    if adaptive:
        a = adaptive[0]
        return _(
            "{optimizer} divides by √v + eps, so a common factor on the gradients mostly cancels: what remains "
            "acts through eps = {eps:g}. Its gradients arrived {small:.3g}× too small (median |g| "
            "{median:.2g}, {over_eps:.2g}× eps), which makes a first update about "
            "{ratio:.2f}× the right one here; the smaller the gradient elements (the larger the model), "
            "the larger the damage"
        ).format(
            optimizer=a.optimizer,
            eps=a.eps,
            small=1 / factors[0],
            median=a.median_grad,
            over_eps=a.median_grad / a.eps,
            ratio=a.first_step_ratio,
        )
    if factors and all(isinstance(o, torch.optim.SGD) for o in obs.optimizers):
        return _(
            "SGD moves by the gradient it receives, which is {factor:.2g}× the right one (step 1): every "
            "update shrinks by that factor"
        ).format(factor=factors[0])
    if factors:
        return _("The optimizer receives gradients {factor:.2g}× the right ones (step 1)").format(factor=factors[0])
    return ""


def clip_before_unscale(obs: Observer) -> list[Finding]:
    scaled = [(s.index, c) for s in obs.steps for c in s.clips if c.still_scaled]
    if not scaled:
        return []
    clip = scaled[0][1]
    scale = obs.scaler.get_scale() if obs.scaler is not None else float("nan")
    return [
        Finding(
            "clip-before-unscale",
            "error",
            clip.line,
            _(
                "{clip} ran on gradients still multiplied by the GradScaler's scale (now {scale:g}) in "
                "{steps}: the threshold acts as max_norm / scale. {effect}"
            )
            .format(clip=clip.label, scale=scale, steps=_steps(i for i, _c in scaled), effect=_clip_effect(obs))
            .rstrip(),
        )
    ]


RULES: list[Callable[[Observer], list[Finding]]] = [
    step_raised,
    param_not_in_optimizer,
    frozen_param_in_optimizer,
    missing_grad,
    nonfinite_grad,
    grad_not_cleared,
    data_bypass,
    eval_mode_in_training,
    no_update,
    update_undone,
    update_ratio_high,
    update_ratio_low,
    amp_step_skipped,
    clip_before_unscale,
]


def run_rules(obs: Observer) -> list[Finding]:
    """Every rule's findings, in the order of the code table."""
    return [finding for rule in RULES for finding in rule(obs)]
