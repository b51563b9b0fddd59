"""Checkers for chapter 06 (one training step, line by line).

Each checker runs the learner's code on the small float64 set-ups of
:mod:`autogradlab.models.train_state.setups` next to a reference, compares the state the exercise is
about, and names the line that is missing or out of place by running typical wrong variants on the same
inputs (:func:`~autogradlab.checks.stateful.run_variants`). The global RNG is left as the notebook had it
(the checks seed their own runs inside ``fork_rng``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import partial

import torch
from torch.nn.utils import parameters_to_vector

from autogradlab.checks.core import ExerciseError, LearnerCall, OffLimits, mistakes, passed
from autogradlab.checks.stateful import differences, run_variants, variants
from autogradlab.i18n import N_, _
from autogradlab.models.train_state import module_mode, setups, snapshot
from autogradlab.torch_internals import version

COURSE_OFF = OffLimits(
    course=("autogradlab.models.train_state",),
    why=N_("this exercise asks you to write it yourself; the course's code in autogradlab.models.train_state does it for you."),
)  # fmt: skip


def _flat(model) -> torch.Tensor:
    return parameters_to_vector(model.parameters()).detach()


# --------------------------------------------------------------------------- exercise 1: a step that reports

# One set-up clips on every step (the gradient norm is about 0.6 to 1.6), the other never does.
STEP_SETUPS = (
    (0, 0.25, N_("max_norm = 0.25, below the gradient norm")),
    (1, 2.0, N_("max_norm = 2.0, above the gradient norm")),
)


def _run_steps(step: Callable, seed: int, max_norm: float) -> list[tuple]:
    """Three steps, each right after a validation pass that forgot no_grad; per step (returned, snapshot, batch changed)."""
    records = []
    with torch.random.fork_rng(devices=[]):
        model, optimizer, batches, validation = setups.step_setup(seed)
        loss_fn = torch.nn.MSELoss()
        torch.manual_seed(1000 + seed)  # the Dropout masks
        for batch in batches:
            setups.after_validation(model, validation, loss_fn)
            kept = [(t.clone(), version(t), t.requires_grad) for t in batch]
            returned = step(model, batch, optimizer, loss_fn, max_norm)
            changed = any(
                not torch.equal(t, c) or version(t) != v or t.requires_grad != r for t, (c, v, r) in zip(batch, kept)
            )
            records.append((returned, snapshot(model, optimizer), changed))
    return records


def _reference_step(model, batch, optimizer, loss_fn, max_norm=1.0):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(batch[0]), batch[1])
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    before = _flat(model)  # parameters_to_vector makes a copy
    optimizer.step()
    return loss.detach(), grad_norm, (_flat(model) - before).norm() / before.norm()


def _variant(kind: str) -> Callable:
    """A train_step with one typical slip. Only the states it leaves are compared, so its update ratio is a placeholder."""

    def step(model, batch, optimizer, loss_fn, max_norm=1.0):
        params = list(model.parameters())
        if kind not in ("eval", "train_late"):
            model.train()
        if kind not in ("no_zero", "zero_after"):
            optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(batch[0]), batch[1])
        if kind == "train_late":
            model.train()
        if kind == "step_first":
            optimizer.step()
        loss.backward()
        if kind == "zero_after":
            optimizer.zero_grad(set_to_none=True)
        norm = parameters_to_vector([p.grad for p in params if p.grad is not None] or [torch.zeros(1)]).norm()
        if kind == "always_scale":
            for p in params:
                p.grad.mul_(max_norm / (norm + 1e-6))
        elif kind == "clip_value":
            torch.nn.utils.clip_grad_value_(params, max_norm)
        elif kind == "per_parameter":
            for p in params:
                torch.nn.utils.clip_grad_norm_([p], max_norm)
        elif kind not in ("no_clip", "clip_after"):
            torch.nn.utils.clip_grad_norm_(params, max_norm)
        if kind != "step_first":
            optimizer.step()
        if kind == "clip_after":
            torch.nn.utils.clip_grad_norm_(params, max_norm)
        if kind == "extra_forward":
            loss_fn(model(batch[0]), batch[1])  # "the loss after the update", for the log
        return loss.detach(), norm.detach(), torch.zeros(())

    return step


TRAIN_STEP_MISTAKES = {
    "eval": N_("the model stayed in eval mode (Dropout was off): call model.train() at the start of the step; eval() from the validation pass sticks until you switch back."),
    "train_late": N_("model.train() came after the forward pass, so Dropout was still off for it: switch the mode first, at the top of the step."),
    "no_zero": N_("stale gradients: the validation pass left .grad full and backward() adds into it. Call optimizer.zero_grad(set_to_none=True) before loss.backward()."),
    "zero_after": N_("optimizer.step() found no gradients: zero_grad ran after backward and threw them away. Clear the gradients before backward, never between backward and step."),
    "step_first": N_("optimizer.step() ran before loss.backward(), so it found no gradient of this batch. The order is zero_grad, forward, loss, backward, clip, step."),
    "no_clip": N_("the update used unclipped gradients: call torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) after loss.backward() and before optimizer.step() (before backward there is nothing to clip yet)."),
    "clip_after": N_("the gradients were clipped after optimizer.step(): the update had already used the unclipped ones. Clip between backward and step."),
    "always_scale": N_("the gradients were scaled to norm max_norm although their norm was already below it: clipping only ever scales down (clip_grad_norm_ leaves them as they are then)."),
    "clip_value": N_("clip_grad_value_ clamps each element; the exercise clips the total norm of all gradients together: torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)."),
    "per_parameter": N_("each parameter's gradient was clipped on its own; the norm to clip is the total norm of all gradients taken together (one call of clip_grad_norm_ on model.parameters())."),
    "extra_forward": N_("the step ran the model a second time (for the log?): in train mode that draws new Dropout masks, so the RNG state (and every later step) differs. Log the loss of the one forward pass."),
}  # fmt: skip
TRAIN_STEP_VARIANTS = variants(_variant, TRAIN_STEP_MISTAKES)
STEP_HINTS = {
    "batch-changed": N_("`x = batch[0]` is the caller's tensor, not a copy; an in-place op on it (`x -= ...`, `x.div_(...)`) changes the data set itself. Write `x = batch[0] - ...` instead."),
    "graph-returned": N_("whoever logs it keeps the graph (and its saved tensors) alive. Return `.detach()` (a tensor without graph) or `.item()`."),
    "rng-only": N_("only the RNG state differs: your step drew random numbers the reference does not draw (a second forward pass in train mode, torch.rand..., or a reseed)."),
    "unnamed-state": N_("step through your function with TrainStepInspector(train_step) and compare each line's changes with the state table at the top of the chapter."),
    "norm-after-clip": N_("that is the norm after clipping: take the total norm before clipping (clip_grad_norm_ returns it)."),
    "norm": N_("grad_norm is the L2 norm of all parameter gradients taken together, before clipping."),
    "ratio-aliased": N_("your θ_before changed with the parameters: `p.detach()` (and a list of them) shares storage with p, and optimizer.step() updates p in place. Keep a copy: `.clone()` (or torch.cat / parameters_to_vector, which allocate new memory)."),
    "ratio-per-parameter": N_("that is the mean of the per-parameter ratios: take one norm over all parameters as one vector."),
    "ratio-over-after": N_("divide by ‖θ_before‖, the parameters before the step, not after it."),
    "ratio": N_("update_ratio = ‖θ_after − θ_before‖ / ‖θ_before‖ with θ all parameters as one vector."),
    "loss": N_("return the loss of this batch before the update, from the step's one forward pass."),
}  # fmt: skip
NO_GRAPH_HINT = N_("the forward pass ran without autograd (under torch.no_grad() or inference_mode, or the loss was detached), so backward has no graph. Only the logging may be outside autograd.")  # fmt: skip


def _step_error(summary: str, mistake: str, kind: str = "value") -> ExerciseError:
    return ExerciseError(kind, summary, hint=STEP_HINTS.get(mistake) or TRAIN_STEP_MISTAKES[mistake], mistake=mistake)


def _number(value, what: str, label: str) -> float:
    if isinstance(value, torch.Tensor) and (value.grad_fn is not None or value.requires_grad):
        summary = _("`train_step` returned {what} with its autograd graph for {label}.").format(what=what, label=label)
        raise _step_error(summary, "graph-returned", "contract")
    number = isinstance(value, (float, int)) and not isinstance(value, bool)
    if number or isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value)
    summary = _("{what} should be a Python float or a 0-dim tensor, got {type} for {label}.").format(what=what, type=type(value).__name__, label=label)  # fmt: skip
    raise ExerciseError("type", summary)


def _ratio_slips(seed: int, max_norm: float, step: int) -> dict[str, float]:
    """Wrong update ratios a learner may compute at ``step`` (mistake id -> value)."""
    with torch.random.fork_rng(devices=[]):
        model, optimizer, batches, validation = setups.step_setup(seed)
        torch.manual_seed(1000 + seed)
        for batch in batches[: step + 1]:  # replay the check's run up to this step
            setups.after_validation(model, validation, torch.nn.MSELoss())
            before = [p.detach().clone() for p in model.parameters()]
            _reference_step(model, batch, optimizer, torch.nn.MSELoss(), max_norm)
    after = [p.detach() for p in model.parameters()]
    delta = (parameters_to_vector(after) - parameters_to_vector(before)).norm()
    per = [float((a - b).norm() / b.norm()) for a, b in zip(after, before)]
    return {
        "ratio-aliased": 0.0,
        "ratio-per-parameter": sum(per) / len(per),
        "ratio-over-after": float(delta / parameters_to_vector(after).norm()),
    }


def _check_numbers(returned, expected, label: str, seed: int, max_norm: float, step: int) -> None:
    if not isinstance(returned, (tuple, list)) or len(returned) != 3:
        summary = _("`train_step` should return three numbers (loss, grad_norm, update_ratio); got {type} for {label}.").format(type=type(returned).__name__, label=label)  # fmt: skip
        raise ExerciseError("type", summary, mistake="not-three")
    got = [_number(v, w, label) for v, w in zip(returned, (_("the loss"), "grad_norm", "update_ratio"))]
    loss, norm, ratio = (float(v) for v in expected)
    same = lambda a, b, rtol=1e-6: abs(a - b) <= rtol * abs(b) + 1e-12
    if not same(got[0], loss):
        raise _step_error(_("the returned loss is {got:.6g}, expected {loss:.6g} for {label}.").format(got=got[0], loss=loss, label=label), "loss")  # fmt: skip
    if not same(got[1], norm):
        mistake = "norm-after-clip" if same(got[1], min(norm, max_norm), rtol=1e-5) else "norm"
        raise _step_error(_("grad_norm is {got:.6g}, expected {norm:.6g} for {label}.").format(got=got[1], norm=norm, label=label), mistake)  # fmt: skip
    if not same(got[2], ratio):
        slips = _ratio_slips(seed, max_norm, step)
        mistake = next((m for m, value in slips.items() if same(got[2], value)), "ratio")
        raise _step_error(_("update_ratio is {got:.6g}, expected {ratio:.6g} for {label}.").format(got=got[2], ratio=ratio, label=label), mistake)  # fmt: skip


def check_train_step(train_step: Callable) -> None:
    """Check ``train_step(model, batch, optimizer, loss_fn, max_norm) -> (loss, grad_norm, update_ratio)``.

    Three steps, each right after a validation pass that left eval mode and stale ``.grad``; all six states
    are compared with the reference after every step, with ``max_norm`` below and above the gradient norm.

    >>> check_train_step(_reference_step)
    ✓ train_step leaves all six states as the reference does (2 set-ups × 3 steps, clipping on and off) and reports loss, grad_norm and update_ratio
    """
    learner = LearnerCall(train_step, "train_step", error_hints={"no_graph": NO_GRAPH_HINT}, frozen_inputs=False)
    for seed, max_norm, setting in STEP_SETUPS:
        run = lambda step, seed=seed, max_norm=max_norm: _run_steps(step, seed, max_norm)
        runs = run_variants(run, learner.on(_("a step ({setting})").format(setting=_(setting))), _reference_step, TRAIN_STEP_VARIANTS)  # fmt: skip
        for i, ((returned, state, changed), (expected, reference, _changed)) in enumerate(
            zip(runs.learner, runs.reference)
        ):
            label = _("step {i} of 3 ({setting}; Adam, Linear-Tanh-Dropout-Linear, float64)").format(i=i + 1, setting=_(setting))  # fmt: skip
            if changed:
                summary = _("`train_step` changed the caller's batch for {label}.").format(label=label)
                raise _step_error(summary, "batch-changed", "changed-input")
            if state.mode != "train":
                raise _step_error(_("after `train_step` the model is in {mode} mode for {label}.").format(mode=state.mode, label=label), "eval")  # fmt: skip
            differ = differences(state, reference)
            if differ:
                same_run = lambda mine, wrong: all(not differences(a[1], b[1]) for a, b in zip(mine, wrong))
                closest = runs.closest(same_run)
                mistake = closest.name if closest else ("rng-only" if differ == ["RNG state"] else "unnamed-state")
                summary = _("after {label}, these states differ from the reference: {differ}.").format(label=label, differ=", ".join(map(_, differ)))  # fmt: skip
                raise _step_error(summary, mistake)
            _check_numbers(returned, expected, label, seed, max_norm, i)
    passed(_("train_step leaves all six states as the reference does (2 set-ups × 3 steps, clipping on and off) and reports loss, grad_norm and update_ratio"))  # fmt: skip


# --------------------------------------------------------------------------- exercise 2: optimizer coverage


def _coverage(model, optimizer, slip: str = "") -> tuple[list[str], list[str]]:
    """(missing, frozen_inside): trainable parameters in no param group, frozen ones in some (by identity);
    ``slip`` (a key of ``_COVERAGE_HINTS``) makes that typical mistake."""
    members = [q for g in optimizer.param_groups[: 1 if slip == "first-group" else None] for q in g["params"]]
    if slip == "by-value":
        inside = lambda p: any(p.shape == q.shape and torch.equal(p, q) for q in members)
    else:
        inside = lambda p: id(p) in {id(q) for q in members}
    named = list(model.named_parameters())
    found = (lambda p: p.grad is not None) if slip == "grad-criterion" else inside
    missing = sorted(n for n, p in named if (p.requires_grad or slip == "no-requires-grad-filter") and not found(p))
    frozen = sorted(n for n, p in named if not p.requires_grad and (slip == "frozen-outside-listed" or inside(p)))
    return (frozen, missing) if slip == "swapped" else (missing, frozen)


_COVERAGE_HINTS = {
    "swapped": N_("the two lists are swapped: return (missing, frozen_inside) in that order."),
    "no-requires-grad-filter": N_("a frozen parameter outside the optimizer is fine: `missing` lists only trainable (requires_grad=True) parameters that no param group holds."),
    "frozen-outside-listed": N_("`frozen_inside` lists frozen parameters that ARE in the optimizer; frozen ones left out are correct."),
    "by-value": N_("a parameter was counted as covered because some optimizer parameter has equal *values* (both biases are zeros): compare identities with id(p), not values."),
    "first-group": N_("go through every param group (optimizer.param_groups[i]['params']), not only the first."),
    "grad-criterion": N_("`missing` means in no param group, whatever its `.grad`: a parameter may have no gradient yet (no backward ran) and still be in the optimizer, or have one and be outside it."),
}  # fmt: skip
COVERAGE_MISTAKES = mistakes(_COVERAGE_HINTS, {slip: partial(_coverage, slip=slip) for slip in _COVERAGE_HINTS})
COVERAGE_HINT = N_("missing = requires_grad and in no param group; frozen_inside = not requires_grad and in some group. Build `covered = {id(p) for g in optimizer.param_groups for p in g['params']}` and compare identities.")  # fmt: skip
IDENTITY_HINT = N_("`p in some_list` compares tensors by value (element-wise ==). Compare identities: build `covered = {id(p) for g in optimizer.param_groups for p in g['params']}`.")  # fmt: skip


def _names(result, label: str) -> tuple[list[str], list[str]]:
    pair = isinstance(result, (tuple, list)) and len(result) == 2
    lists = pair and all(isinstance(part, (list, tuple, set)) for part in result)
    if not lists or any(isinstance(x, torch.Tensor) for part in result for x in part):
        mistake = "tensors-not-names" if lists else "not-a-pair"
        summary = _("`optimizer_coverage` should return a pair (missing, frozen_inside) of lists of parameter *names* (from model.named_parameters()); got {type} for {label}.").format(type=type(result).__name__, label=label)  # fmt: skip
        raise ExerciseError("type", summary, mistake=mistake)
    return sorted(map(str, result[0])), sorted(map(str, result[1]))


def check_optimizer_coverage(optimizer_coverage: Callable) -> None:
    """Check ``optimizer_coverage(model, optimizer) -> (missing, frozen_inside)``: lists of parameter names.

    >>> check_optimizer_coverage(_coverage)
    ✓ optimizer_coverage finds the uncovered and the stale parameters in 4 set-ups, and changes nothing
    """
    hints = {"ambiguous_bool": IDENTITY_HINT, "size_mismatch": IDENTITY_HINT}
    learner = LearnerCall(optimizer_coverage, "optimizer_coverage", COURSE_OFF, hints)
    scenarios = list(setups.coverage_scenarios())
    layout = lambda model, optimizer: (
        [p.requires_grad for p in model.parameters()],
        [[id(p) for p in g["params"]] for g in optimizer.param_groups],
    )
    for label, model, optimizer in scenarios:
        before = layout(model, optimizer)
        got = _names(learner.on(label)(model, optimizer), label)
        if layout(model, optimizer) != before:
            summary = _("`optimizer_coverage` changed the model or the optimizer for {label} (a requires_grad flag or a param group's members).").format(label=label)  # fmt: skip
            hint = _("it should only look: report the problems, do not fix them.")
            raise ExerciseError("contract", summary, hint=hint, mistake="changed-model")
        expected = _coverage(model, optimizer)
        if got == expected:
            continue
        slip = next((m for m in COVERAGE_MISTAKES if tuple(map(sorted, m.compute(model, optimizer))) == got), None)
        summary = _("`optimizer_coverage` is wrong for {label}: got missing={missing}, frozen_inside={frozen}; expected missing={want_missing}, frozen_inside={want_frozen}.").format(label=label, missing=got[0], frozen=got[1], want_missing=expected[0], want_frozen=expected[1])  # fmt: skip
        raise ExerciseError("value", summary, hint=slip.hint if slip else COVERAGE_HINT, mistake=slip and slip.id)
    passed(_("optimizer_coverage finds the uncovered and the stale parameters in {n} set-ups, and changes nothing").format(n=len(scenarios)))  # fmt: skip


# --------------------------------------------------------------------------- exercise 3: evaluate


def _in_eval(model, fn):
    """``fn()`` with every module in eval mode and no graph; each module's mode restored after."""
    modes = {m: m.training for m in model.modules()}
    model.eval()
    with torch.no_grad():
        result = fn()
    for m, mode in modes.items():
        m.training = mode
    return result


