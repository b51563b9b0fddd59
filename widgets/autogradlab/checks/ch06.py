"""Checkers for chapter 06 (one training step, line by line).

Each checker runs the learner's code on small float64 models and compares with a
reference step, then names the line that is missing or out of place by running
the typical wrong variants on the same inputs.
"""

from __future__ import annotations

import copy
from typing import Callable

import torch

from autogradlab.checks.core import ExerciseError, call_learner, compare, passed

# --------------------------------------------------------------------------- exercise: train_step

MAX_NORM = 0.05  # small enough that clipping is active on every step of the check


def _step_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Dropout(0.3), torch.nn.Linear(7, 3)
    ).double()


def _step_batches(seed: int, steps: int = 3) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(100 + seed)
    return [(torch.randn(6, 5, generator=gen, dtype=torch.float64), torch.randn(6, 3, generator=gen, dtype=torch.float64))
            for _ in range(steps)]


def _flat_params(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _run_steps(step_fn: Callable, seed: int, call=None):
    """Three steps on a model that comes out of a validation pass: eval mode, stale .grad buffers."""
    model = _step_model(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    loss_fn = torch.nn.MSELoss()
    batches = _step_batches(seed)
    model.eval()
    loss_fn(model(batches[0][0] + 1), batches[0][1]).backward()  # a validation pass that forgot no_grad
    torch.manual_seed(1000 + seed)  # the dropout masks
    returned = []
    for i, batch in enumerate(batches):
        args = (model, batch, optimizer, loss_fn, MAX_NORM)
        returned.append(call(step_fn, args, i) if call else step_fn(*args))
    return model, returned


def _reference_step(model, batch, optimizer, loss_fn, max_norm):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(batch[0]), batch[1])
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.detach()


def _variant(*, train=True, zero="before", clip=True):
    """A train_step with one typical slip (other slips have the same effect as one of these)."""

    def step(model, batch, optimizer, loss_fn, max_norm):
        if train:
            model.train()
        if zero == "before":
            optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(batch[0]), batch[1])
        loss.backward()
        if zero == "after_backward":
            optimizer.zero_grad(set_to_none=True)
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        return loss.detach()

    return step


TRAIN_STEP_MISTAKES = {
    "the model stayed in eval mode (Dropout was off): call model.train() at the start of the step; "
    "eval() from a validation pass sticks until you switch back.": _variant(train=False),
    "gradients accumulated across steps (and the stale .grad from the validation pass was added): "
    "call optimizer.zero_grad(set_to_none=True) before loss.backward().": _variant(zero="never"),
    # These wrong orders have the same effect, so one hint names them together.
    "optimizer.step() found no gradients (zero_grad ran after backward, or step ran before backward): "
    "the order is zero_grad, forward, loss, backward, clip, step.": _variant(zero="after_backward"),
    "the update used unclipped gradients: call torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) "
    "after loss.backward() and before optimizer.step() (before backward there is nothing to clip yet; "
    "after step it is too late).": _variant(clip=False),
}


def _check_returned(value, expected: torch.Tensor, label: str) -> None:
    if isinstance(value, (float, int)):
        raise ExerciseError(
            f"`train_step` returned a Python number for {label}. Return `loss.detach()`: a tensor without a graph "
            "(`.item()` forces a device sync on every step; log with .item() only when you print)."
        )
    if not isinstance(value, torch.Tensor):
        raise ExerciseError(f"`train_step` should return the loss tensor (`loss.detach()`), got {type(value).__name__}.")
    if value.grad_fn is not None or value.requires_grad:
        raise ExerciseError(
            f"`train_step` returned the raw loss for {label}: it carries its whole autograd graph. "
            "Return `loss.detach()` so a caller who logs it does not keep graphs alive."
        )
    compare(value, expected, what="the returned loss", label=label)


