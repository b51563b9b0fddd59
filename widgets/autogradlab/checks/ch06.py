"""Checkers for chapter 06 (one training step, line by line).

Each checker runs the learner's code on small float64 models next to a reference,
compares the state the exercise is about, and names the line that is missing or
out of place by running typical wrong variants on the same inputs. The global RNG
is left as the notebook had it (the checks seed their own runs inside ``fork_rng``).
"""

from __future__ import annotations

import contextlib
import copy
import sys
from collections.abc import Callable, Iterator

import torch
from torch.nn.utils import parameters_to_vector

from autogradlab.checks.core import ExerciseError, call_learner, passed
from autogradlab.models import train_state
from autogradlab.models.train_state import Snapshot, module_mode, snapshot
from autogradlab.torch_internals import version
from autogradlab.tracebacks import is_kind


class _HelperUsed(RuntimeError):
    """Raised when a learner's answer calls the course code that computes the answer."""


@contextlib.contextmanager
def _course_helpers_off(names: tuple[str, ...], what: str) -> Iterator[None]:
    """Make ``train_state.<name>`` raise while the learner's code runs (``what`` names the exercise's job).

    Each name is replaced where the learner reaches it (the package) and where the course's
    own functions call it (the submodule that defines it, e.g. ``snapshot`` calling ``_optimizer_state``).
    """
    owners = {name: (train_state, sys.modules[getattr(train_state, name).__module__]) for name in names}
    saved = {(owner, name): getattr(owner, name) for name in names for owner in owners[name]}

    def refuse(*args, **kwargs):
        raise _HelperUsed(
            f"this exercise asks you to {what} yourself, but your code called the course's own code "
            "in autogradlab.models.train_state, which does it for you."
        )

    try:
        for owner, name in saved:
            setattr(owner, name, refuse)
        yield
    finally:
        for (owner, name), original in saved.items():
            setattr(owner, name, original)