def _evaluate_reference(model, batches, loss_fn) -> float:
    total = _in_eval(model, lambda: sum(loss_fn(model(x), y).item() * len(x) for x, y in batches))
    return total / sum(len(x) for x, _ in batches)


# (label, how the model comes in): train mode, eval mode, and fine-tuning with a frozen BatchNorm kept in eval.
EVAL_SETUPS = (
    ("train", N_("in train mode")),
    ("eval", N_("in eval mode")),
    ("mixed", N_("in train mode with its BatchNorm kept in eval mode (a frozen layer during fine-tuning)")),
)  # fmt: skip
EVAL_HINTS = {
    "graph": N_("run the loop under `torch.no_grad()` (or `torch.inference_mode()`); eval() alone does not turn gradients off, and detaching the output afterwards does not undo the graph the forward pass recorded."),
    "batch-changed": N_("compute on the batches, never in place."),
    "bn-statistics": N_("call model.eval() before the loop (no_grad() does not stop BatchNorm from updating its running statistics in train mode)."),
    "submodule-mode": N_("`model.train(...)` sets every submodule to the same mode, so the BatchNorm kept in eval mode came back in train mode. Remember each module's `training` flag (e.g. `{m: m.training for m in model.modules()}`) and restore each one."),
    "mode": N_("remember each module's `training` flag when `evaluate` starts and restore it at the end."),
    "tensor": N_("return a Python float: use `.item()` on the loss (inside no_grad it is cheap)."),
    "mean-of-means": N_("that is the mean of the three batch means: a batch of 3 samples weighs as much as one of 7. Weight each batch's loss by its size and divide by the number of samples."),
    "value": N_("average over samples: weight each batch's mean loss by its size and divide by the number of samples."),
}  # fmt: skip