def check_train_step(train_step: Callable) -> None:
    """Check ``train_step(model, batch, optimizer, loss_fn, max_norm)`` over three steps against the reference.

    >>> check_train_step(_reference_step)
    ✓ train_step matches the reference step on 2 seeds × 3 steps (mode, zero_grad, clip, step, detach)
    """

    def call(fn, args, i):
        return call_learner(fn, args, "train_step", f"step {i + 1}")

    for seed in (0, 1):
        label = f"seed {seed}, 3 steps on a Linear-Tanh-Dropout-Linear model (float64, batch 6)"
        ref_model, ref_losses = _run_steps(_reference_step, seed)
        model, losses = _run_steps(train_step, seed, call)
        if not model.training:
            raise ExerciseError(
                "after `train_step` the model is still in eval mode: call model.train() at the start of the step "
                "(the check starts from a model left in eval mode by a validation pass)."
            )
        wrong = {hint: _flat_params(_run_steps(fn, seed)[0]) for hint, fn in TRAIN_STEP_MISTAKES.items()}
        compare(_flat_params(model), _flat_params(ref_model), what="the parameter vector after three steps",
                label=label, mistakes=wrong)
        for i, (got, expected) in enumerate(zip(losses, ref_losses)):
            _check_returned(got, expected, f"step {i + 1} of {label}")
    passed("train_step matches the reference step on 2 seeds × 3 steps (mode, zero_grad, clip, step, detach)")


# --------------------------------------------------------------------------- exercise: optimizer coverage


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
    opt = torch.optim.SGD(
        [{"params": net[1].parameters(), "lr": 0.01}, {"params": net[2].parameters()}], lr=0.1
    )
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
            raise ExerciseError(f"each part of the result should be a list of parameter names; got {type(part).__name__}.")
        if any(isinstance(x, torch.Tensor) for x in part):
            raise ExerciseError(
                "return the parameter *names* (from model.named_parameters()), not the Parameter tensors."
            )
        out.append(sorted(str(x) for x in part))
    return out[0], out[1]


def check_optimizer_coverage(optimizer_coverage: Callable) -> None:
    """Check ``optimizer_coverage(model, optimizer) -> (missing, frozen_inside)``: lists of parameter names.

    >>> check_optimizer_coverage(_coverage_reference)
    ✓ optimizer_coverage finds the uncovered and the stale parameters in 4 set-ups
    """
    scenarios = list(_coverage_scenarios())
    for label, model, optimizer in scenarios:
        try:
            result = call_learner(optimizer_coverage, (model, optimizer), "optimizer_coverage", label)
        except ExerciseError as error:
            if "ambiguous" in str(error) or "must match the size" in str(error):
                raise ExerciseError(
                    f"{error}\nHint: `p in some_list` compares tensors by value (element-wise ==). "
                    "Compare identities: build `covered = {id(p) for g in optimizer.param_groups for p in g['params']}`."
                ) from None
            raise
        got_missing, got_frozen = _names(result, label)
        missing, frozen = (sorted(x) for x in _coverage_reference(model, optimizer))
        if (got_missing, got_frozen) == (missing, frozen):
            continue
        frozen_outside = sorted(
            n for n, p in model.named_parameters() if not p.requires_grad and n not in frozen
        )
        head = f"`optimizer_coverage` is wrong for {label}: got missing={got_missing}, frozen_inside={got_frozen}; " \
               f"expected missing={missing}, frozen_inside={frozen}."
        if (got_frozen, got_missing) == (missing, frozen) and missing != frozen:
            hint = "the two lists are swapped: return (missing, frozen_inside) in that order."
        elif set(got_missing) - set(missing) and set(got_missing) - set(missing) <= set(frozen_outside):
            hint = ("a frozen parameter outside the optimizer is fine: `missing` lists only trainable "
                    "(requires_grad=True) parameters that no param group holds.")
        elif set(got_frozen) - set(frozen) and set(got_frozen) - set(frozen) <= set(frozen_outside):
            hint = "`frozen_inside` lists frozen parameters that ARE in the optimizer; frozen ones left out are correct."
        elif set(missing) - set(got_missing) and not set(got_missing) - set(missing):
            hint = ("a parameter was counted as covered because some optimizer parameter has equal *values* "
                    "(both biases are zeros): compare identities with id(p), not values.")
        elif set(frozen) - set(got_frozen):
            hint = "a parameter with requires_grad=False that is still in a param group is missing from frozen_inside."
        else:
            hint = "go through every param group (optimizer.param_groups[i]['params']), and compare with id(p)."
        raise ExerciseError(f"{head}\nHint: {hint}")
    passed(f"optimizer_coverage finds the uncovered and the stale parameters in {len(scenarios)} set-ups")