def _close(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    # Loose enough for clipping by hand without clip_grad_norm_'s 1e-6 in the denominator.
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and torch.allclose(a.double(), b.double(), rtol=1e-5, atol=1e-9)


def _differences(got: Snapshot, expected: Snapshot) -> list[str]:
    """The states (of the six) in which two snapshots of the same model differ."""
    out = []
    if not all(_close(got.grads[n], expected.grads[n]) for n in expected.grads):
        out.append(".grad")
    if not all(_close(got.params[n], expected.params[n]) for n in expected.params):
        out.append("parameter values")
    for name, state in expected.optimizer.items():
        mine = got.optimizer[name]
        if (state is None) != (mine is None) or (
            state and (state.keys() != mine.keys() or not all(_close(mine[k], state[k]) for k in state))
        ):
            out.append("optimizer state")
            break
    if got.mode != expected.mode:
        out.append("module mode")
    if got.rng != expected.rng:
        out.append("RNG state")
    return out


def _flat_params(model) -> torch.Tensor:
    return parameters_to_vector(model.parameters()).detach()


# --------------------------------------------------------------------------- exercise 1: a step that reports

# One set-up clips on every step (the gradient norm is about 0.6 to 1.6), the other never does.
STEP_SETUPS = (
    (0, 0.25, "max_norm = 0.25, below the gradient norm"),
    (1, 2.0, "max_norm = 2.0, above the gradient norm"),
)
STEPS = 3


def _step_data(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Dropout(0.3), torch.nn.Linear(7, 3)
    ).double()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(100 + seed)
    batches = [
        (torch.randn(6, 5, generator=gen, dtype=torch.float64), torch.randn(6, 3, generator=gen, dtype=torch.float64))
        for _ in range(STEPS)
    ]
    validation = (
        torch.randn(4, 5, generator=gen, dtype=torch.float64),
        torch.randn(4, 3, generator=gen, dtype=torch.float64),
    )
    return model, optimizer, batches, validation


class _StepRecord:
    """What one call of a train_step left behind: its return value, the six states, the batch."""

    def __init__(self, returned, state: Snapshot, batch_changed: bool):
        self.returned, self.state, self.batch_changed = returned, state, batch_changed


def _run_steps(step_fn: Callable, seed: int, max_norm: float, call=None) -> list[_StepRecord]:
    """``STEPS`` steps, each right after a validation pass that forgot no_grad (eval mode, stale .grad)."""
    records = []
    with torch.random.fork_rng(devices=[]):
        model, optimizer, batches, (vx, vy) = _step_data(seed)
        loss_fn = torch.nn.MSELoss()
        torch.manual_seed(1000 + seed)  # the Dropout masks
        for i, batch in enumerate(batches):
            model.eval()
            loss_fn(model(vx), vy).backward()
            kept = [(t.clone(), version(t), t.requires_grad) for t in batch]
            args = (model, batch, optimizer, loss_fn, max_norm)
            returned = call(step_fn, args, i) if call else step_fn(*args)
            changed = any(
                not torch.equal(t, c) or version(t) != v or t.requires_grad != r for t, (c, v, r) in zip(batch, kept)
            )
            records.append(_StepRecord(returned, snapshot(model, optimizer), changed))
    return records


def _reference_step(model, batch, optimizer, loss_fn, max_norm=1.0):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(batch[0]), batch[1])
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    before = torch.nn.utils.parameters_to_vector(model.parameters()).detach()  # cat makes a copy
    optimizer.step()
    after = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    return loss.detach(), grad_norm, (after - before).norm() / before.norm()


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
    "eval": "the model stayed in eval mode (Dropout was off): call model.train() at the start of the step; "
    "eval() from the validation pass sticks until you switch back.",
    "train_late": "model.train() came after the forward pass, so Dropout was still off for it: switch the mode "
    "first, at the top of the step.",
    "no_zero": "stale gradients: the validation pass left .grad full and backward() adds into it. "
    "Call optimizer.zero_grad(set_to_none=True) before loss.backward().",
    "zero_after": "optimizer.step() found no gradients: zero_grad ran after backward and threw them away. "
    "Clear the gradients before backward, never between backward and step.",
    "step_first": "optimizer.step() ran before loss.backward(), so it found no gradient of this batch. "
    "The order is zero_grad, forward, loss, backward, clip, step.",
    "no_clip": "the update used unclipped gradients: call torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) "
    "after loss.backward() and before optimizer.step() (before backward there is nothing to clip yet).",
    "clip_after": "the gradients were clipped after optimizer.step(): the update had already used the unclipped ones. "
    "Clip between backward and step.",
    "always_scale": "the gradients were scaled to norm max_norm although their norm was already below it: "
    "clipping only ever scales down (clip_grad_norm_ leaves them as they are then).",
    "clip_value": "clip_grad_value_ clamps each element; the exercise clips the total norm of all gradients "
    "together: torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm).",
    "per_parameter": "each parameter's gradient was clipped on its own; the norm to clip is the total norm of all "
    "gradients taken together (one call of clip_grad_norm_ on model.parameters()).",
    "extra_forward": "the step ran the model a second time (for the log?): in train mode that draws new Dropout "
    "masks, so the RNG state (and every later step) differs. Log the loss of the one forward pass.",
}


def _number(value, label: str, what: str) -> float:
    if isinstance(value, torch.Tensor):
        if value.grad_fn is not None or value.requires_grad:
            raise ExerciseError(
                f"`train_step` returned {what} with its autograd graph for {label}: whoever logs it keeps the "
                "graph (and its saved tensors) alive. Return `.detach()` (a tensor without graph) or `.item()`."
            )
        if value.numel() != 1:
            raise ExerciseError(f"{what} should be one number, got a tensor of shape {tuple(value.shape)} for {label}.")
        return float(value.detach())
    if isinstance(value, (float, int)) and not isinstance(value, bool):
        return float(value)
    raise ExerciseError(f"{what} should be a Python float or a 0-dim tensor, got {type(value).__name__} for {label}.")


def _call_step(fn, args, name, label):
    try:
        return call_learner(fn, args, name, label)
    except ExerciseError as error:
        if is_kind(error, "no_graph"):
            raise ExerciseError(
                f"{error}\nHint: the forward pass ran without autograd (under torch.no_grad() or inference_mode, "
                "or the loss was detached), so backward has no graph. Only the logging may be outside autograd."
            ) from None
        raise