def _evaluate_problem(got, model, batches, kept, state, modes, recorded, how) -> tuple[str, str] | None:
    """(mistake, what is wrong) after the learner's evaluate, or None."""
    bn = model[1]
    if any(recorded):
        return "graph", _("`evaluate` built autograd graphs")
    if any(not (torch.equal(x, kx) and torch.equal(y, ky)) for (x, y), (kx, ky) in zip(batches, kept)):
        return "batch-changed", _("`evaluate` changed the caller's batches")
    tracked = int(bn.num_batches_tracked) != int(state["1.num_batches_tracked"])
    if not torch.equal(bn.running_mean, state["1.running_mean"]) or tracked:
        return "bn-statistics", _("`evaluate` changed BatchNorm's running statistics")
    now = [m.training for m in model.modules()]
    if now != modes:
        mistake = "submodule-mode" if how == "mixed" and all(now) else "mode"
        return mistake, _("`evaluate` did not leave every module in the mode it came in ({how}; it leaves {modes})").format(how=how, modes=module_mode(model))  # fmt: skip
    if isinstance(got, torch.Tensor) or not isinstance(got, (float, int)) or isinstance(got, bool):
        return "tensor", _("`evaluate` returned a {type}, not a Python float").format(type=type(got).__name__)
    expected = _evaluate_reference(model, batches, torch.nn.functional.mse_loss)
    if abs(got - expected) > 1e-9 * abs(expected):
        means = _in_eval(model, lambda: [torch.nn.functional.mse_loss(model(x), y).item() for x, y in batches])
        mistake = "mean-of-means" if abs(got - sum(means) / len(means)) <= 1e-9 * abs(expected) else "value"
        return mistake, _("`evaluate` returned {got:.6g}, expected {expected:.6g}").format(got=got, expected=expected)
    return None