# --------------------------------------------------------------------------- exercise: manual SGD update


def _sgd_params(seed: int):
    gen = torch.Generator().manual_seed(seed)
    shapes = [(3, 2), (4,), (1, 5), (2, 1, 3)]
    params = []
    for i, shape in enumerate(shapes):
        p = torch.nn.Parameter(torch.randn(shape, generator=gen, dtype=torch.float64))
        if i != 2:  # one parameter got no gradient this step (unused branch)
            p.grad = torch.randn(shape, generator=gen, dtype=torch.float64)
        params.append(p)
    return params


def _sgd_reference(params, lr, weight_decay):
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p -= lr * (p.grad + weight_decay * p)


def _sgd_wrong(kind):
    def update(params, lr, weight_decay):
        with torch.no_grad():
            for p in params:
                g = p.grad if p.grad is not None else torch.zeros_like(p)
                if kind == "ascent":
                    p += lr * (g + weight_decay * p)
                elif kind == "no_decay":
                    p -= lr * g
                elif kind == "decay_unscaled":
                    p -= lr * g + weight_decay * p
                elif kind == "decay_on_all":
                    p -= lr * (g + weight_decay * p)

    return update


SGD_MISTAKES = {
    "the sign is flipped: gradient descent subtracts, p ← p − lr·(g + wd·p).": _sgd_wrong("ascent"),
    "weight decay is missing: the step is p ← p − lr·(g + weight_decay·p).": _sgd_wrong("no_decay"),
    "the decay term is not multiplied by lr: p ← p − lr·(g + weight_decay·p).": _sgd_wrong("decay_unscaled"),
    "a parameter whose .grad is None was decayed: like torch.optim.SGD, skip parameters without a gradient.":
        _sgd_wrong("decay_on_all"),
}


def check_sgd_update(sgd_update_: Callable) -> None:
    """Check ``sgd_update_(params, lr, weight_decay)``: in place, under no_grad, skipping ``.grad is None``.

    >>> check_sgd_update(_sgd_reference)
    ✓ sgd_update_ updates the parameters in place, visibly to autograd, on 3 set-ups
    """
    settings = [(0, 0.1, 0.01), (1, 0.5, 0.0), (2, 0.03, 0.2)]
    for seed, lr, wd in settings:
        label = f"4 parameters of shapes (3,2), (4,), (1,5), (2,1,3), one without .grad; lr={lr}, weight_decay={wd}"
        params = _sgd_params(seed)
        before = [p.detach().clone() for p in params]
        versions = [p._version for p in params]
        _call_sgd(sgd_update_, (params, lr, wd), label)
        expected = _sgd_params(seed)
        _sgd_reference(expected, lr, wd)
        if all(torch.equal(p.detach(), b) for p, b in zip(params, before)):
            raise ExerciseError(
                f"`sgd_update_` did not change the parameters for {label}. "
                "Hint: `p = p - lr * g` binds a new tensor to the name p and leaves the parameter as it was: "
                "update in place (`p -= ...` or `p.sub_(...)`) inside `with torch.no_grad():`."
            )
        for p in params:
            if not p.is_leaf or p.grad_fn is not None or not p.requires_grad:
                raise ExerciseError(
                    "after `sgd_update_` a parameter is no longer a leaf that requires grad: "
                    "do the update inside `with torch.no_grad():` and keep requires_grad as it is."
                )
        wrong = {}
        for hint, fn in SGD_MISTAKES.items():
            ps = _sgd_params(seed)
            fn(ps, lr, wd)
            wrong[hint] = torch.cat([p.detach().reshape(-1) for p in ps])
        compare(torch.cat([p.detach().reshape(-1) for p in params]), torch.cat([p.detach().reshape(-1) for p in expected]),
                what="the updated parameters", label=label, mistakes=wrong)
        changed = [i for i, p in enumerate(params) if p.grad is not None and p._version == versions[i]]
        if changed:
            raise ExerciseError(
                "the values are right, but autograd did not see the change (the version counter did not move): "
                "that is what `.data` does. Use `with torch.no_grad(): p -= ...` instead, so autograd can still "
                "detect a parameter modified after it was saved for backward."
            )
    passed("sgd_update_ updates the parameters in place, visibly to autograd, on 3 set-ups")