def _check_numbers(returned, ref_returned, label: str, ratio_variants: dict, clipped_norm: float) -> None:
    if not isinstance(returned, (tuple, list)) or len(returned) != 3:
        raise ExerciseError(
            f"`train_step` should return three numbers (loss, grad_norm, update_ratio); got {type(returned).__name__}"
            f"{'' if not isinstance(returned, (tuple, list)) else f' of length {len(returned)}'} for {label}."
        )
    loss, norm, ratio = (_number(v, label, w) for v, w in zip(returned, ("the loss", "grad_norm", "update_ratio")))
    ref_loss, ref_norm, ref_ratio = (float(v) for v in ref_returned)

    def same(a, b, rtol=1e-6):
        return abs(a - b) <= rtol * abs(b) + 1e-12

    if not same(loss, ref_loss):
        raise ExerciseError(
            f"the returned loss is {loss:.6g}, expected {ref_loss:.6g} (the loss of this batch before "
            f"the update) for {label}."
        )
    if not same(norm, ref_norm):
        hint = (
            "that is the norm after clipping: take the total norm before clipping (clip_grad_norm_ returns it)."
            if same(norm, clipped_norm, rtol=1e-5)
            else "grad_norm is the L2 norm of all parameter gradients taken together, before clipping."
        )
        raise ExerciseError(f"grad_norm is {norm:.6g}, expected {ref_norm:.6g} for {label}.\nHint: {hint}")
    if not same(ratio, ref_ratio):
        hint = "update_ratio = ‖θ_after − θ_before‖ / ‖θ_before‖ with θ all parameters as one vector."
        if ratio == 0.0:
            hint = (
                "your θ_before changed with the parameters: `p.detach()` (and a list of them) shares storage with p, "
                "and optimizer.step() updates p in place. Keep a copy: `.clone()` (or torch.cat / "
                "parameters_to_vector, which allocate new memory)."
            )
        for text, value in ratio_variants.items():
            if same(ratio, value):
                hint = text
        raise ExerciseError(f"update_ratio is {ratio:.6g}, expected {ref_ratio:.6g} for {label}.\nHint: {hint}")


def _ratio_variants(seed: int, max_norm: float, step: int) -> dict[str, float]:
    """Wrong update ratios a learner may compute at ``step``, for the hint."""
    with torch.random.fork_rng(devices=[]):
        model, optimizer, batches, (vx, vy) = _step_data(seed)
        loss_fn = torch.nn.MSELoss()
        torch.manual_seed(1000 + seed)
        for i in range(step + 1):  # replay the check's run up to this step
            model.eval()
            loss_fn(model(vx), vy).backward()
            before = [p.detach().clone() for p in model.parameters()]
            _reference_step(model, batches[i], optimizer, loss_fn, max_norm)
        after = [p.detach() for p in model.parameters()]
    per = [float((a - b).norm() / b.norm()) for a, b in zip(after, before)]
    delta = (parameters_to_vector(after) - parameters_to_vector(before)).norm()
    return {
        "that is the mean of the per-parameter ratios: take one norm over all parameters as one vector.": sum(per)
        / len(per),
        "divide by ‖θ_before‖, the parameters before the step, not after it.": float(
            delta / parameters_to_vector(after).norm()
        ),
    }