def check_evaluate(evaluate: Callable) -> None:
    """Check ``evaluate(model, batches, loss_fn) -> float``: eval mode, no graphs, per-sample mean, modes restored.

    >>> check_evaluate(_evaluate_reference)
    ✓ evaluate gives the per-sample mean loss and leaves no trace (graphs, BatchNorm statistics, every module's mode) in 3 set-ups
    """
    learner = LearnerCall(evaluate, "evaluate", frozen_inputs=False)  # the batches are checked below
    for seed, (how, described) in enumerate(EVAL_SETUPS):
        model, batches = setups.eval_setup(seed)
        model.train(how != "eval")
        if how == "mixed":
            model[1].eval()
        modes, state = [m.training for m in model.modules()], copy.deepcopy(model.state_dict())
        kept, recorded = [(x.clone(), y.clone()) for x, y in batches], []  # recorded: was autograd recording?
        label = _("a Linear-BatchNorm-ReLU-Dropout-Linear model {described}, batches of 5, 3, 7").format(described=_(described))  # fmt: skip

        def loss_fn(outputs, targets, log=recorded):  # an MSE (batch mean) that watches
            log.append(torch.is_grad_enabled() and outputs.requires_grad)
            return torch.nn.functional.mse_loss(outputs, targets)

        hook = model[0].register_forward_hook(lambda module, args, out, log=recorded: log.append(out.requires_grad))
        with torch.random.fork_rng(devices=[]), hook:
            torch.manual_seed(7)
            got = learner.on(label)(model, batches, loss_fn)
        problem = _evaluate_problem(got, model, batches, kept, state, modes, recorded, how)
        if problem is not None:
            mistake, summary = problem
            kind = "value" if mistake in ("mean-of-means", "value") else "type" if mistake == "tensor" else "contract"
            raise ExerciseError(kind, _("{summary} for {label}.").format(summary=summary, label=label), hint=EVAL_HINTS[mistake], mistake=mistake)  # fmt: skip
    passed(_("evaluate gives the per-sample mean loss and leaves no trace (graphs, BatchNorm statistics, every module's mode) in {n} set-ups").format(n=len(EVAL_SETUPS)))  # fmt: skip