def _call_sgd(fn, args, label):
    try:
        return call_learner(fn, args, "sgd_update_", label)
    except ExerciseError as error:
        text = str(error)
        if "leaf Variable that requires grad" in text:
            text += "\nHint: an in-place change of a parameter must happen inside `with torch.no_grad():`."
        elif "NoneType" in text:
            text += "\nHint: some parameter has `.grad is None` (it got no gradient): skip it."
        raise ExerciseError(text) from None


# --------------------------------------------------------------------------- exercise: evaluate


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
    return [(torch.randn(n, 4, generator=gen, dtype=torch.float64), torch.randn(n, 2, generator=gen, dtype=torch.float64))
            for n in (5, 3, 7)]


class _RecordingLoss:
    """MSE (batch mean) that records whether autograd was recording when it was called."""

    def __init__(self):
        self.grad_enabled = []

    def __call__(self, outputs, targets):
        self.grad_enabled.append(torch.is_grad_enabled() and outputs.requires_grad)
        return torch.nn.functional.mse_loss(outputs, targets)


def _evaluate_reference(model, batches, loss_fn) -> float:
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y in batches:
            total += loss_fn(model(x), y).item() * len(x)
            count += len(x)
    model.train(was_training)
    return total / count


def check_evaluate(evaluate: Callable) -> None:
    """Check ``evaluate(model, batches, loss_fn) -> float``: eval mode, no graphs, per-sample mean, mode restored.

    >>> check_evaluate(_evaluate_reference)
    ✓ evaluate gives the per-sample mean loss and leaves no trace (modes, BatchNorm statistics, graphs) in 2 set-ups
    """
    for seed, start_training in ((0, True), (1, False)):
        model = _eval_model(seed)
        model.train(start_training)
        state = copy.deepcopy(model.state_dict())
        batches = _eval_batches(seed)
        loss_fn = _RecordingLoss()
        label = f"a Linear-BatchNorm-ReLU-Dropout-Linear model in {'train' if start_training else 'eval'} mode, batches of 5, 3, 7"
        torch.manual_seed(7)
        got = call_learner(evaluate, (model, batches, loss_fn), "evaluate", label)
        if any(loss_fn.grad_enabled):
            raise ExerciseError(
                f"`evaluate` built autograd graphs for {label}: run the loop under `torch.no_grad()` "
                "(or `torch.inference_mode()`); eval() alone does not turn gradients off."
            )
        bn = model[1]
        if not torch.equal(bn.running_mean, state["1.running_mean"]) or int(bn.num_batches_tracked) != int(state["1.num_batches_tracked"]):
            raise ExerciseError(
                f"`evaluate` changed BatchNorm's running statistics for {label}: call model.eval() before the loop "
                "(no_grad() does not stop BatchNorm from updating them in train mode)."
            )
        if model.training != start_training:
            raise ExerciseError(
                f"`evaluate` left the model in {'train' if model.training else 'eval'} mode, but it came in "
                f"{'train' if start_training else 'eval'} mode: remember `was_training = model.training` and call "
                "`model.train(was_training)` at the end."
            )
        if isinstance(got, torch.Tensor):
            raise ExerciseError("`evaluate` should return a Python float: use `.item()` on the loss (inside no_grad it is cheap).")
        if not isinstance(got, (float, int)):
            raise ExerciseError(f"`evaluate` should return a Python float, got {type(got).__name__}.")
        expected = _evaluate_reference(model, batches, torch.nn.functional.mse_loss)
        mean_of_means = sum(torch.nn.functional.mse_loss(_eval_out(model, x), y).item() for x, y in batches) / len(batches)
        compare(
            torch.tensor(float(got), dtype=torch.float64), torch.tensor(expected, dtype=torch.float64),
            what="the mean loss", label=label,
            mistakes={
                "that is the mean of the three batch means: a batch of 3 samples weighs as much as one of 7. "
                "Weight each batch's loss by its size and divide by the number of samples.":
                    torch.tensor(mean_of_means, dtype=torch.float64)
            },
        )
    passed("evaluate gives the per-sample mean loss and leaves no trace (modes, BatchNorm statistics, graphs) in 2 set-ups")