def check_train_step(train_step: Callable) -> None:
    """Check ``train_step(model, batch, optimizer, loss_fn, max_norm) -> (loss, grad_norm, update_ratio)``.

    Three steps, each right after a validation pass that left eval mode and stale ``.grad``;
    all six states are compared with the reference after every step, with ``max_norm``
    below and above the gradient norm.

    >>> check_train_step(_reference_step)
    ✓ train_step leaves all six states as the reference does (2 set-ups × 3 steps, clipping on and off) and reports loss, grad_norm and update_ratio
    """

    def call(fn, args, i):
        return _call_step(fn, args, "train_step", f"step {i + 1}")

    for seed, max_norm, setting in STEP_SETUPS:
        reference = _run_steps(_reference_step, seed, max_norm)
        mine = _run_steps(train_step, seed, max_norm, call)
        wrong = {kind: _run_steps(_variant(kind), seed, max_norm) for kind in TRAIN_STEP_MISTAKES}
        for i, (got, ref) in enumerate(zip(mine, reference)):
            label = f"step {i + 1} of 3 ({setting}; Adam, Linear-Tanh-Dropout-Linear, float64)"
            if got.batch_changed:
                raise ExerciseError(
                    f"`train_step` changed the caller's batch for {label}. Hint: `x = batch[0]` is the caller's tensor, "
                    "not a copy; an in-place op on it (`x -= ...`, `x.div_(...)`) changes the data set itself. "
                    "Write `x = batch[0] - ...` instead."
                )
            if got.state.mode != "train":
                raise ExerciseError(
                    f"after `train_step` the model is in {got.state.mode} mode for {label}.\n"
                    f"Hint: {TRAIN_STEP_MISTAKES['eval']}"
                )
            differ = _differences(got.state, ref.state)
            if differ:
                for kind, hint in TRAIN_STEP_MISTAKES.items():
                    if all(not _differences(m.state, w.state) for m, w in zip(mine, wrong[kind])):
                        raise ExerciseError(
                            f"after {label}, these states differ from the reference: {', '.join(differ)}.\nHint: {hint}"
                        )
                hint = (
                    "step through your function with TrainStepInspector(train_step) and compare each line's "
                    "changes with the state table at the top of the chapter."
                )
                if differ == ["RNG state"]:
                    hint = (
                        "only the RNG state differs: your step drew random numbers the reference does not draw "
                        "(a second forward pass in train mode, torch.rand..., or a reseed)."
                    )
                raise ExerciseError(
                    f"after {label}, these states differ from the reference: {', '.join(differ)}.\nHint: {hint}"
                )
            ref_norm = float(ref.returned[1])
            _check_numbers(
                got.returned, ref.returned, label, _ratio_variants(seed, max_norm, i), min(ref_norm, max_norm)
            )
    passed(
        "train_step leaves all six states as the reference does (2 set-ups × 3 steps, clipping on and off) "
        "and reports loss, grad_norm and update_ratio"
    )


# --------------------------------------------------------------------------- exercise 2: optimizer coverage


def _coverage_reference(model, optimizer) -> tuple[list[str], list[str]]:
    covered = {id(p) for group in optimizer.param_groups for p in group["params"]}
    missing = [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in covered]
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad and id(p) in covered]
    return missing, frozen


def _coverage_scenarios():
    """(label, model, optimizer) cases: a head added late, a frozen layer kept inside, groups, equal values."""
    torch.manual_seed(0)

    body = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 3))
    opt = torch.optim.AdamW(body.parameters(), lr=1e-3)
    body.add_module("head", torch.nn.Linear(3, 3))  # added after the optimizer was built
    torch.nn.init.zeros_(body.head.bias)
    torch.nn.init.zeros_(body[2].bias)  # equal values to the head's bias: only identity tells them apart
    yield "a head added after the optimizer was built", body, opt

    net = torch.nn.ModuleDict({"embed": torch.nn.Embedding(6, 3), "proj": torch.nn.Linear(3, 5)})
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    net["embed"].weight.requires_grad_(False)  # frozen after the optimizer was built
    yield "an embedding frozen after the optimizer was built", net, opt

    net = torch.nn.Sequential(torch.nn.Linear(2, 5), torch.nn.LayerNorm(5), torch.nn.Linear(5, 1))
    net[0].requires_grad_(False)  # frozen before, correctly left out
    opt = torch.optim.SGD([{"params": net[1].parameters(), "lr": 0.01}, {"params": net[2].parameters()}], lr=0.1)
    yield "two param groups, a frozen layer correctly left out", net, opt

    net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 3))
    opt = torch.optim.Adam([net[0].weight, net[1].bias], lr=0.1)
    net[1].bias.requires_grad_(False)
    net[0].bias.requires_grad_(False)
    yield "a hand-picked list of parameters", net, opt


def _names(result, label: str) -> tuple[list[str], list[str]]:
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise ExerciseError(
            f"`optimizer_coverage` should return a pair (missing, frozen_inside) of lists of names; "
            f"got {type(result).__name__} for {label}."
        )
    out = []
    for part in result:
        if isinstance(part, torch.Tensor) or not isinstance(part, (list, tuple, set)):
            raise ExerciseError(
                f"each part of the result should be a list of parameter names; got {type(part).__name__}."
            )
        if any(isinstance(x, torch.Tensor) for x in part):
            raise ExerciseError(
                "return the parameter *names* (from model.named_parameters()), not the Parameter tensors."
            )
        out.append(sorted(str(x) for x in part))
    return out[0], out[1]