# --------------------------------------------------------------------------- exercise 4: exact resume


def _save_reference(model, optimizer, scheduler, loader) -> dict:
    parts = {"model": model, "optimizer": optimizer, "scheduler": scheduler}
    state = {name: part.state_dict() for name, part in parts.items()}
    return copy.deepcopy({**state, "rng": torch.get_rng_state(), "loader": loader.generator.get_state()})


def _load_reference(checkpoint, model, optimizer, scheduler, loader) -> None:
    # optimizer.load_state_dict adopts the checkpoint's tensors (same dtype and device: no copy), and
    # training then updates them in place: load from a copy so the checkpoint stays as it was saved.
    state = copy.deepcopy(checkpoint)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"])
    loader.generator.set_state(state["loader"])


def _optimizer_tensors(optimizer) -> list[torch.Tensor]:
    state = optimizer.state_dict()["state"].values()
    return [v.detach().clone() for s in state for v in s.values() if isinstance(v, torch.Tensor)]


RESUME_HINTS = {
    "live-references": N_("state_dict() returns references to the live tensors, which kept changing: copy them when saving (copy.deepcopy(...), or torch.save to a file or buffer)."),
    "model": N_("load model.state_dict() into the new model."),
    "optimizer": N_("save optimizer.state_dict() and load it into the new optimizer: AdamW's step count and moment estimates otherwise start from zero."),
    "scheduler": N_("save and load scheduler.state_dict(): the learning rate otherwise restarts the schedule."),
    "rng": N_("save torch.get_rng_state() and restore it with torch.set_rng_state(...), so Dropout draws the same masks (a seed restarts the sequence from its beginning, not from where the run stopped)."),
    "loader": N_("the loader shuffles with its own generator (`loader.generator`), not the global RNG: save `loader.generator.get_state()` and restore it with `set_state`, so the next epochs replay the same order (a new loader, or a reseed, starts its sequence from the beginning)."),
    "shared-checkpoint": N_("`optimizer.load_state_dict(...)` keeps the checkpoint's own tensors as the optimizer's state (no copy when dtype and device match; `model.load_state_dict(..., assign=True)` does the same with the weights), and training updates them in place. Load from a copy (copy.deepcopy, or torch.load of bytes written by torch.save)."),
    "changed-run": N_("saving must only read the state: do not draw random numbers, reseed, or switch the model's mode in save_state."),
    "not-exact": N_("restore everything the next steps read: weights, optimizer state, schedule, the global RNG (Dropout) and the loader's generator (the order)."),
}  # fmt: skip