def _eval_out(model, x):
    was = model.training
    model.eval()
    with torch.no_grad():
        out = model(x)
    model.train(was)
    return out


# --------------------------------------------------------------------------- exercise: exact resume


def _resume_objects(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1)).double()
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
    return copy.deepcopy({
        "model": model.state_dict(), "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(), "rng": torch.get_rng_state(),
    })


def _load_reference(state, model, optimizer, scheduler) -> None:
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"])


def check_resume(save_state: Callable, load_state: Callable) -> None:
    """Check that ``load_state(save_state(...), fresh objects)`` continues training bit for bit.

    >>> check_resume(_save_reference, _load_reference)
    ✓ training resumed from your checkpoint is bit-exact with uninterrupted training (model, AdamW, StepLR, RNG)
    """
    label = "3 steps of AdamW + StepLR on a model with Dropout, checkpoint, 3 more steps"
    model, optimizer, scheduler = _resume_objects(0)
    _resume_train(model, optimizer, scheduler, range(3))
    at_save = {
        "params": _flat_params(model).clone(), "rng": torch.get_rng_state(),
        "lr": scheduler.get_last_lr()[0], "step": optimizer.state[next(model.parameters())]["step"].clone(),
    }
    state = call_learner(save_state, (model, optimizer, scheduler), "save_state", label)
    _resume_train(model, optimizer, scheduler, range(3, 6))  # the uninterrupted run goes on with the live objects
    expected = _flat_params(model)

    fresh, fresh_opt, fresh_sched = _resume_objects(1)  # different initial weights
    torch.manual_seed(12345)  # and a different RNG state, as in a new process
    call_learner(load_state, (state, fresh, fresh_opt, fresh_sched), "load_state", label)
    if torch.equal(_flat_params(fresh), expected):
        raise ExerciseError(
            "after load_state the model holds the weights from the END of the run, not from the checkpoint: "
            "state_dict() returns references to the live tensors, which kept changing. "
            "Copy them when saving (copy.deepcopy(...), or torch.save to a file/buffer)."
        )
    if not torch.equal(_flat_params(fresh), at_save["params"]):
        raise ExerciseError("after load_state the model's weights differ from the checkpoint: load model.state_dict().")
    first = next(fresh.parameters())
    if first not in fresh_opt.state or not torch.equal(fresh_opt.state[first]["step"], at_save["step"]):
        raise ExerciseError(
            "the optimizer state was not restored (AdamW's step count and moment estimates start from zero): "
            "save optimizer.state_dict() and load it into the new optimizer."
        )
    if fresh_sched.get_last_lr()[0] != at_save["lr"]:
        raise ExerciseError(
            f"the learning-rate schedule was not restored: lr is {fresh_sched.get_last_lr()[0]:g}, "
            f"it was {at_save['lr']:g} at the checkpoint. Save and load scheduler.state_dict()."
        )
    if not torch.equal(torch.get_rng_state(), at_save["rng"]):
        raise ExerciseError(
            "the RNG state was not restored, so Dropout draws different masks after resuming: "
            "save torch.get_rng_state() and restore it with torch.set_rng_state(...)."
        )
    _resume_train(fresh, fresh_opt, fresh_sched, range(3, 6))
    got = _flat_params(fresh)
    if not torch.equal(got, expected):
        diff = float((got - expected).abs().max())
        raise ExerciseError(f"the resumed run is not bit-exact: max |Δparameter| = {diff:.3g} after 3 more steps.")
    passed("training resumed from your checkpoint is bit-exact with uninterrupted training (model, AdamW, StepLR, RNG)")