def _layout(model, optimizer) -> tuple:
    """What optimizer_coverage must leave alone: requires_grad flags and the param groups' members."""
    return (
        [(n, p.requires_grad) for n, p in model.named_parameters()],
        [[id(p) for p in group["params"]] for group in optimizer.param_groups],
    )


def check_optimizer_coverage(optimizer_coverage: Callable) -> None:
    """Check ``optimizer_coverage(model, optimizer) -> (missing, frozen_inside)``: lists of parameter names.

    >>> check_optimizer_coverage(_coverage_reference)
    ✓ optimizer_coverage finds the uncovered and the stale parameters in 4 set-ups, and changes nothing
    """
    scenarios = list(_coverage_scenarios())
    for label, model, optimizer in scenarios:
        layout = _layout(model, optimizer)
        try:
            with _course_helpers_off(("_optimizer_state",), "find which parameters the optimizer holds"):
                result = call_learner(optimizer_coverage, (model, optimizer), "optimizer_coverage", label)
        except ExerciseError as error:
            if is_kind(error, "ambiguous_bool") or is_kind(error, "size_mismatch"):
                raise ExerciseError(
                    f"{error}\nHint: `p in some_list` compares tensors by value (element-wise ==). "
                    "Compare identities: build `covered = {id(p) for g in optimizer.param_groups for p in g['params']}`."
                ) from None
            raise
        if _layout(model, optimizer) != layout:
            raise ExerciseError(
                f"`optimizer_coverage` changed the model or the optimizer for {label} (a requires_grad flag or a "
                "param group's members). It should only look: report the problems, do not fix them."
            )
        got_missing, got_frozen = _names(result, label)
        missing, frozen = (sorted(x) for x in _coverage_reference(model, optimizer))
        if (got_missing, got_frozen) == (missing, frozen):
            continue
        frozen_outside = sorted(n for n, p in model.named_parameters() if not p.requires_grad and n not in frozen)
        head = (
            f"`optimizer_coverage` is wrong for {label}: got missing={got_missing}, frozen_inside={got_frozen}; "
            f"expected missing={missing}, frozen_inside={frozen}."
        )
        if (got_frozen, got_missing) == (missing, frozen) and missing != frozen:
            hint = "the two lists are swapped: return (missing, frozen_inside) in that order."
        elif set(got_missing) - set(missing) and set(got_missing) - set(missing) <= set(frozen_outside):
            hint = (
                "a frozen parameter outside the optimizer is fine: `missing` lists only trainable "
                "(requires_grad=True) parameters that no param group holds."
            )
        elif set(got_frozen) - set(frozen) and set(got_frozen) - set(frozen) <= set(frozen_outside):
            hint = (
                "`frozen_inside` lists frozen parameters that ARE in the optimizer; frozen ones left out are correct."
            )
        elif set(missing) - set(got_missing) and not set(got_missing) - set(missing):
            hint = (
                "a parameter was counted as covered because some optimizer parameter has equal *values* "
                "(both biases are zeros): compare identities with id(p), not values."
            )
        elif set(frozen) - set(got_frozen):
            hint = "a parameter with requires_grad=False that is still in a param group is missing from frozen_inside."
        else:
            hint = "go through every param group (optimizer.param_groups[i]['params']), and compare with id(p)."
        raise ExerciseError(f"{head}\nHint: {hint}")
    passed(
        f"optimizer_coverage finds the uncovered and the stale parameters in {len(scenarios)} set-ups, and changes nothing"
    )


# --------------------------------------------------------------------------- exercise 3: evaluate


def _eval_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU(), torch.nn.Dropout(0.4), torch.nn.Linear(6, 2)
    ).double()
    with torch.no_grad():  # a few training batches so the running statistics are not the defaults
        for _ in range(3):
            model(torch.randn(8, 4, dtype=torch.float64) * 2 + 1)
    return model


def _eval_batches(seed: int):
    gen = torch.Generator().manual_seed(50 + seed)
    return [
        (torch.randn(n, 4, generator=gen, dtype=torch.float64), torch.randn(n, 2, generator=gen, dtype=torch.float64))
        for n in (5, 3, 7)
    ]