def _restored_wrong(fresh, at_save: dict) -> str | None:
    """Which part of the checkpoint the freshly loaded objects do not hold (a RESUME_HINTS key), or None."""
    model, optimizer, scheduler, loader = fresh
    params = _flat(model)
    moments = zip(_optimizer_tensors(optimizer), at_save["optimizer"])
    checks = (
        ("live-references", torch.equal(params, at_save["end"])),
        ("model", not torch.equal(params, at_save["params"])),
        ("optimizer", next(model.parameters()) not in optimizer.state or not all(torch.equal(*m) for m in moments)),
        ("scheduler", scheduler.get_last_lr()[0] != at_save["lr"]),
        ("rng", not torch.equal(torch.get_rng_state(), at_save["rng"])),
        ("loader", not torch.equal(loader.generator.get_state(), at_save["loader"])),
    )
    return next((part for part, wrong in checks if wrong), None)


def check_resume(save_state: Callable, load_state: Callable) -> None:
    """Check that ``load_state(save_state(...), fresh objects)`` continues training bit for bit, twice.

    ``save_state(model, optimizer, scheduler, loader)``; ``load_state(checkpoint, model, optimizer, scheduler,
    loader)``. The saved run trains on after ``save_state``; the checkpoint is then loaded into two fresh runs one
    after the other (a resume that crashed is retried from it).

    >>> check_resume(_save_reference, _load_reference)
    ✓ both resumes from your checkpoint are bit-exact with uninterrupted training (model, AdamW, StepLR, RNG, loader order)
    """
    save = LearnerCall(save_state, "save_state", COURSE_OFF, frozen_inputs=False)
    load = LearnerCall(load_state, "load_state", COURSE_OFF, frozen_inputs=False)
    label = _("2 epochs of AdamW + StepLR on a model with Dropout, shuffled by the loader's own generator, checkpoint, 2 more epochs")  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        for epochs in (4, 2):  # uninterrupted, then the run that is checkpointed after 2 epochs
            run = setups.resume_setup(0)
            torch.manual_seed(2024)  # the same Dropout masks in both
            setups.resume_train(*run, epochs=epochs)
            if epochs == 4:
                expected = _flat(run[0])
        at_save = {"params": _flat(run[0]).clone(), "rng": torch.get_rng_state(), "lr": run[2].get_last_lr()[0]}
        at_save.update(optimizer=_optimizer_tensors(run[1]), loader=run[3].generator.get_state())
        checkpoint = save.on(label)(*run)
        untouched = torch.equal(torch.get_rng_state(), at_save["rng"]) and run[0].training
        setups.resume_train(*run, epochs=2)  # the saved run goes on training
        at_save["end"] = _flat(run[0])
        if not untouched or not torch.equal(at_save["end"], expected):
            summary = _("`save_state` changed the run it saved: after it, training did not continue as it would have without a checkpoint.")  # fmt: skip
            raise ExerciseError("contract", summary, hint=RESUME_HINTS["changed-run"], mistake="changed-run")
        for attempt in (N_("first resume"), N_("second resume from the same checkpoint")):
            fresh = setups.resume_setup(attempt.startswith("second") + 1)  # other initial weights
            torch.manual_seed(1234)  # and another global RNG state, as in a new process
            load.on(_(attempt))(checkpoint, *fresh)
            part = _restored_wrong(fresh, at_save)
            if part is None:
                setups.resume_train(*fresh, epochs=2)
                if torch.equal(_flat(fresh[0]), expected):
                    continue
            diff = float((_flat(fresh[0]) - expected).abs().max())
            summary = _("after load_state ({attempt}) the run is not bit-exact (max |Δparameter| = {diff:.3g} after 2 more epochs).").format(attempt=_(attempt), diff=diff)  # fmt: skip
            if part:
                summary = _("after load_state ({attempt}) the run is not bit-exact: the {part} part is not as it was at the checkpoint.").format(attempt=_(attempt), part=part)  # fmt: skip
            if attempt.startswith("second"):
                summary = _("the first resume was bit-exact, but loading the same checkpoint again restored other {part}: training after the first resume changed the checkpoint.").format(part=part or _("state"))  # fmt: skip
            mistake = "shared-checkpoint" if attempt.startswith("second") else (part or "not-exact")
            raise ExerciseError("value", summary, hint=RESUME_HINTS[mistake], mistake=mistake)
    passed(_("both resumes from your checkpoint are bit-exact with uninterrupted training (model, AdamW, StepLR, RNG, loader order)"))  # fmt: skip