class _RecordingLoss:
    """MSE (batch mean) that records whether autograd was recording when it was called."""

    def __init__(self):
        self.grad_enabled = []

    def __call__(self, outputs, targets):
        self.grad_enabled.append(torch.is_grad_enabled() and outputs.requires_grad)
        return torch.nn.functional.mse_loss(outputs, targets)


def _evaluate_reference(model, batches, loss_fn) -> float:
    modes = {m: m.training for m in model.modules()}
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y in batches:
            total += loss_fn(model(x), y).item() * len(x)
            count += len(x)
    for m, mode in modes.items():
        m.training = mode
    return total / count


# (label, how the model comes in): train mode, eval mode, and fine-tuning with a frozen BatchNorm kept in eval.
EVAL_SETUPS = (
    ("train", "in train mode"),
    ("eval", "in eval mode"),
    ("mixed", "in train mode with its BatchNorm kept in eval mode (a frozen layer during fine-tuning)"),
)


def _set_mode(model, how: str) -> None:
    model.train(how != "eval")
    if how == "mixed":
        model[1].eval()


def check_evaluate(evaluate: Callable) -> None:
    """Check ``evaluate(model, batches, loss_fn) -> float``: eval mode, no graphs, per-sample mean, modes restored.

    >>> check_evaluate(_evaluate_reference)
    ✓ evaluate gives the per-sample mean loss and leaves no trace (graphs, BatchNorm statistics, every module's mode) in 3 set-ups
    """
    for seed, (how, described) in enumerate(EVAL_SETUPS):
        model = _eval_model(seed)
        _set_mode(model, how)
        modes = [m.training for m in model.modules()]
        state = copy.deepcopy(model.state_dict())
        batches = _eval_batches(seed)
        kept = [(x.clone(), y.clone()) for x, y in batches]
        loss_fn = _RecordingLoss()
        recorded = []
        hook = model[0].register_forward_hook(lambda module, args, out: recorded.append(out.requires_grad))
        label = f"a Linear-BatchNorm-ReLU-Dropout-Linear model {described}, batches of 5, 3, 7"
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(7)
                got = call_learner(evaluate, (model, batches, loss_fn), "evaluate", label)
        finally:
            hook.remove()
        if any(loss_fn.grad_enabled) or any(recorded):
            raise ExerciseError(
                f"`evaluate` built autograd graphs for {label}: run the loop under `torch.no_grad()` "
                "(or `torch.inference_mode()`); eval() alone does not turn gradients off, and detaching the "
                "output afterwards does not undo the graph the forward pass recorded."
            )
        if any(not (torch.equal(x, kx) and torch.equal(y, ky)) for (x, y), (kx, ky) in zip(batches, kept)):
            raise ExerciseError(
                f"`evaluate` changed the caller's batches for {label}: compute on them, never in place."
            )
        bn = model[1]
        if not torch.equal(bn.running_mean, state["1.running_mean"]) or int(bn.num_batches_tracked) != int(
            state["1.num_batches_tracked"]
        ):
            raise ExerciseError(
                f"`evaluate` changed BatchNorm's running statistics for {label}: call model.eval() before the loop "
                "(no_grad() does not stop BatchNorm from updating them in train mode)."
            )
        now = [m.training for m in model.modules()]
        if now != modes:
            if how == "mixed" and all(now):
                hint = (
                    "`model.train(...)` sets every submodule to the same mode, so the BatchNorm kept in eval mode "
                    "came back in train mode. Remember each module's `training` flag "
                    "(e.g. `{m: m.training for m in model.modules()}`) and restore each one."
                )
            else:
                came = {"train": "train", "eval": "eval", "mixed": "mixed (BatchNorm in eval)"}[how]
                hint = (
                    f"it came in {came} mode and leaves in {module_mode(model)} mode: remember "
                    "each module's `training` flag when `evaluate` starts and restore it at the end."
                )
            raise ExerciseError(
                f"`evaluate` did not leave every module in the mode it came in for {label}.\nHint: {hint}"
            )
        if isinstance(got, torch.Tensor):
            raise ExerciseError(
                "`evaluate` should return a Python float: use `.item()` on the loss (inside no_grad it is cheap)."
            )
        if not isinstance(got, (float, int)) or isinstance(got, bool):
            raise ExerciseError(f"`evaluate` should return a Python float, got {type(got).__name__}.")
        expected = _evaluate_reference(model, batches, torch.nn.functional.mse_loss)
        outputs = [_eval_out(model, x) for x, _ in batches]
        mean_of_means = sum(torch.nn.functional.mse_loss(o, y).item() for o, (_, y) in zip(outputs, batches)) / len(
            batches
        )
        if abs(got - expected) > 1e-9 * abs(expected):
            hint = (
                "average over samples: weight each batch's mean loss by its size and divide by the number of samples."
            )
            if abs(got - mean_of_means) <= 1e-9 * abs(mean_of_means):
                hint = (
                    "that is the mean of the three batch means: a batch of 3 samples weighs as much as one of 7. "
                    "Weight each batch's loss by its size and divide by the number of samples."
                )
            raise ExerciseError(f"`evaluate` returned {got:.6g}, expected {expected:.6g} for {label}.\nHint: {hint}")
    passed(
        "evaluate gives the per-sample mean loss and leaves no trace (graphs, BatchNorm statistics, every module's mode) "
        f"in {len(EVAL_SETUPS)} set-ups"
    )


def _eval_out(model, x):
    modes = {m: m.training for m in model.modules()}
    model.eval()
    with torch.no_grad():
        out = model(x)
    for m, mode in modes.items():
        m.training = mode
    return out


# --------------------------------------------------------------------------- exercise 4: exact resume


def _resume_objects(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1)
    ).double()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    return model, optimizer, scheduler


def _resume_train(model, optimizer, scheduler, steps: range) -> None:
    for step in steps:
        gen = torch.Generator().manual_seed(step)  # data of step i is fixed: only the training state can differ
        x = torch.randn(10, 3, generator=gen, dtype=torch.float64)
        y = x.sum(dim=1, keepdim=True).sin()
        model.train()
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        scheduler.step()


def _save_reference(model, optimizer, scheduler) -> dict:
    return copy.deepcopy(
        {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "rng": torch.get_rng_state(),
        }
    )


def _load_reference(state, model, optimizer, scheduler) -> None:
    # optimizer.load_state_dict adopts the checkpoint's tensors (same dtype and device: no copy), and
    # training then updates them in place: load from a copy so the checkpoint stays as it was saved.
    state = copy.deepcopy(state)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"])


def _optimizer_tensors(optimizer) -> list[torch.Tensor]:
    return [
        v.detach().clone()
        for s in optimizer.state_dict()["state"].values()
        for v in s.values()
        if isinstance(v, torch.Tensor)
    ]


_RESUME_HELPERS = ("_save_parts", "_load_parts", "resume_experiment")


def _resume(state, load_state, seed: int, label: str, at_save: dict, again: bool = False) -> torch.Tensor:
    """Load ``state`` into objects built from ``seed`` in another RNG state, check them, train 3 more steps.

    ``again``: the checkpoint was loaded and trained from before, so a difference means
    that the earlier resume changed the checkpoint.
    """
    fresh, fresh_opt, fresh_sched = _resume_objects(seed)  # other initial weights
    torch.manual_seed(1000 + seed)  # and another RNG state, as in a new process
    with _course_helpers_off(_RESUME_HELPERS, "write the checkpoint code"):
        call_learner(load_state, (state, fresh, fresh_opt, fresh_sched), "load_state", label)

    def fail(what: str, message: str):
        if not again:
            raise ExerciseError(message)
        raise ExerciseError(
            f"the first resume was bit-exact, but loading the same checkpoint again restored other {what}: "
            "training after the first resume changed the checkpoint.\nHint: `optimizer.load_state_dict(...)` keeps "
            "the checkpoint's own tensors as the optimizer's state (no copy when dtype and device match; "
            "`model.load_state_dict(..., assign=True)` does the same with the weights), and training updates them "
            "in place. Load from a copy (copy.deepcopy, or torch.load of bytes written by torch.save)."
        )

    params = _flat_params(fresh)
    if torch.equal(params, at_save["end"]):
        fail(
            "model weights",
            (
                f"after load_state ({label}) the model holds the weights from the END of the run, not from the checkpoint: "
                "state_dict() returns references to the live tensors, which kept changing. "
                "Copy them when saving (copy.deepcopy(...), or torch.save to a file/buffer)."
            ),
        )
    if not torch.equal(params, at_save["params"]):
        fail(
            "model weights",
            f"after load_state ({label}) the model's weights differ from the checkpoint: load model.state_dict().",
        )
    first = next(fresh.parameters())
    if first not in fresh_opt.state or not torch.equal(fresh_opt.state[first]["step"], at_save["step"]):
        fail(
            "optimizer state",
            (
                f"the optimizer state was not restored ({label}): AdamW's step count and moment estimates start from zero. "
                "Save optimizer.state_dict() and load it into the new optimizer."
            ),
        )
    if not all(torch.equal(a, b) for a, b in zip(_optimizer_tensors(fresh_opt), at_save["optimizer"])):
        fail(
            "optimizer state", f"the optimizer state after load_state ({label}) differs from the one at the checkpoint."
        )
    if fresh_sched.get_last_lr()[0] != at_save["lr"]:
        fail(
            "learning-rate schedule",
            (
                f"the learning-rate schedule was not restored ({label}): lr is {fresh_sched.get_last_lr()[0]:g}, "
                f"it was {at_save['lr']:g} at the checkpoint. Save and load scheduler.state_dict()."
            ),
        )
    if not torch.equal(torch.get_rng_state(), at_save["rng"]):
        fail(
            "RNG state",
            (
                f"the RNG state was not restored ({label}), so Dropout draws different masks after resuming: "
                "save torch.get_rng_state() and restore it with torch.set_rng_state(...) (a seed restarts the "
                "sequence from its beginning, not from where the run stopped)."
            ),
        )
    _resume_train(fresh, fresh_opt, fresh_sched, range(3, 6))
    return _flat_params(fresh)


def check_resume(save_state: Callable, load_state: Callable) -> None:
    """Check that ``load_state(save_state(...), fresh objects)`` continues training bit for bit, twice.

    The saved run trains on after ``save_state``; the checkpoint is then loaded into two
    fresh runs one after the other (a resume that crashed is retried from it).

    >>> check_resume(_save_reference, _load_reference)
    ✓ both resumes from your checkpoint are bit-exact with uninterrupted training (model, AdamW, StepLR, RNG)
    """
    label = "3 steps of AdamW + StepLR on a model with Dropout, checkpoint, 3 more steps"
    with torch.random.fork_rng(devices=[]):
        model, optimizer, scheduler = _resume_objects(0)
        _resume_train(model, optimizer, scheduler, range(6))
        expected = _flat_params(model)

        model, optimizer, scheduler = _resume_objects(0)
        _resume_train(model, optimizer, scheduler, range(3))
        at_save = {
            "params": _flat_params(model).clone(),
            "rng": torch.get_rng_state(),
            "lr": scheduler.get_last_lr()[0],
            "step": optimizer.state[next(model.parameters())]["step"].clone(),
            "optimizer": _optimizer_tensors(optimizer),
        }
        with _course_helpers_off(_RESUME_HELPERS, "write the checkpoint code"):
            state = call_learner(save_state, (model, optimizer, scheduler), "save_state", label)
        if not torch.equal(torch.get_rng_state(), at_save["rng"]) or not model.training:
            raise ExerciseError(
                "`save_state` changed the run it saved (it drew random numbers, reseeded, or switched the model's "
                "mode): saving must only read the state."
            )
        _resume_train(model, optimizer, scheduler, range(3, 6))  # the saved run goes on training
        at_save["end"] = _flat_params(model)
        if not torch.equal(at_save["end"], expected):
            raise ExerciseError(
                "`save_state` changed the run it saved: after it, training did not continue as it "
                "would have without a checkpoint. Saving must only read the state."
            )

        first = _resume(state, load_state, 1, "first resume", at_save)
        if not torch.equal(first, expected):
            diff = float((first - expected).abs().max())
            raise ExerciseError(f"the resumed run is not bit-exact: max |Δparameter| = {diff:.3g} after 3 more steps.")
        second = _resume(state, load_state, 2, "second resume from the same checkpoint", at_save, again=True)
        if not torch.equal(second, expected):
            diff = float((second - expected).abs().max())
            raise ExerciseError(
                f"the second resume from the same checkpoint is not bit-exact (max |Δparameter| = {diff:.3g}): "
                "training after the first resume changed the checkpoint. Load from a copy."
            )
    passed("both resumes from your checkpoint are bit-exact with uninterrupted training (model, AdamW, StepLR, RNG)")
