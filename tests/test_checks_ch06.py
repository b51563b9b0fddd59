"""Chapter 06 checkers: correct alternatives pass, each typical wrong answer gets its own hint."""

import copy
import io
import re

import pytest
import torch

from autogradlab.checks import ch06
from autogradlab.checks.ch06 import (
    check_evaluate,
    check_optimizer_coverage,
    check_resume,
    check_train_step,
)
from autogradlab.checks.core import ExerciseError
from autogradlab.models import train_state


def rejects(checker, answer, hint, *more):
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        checker(answer, *more)


# --------------------------------------------------------------------------- exercise 1: a step that reports


def good_step(model, batch, optimizer, loss_fn, max_norm=1.0):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(batch[0]), batch[1])
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer.step()
    with torch.no_grad():
        delta = torch.cat([(p - b).flatten() for p, b in zip(model.parameters(), before)]).norm()
        ratio = delta / torch.cat([b.flatten() for b in before]).norm()
    return loss.detach(), grad_norm, ratio


def good_step_by_hand(model, batch, optimizer, loss_fn, max_norm=1.0):
    """Clears .grad by hand, clips by hand, snapshots with a state_dict copy, returns floats."""
    model.train()
    inputs, targets = batch[0].to("cpu"), batch[1].to("cpu")
    for p in model.parameters():
        p.grad = None
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    total = torch.sqrt(sum((p.grad**2).sum() for p in model.parameters()))
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for p in model.parameters():
        p.grad.mul_(scale)
    before = copy.deepcopy(model.state_dict())
    optimizer.step()
    after = model.state_dict()
    num = sum(((after[k] - before[k]) ** 2).sum() for k in before).sqrt()
    den = sum((before[k] ** 2).sum() for k in before).sqrt()
    return loss.item(), total.item(), (num / den).item()


def good_step_normalised_batch(model, batch, optimizer, loss_fn, max_norm=1.0):
    """Normalises the inputs without touching the caller's tensor, and uses parameters_to_vector."""
    inputs = batch[0] - batch[0].mean(dim=0)  # a new tensor: the batch stays as it was
    model.train()
    optimizer.zero_grad()
    loss = loss_fn(model(inputs + batch[0].mean(dim=0)), batch[1])
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, foreach=False)
    before = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    optimizer.step()
    after = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    return loss.detach(), norm, torch.linalg.vector_norm(after - before) / torch.linalg.vector_norm(before)


@pytest.mark.parametrize("answer", [good_step, good_step_by_hand, good_step_normalised_batch])
def test_train_step_correct_alternatives_pass(answer, capsys):
    check_train_step(answer)
    assert capsys.readouterr().out.startswith("✓ train_step")


def test_train_step_setups_clip_on_every_step_in_one_and_never_in_the_other():
    for seed, max_norm, _ in ch06.STEP_SETUPS:
        norms = [float(r.returned[1]) for r in ch06._run_steps(ch06._reference_step, seed, max_norm)]
        assert all(n > max_norm for n in norms) if max_norm < 1 else all(n < max_norm for n in norms), norms


def test_the_check_leaves_the_notebook_rng_alone():
    torch.manual_seed(3)
    before = torch.get_rng_state()
    check_train_step(good_step)
    assert torch.equal(before, torch.get_rng_state())


def step_variant(**slip):
    """good_step with one slip; the numbers it returns are right unless the slip is about them."""

    def step(model, batch, optimizer, loss_fn, max_norm=1.0):
        if slip.get("train", True) is True:
            model.train()
        if slip.get("zero", "before") == "before":
            optimizer.zero_grad()
        inputs = batch[0]
        if slip.get("mutate"):
            inputs -= inputs.mean(dim=0)  # in place: the caller's tensor
        if slip.get("no_grad_forward"):
            with torch.no_grad():
                outputs = model(inputs)
        else:
            outputs = model(inputs)
        loss = loss_fn(outputs, batch[1])
        if slip.get("train") == "late":
            model.train()
        if slip.get("reseed"):
            torch.manual_seed(0)  # "for reproducibility"
        if slip.get("step_first"):
            optimizer.step()
        loss.backward()
        if slip.get("zero") == "after":
            optimizer.zero_grad()
        clip = slip.get("clip", "norm")
        grads = [p.grad.flatten() for p in model.parameters() if p.grad is not None]
        norm = torch.cat(grads).norm() if grads else torch.zeros((), dtype=torch.float64)
        if clip == "norm":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        elif clip == "value":
            torch.nn.utils.clip_grad_value_(model.parameters(), max_norm)
        elif clip == "always":
            for p in model.parameters():
                p.grad.mul_(max_norm / norm)
        elif clip == "before_backward":
            pass  # clip_grad_norm_ before backward: nothing to clip, the same as no clip at all
        if slip.get("norm") == "after_clip":
            norm = torch.cat([p.grad.flatten() for p in model.parameters()]).norm()
        if slip.get("before") == "detach":
            before = [p.detach() for p in model.parameters()]
        else:
            before = [p.detach().clone() for p in model.parameters()]
        if not slip.get("step_first"):
            optimizer.step()
        if clip == "after_step":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        after = [p.detach() for p in model.parameters()]
        delta = torch.cat([(a - b).flatten() for a, b in zip(after, before)]).norm()
        ratio = delta / torch.cat([b.flatten() for b in before]).norm()
        if slip.get("ratio") == "per_parameter":
            ratio = sum((a - b).norm() / b.norm() for a, b in zip(after, before)) / len(before)
        elif slip.get("ratio") == "over_after":
            ratio = delta / torch.cat([a.flatten() for a in after]).norm()
        if slip.get("log_forward"):
            loss_fn(model(inputs), batch[1])  # "the loss after the update"
        if slip.get("grad_mode_left_off"):
            torch.set_grad_enabled(False)
        returned = {"detach": loss.detach(), "raw": loss, "none": None}[slip.get("loss", "detach")]
        if slip.get("only_loss"):
            return returned
        return returned, norm.detach(), ratio.detach()

    return step


WRONG_STEPS = {
    "stays in eval mode": (step_variant(train=False), "is in eval mode"),
    "train() after the forward": (step_variant(train="late"), "came after the forward pass"),
    "reseeds inside the step": (step_variant(reseed=True), "only the RNG state differs"),
    "stale gradients (no zero_grad)": (step_variant(zero="never"), "stale gradients"),
    "zero_grad after backward": (step_variant(zero="after"), "zero_grad ran after backward"),
    "step before backward": (step_variant(step_first=True), "ran before loss.backward()"),
    "no clipping (threshold below the norm)": (step_variant(clip="none"), "the update used unclipped gradients"),
    "clip before backward": (step_variant(clip="before_backward"), "before backward there is nothing to clip"),
    "clip after step": (step_variant(clip="after_step"), "clipped after optimizer.step()"),
    "scales up when the norm is below max_norm": (step_variant(clip="always"), "clipping only ever scales down"),
    "clip_grad_value_": (step_variant(clip="value"), "clip_grad_value_ clamps each element"),
    "no_grad around the forward": (step_variant(no_grad_forward=True), "the forward pass ran without autograd"),
    "mutates the caller's batch": (step_variant(mutate=True), "changed the caller's batch"),
    "extra forward for the log": (step_variant(log_forward=True), "draws new Dropout masks"),
    "raw loss returned": (step_variant(loss="raw"), "with its autograd graph"),
    "norm after clipping": (step_variant(norm="after_clip"), "that is the norm after clipping"),
    "before-snapshot without clone": (step_variant(before="detach"), "shares storage with p"),
    "mean of per-parameter ratios": (step_variant(ratio="per_parameter"), "mean of the per-parameter ratios"),
    "ratio over the new parameters": (step_variant(ratio="over_after"), "not after it"),
    "returns only the loss": (step_variant(only_loss=True), "should return three numbers"),
    "grad mode left off": (step_variant(grad_mode_left_off=True), "changed grad mode"),
}


@pytest.mark.parametrize("name", WRONG_STEPS)
def test_train_step_mistakes_are_named(name):
    rejects(check_train_step, *WRONG_STEPS[name])


def per_parameter_clip_step(model, batch, optimizer, loss_fn, max_norm=1.0):
    model.train()
    optimizer.zero_grad()
    loss = loss_fn(model(batch[0]), batch[1])
    loss.backward()
    norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    for p in model.parameters():
        torch.nn.utils.clip_grad_norm_([p], max_norm)
    before = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    optimizer.step()
    after = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    return loss.detach(), norm, (after - before).norm() / before.norm()


def test_train_step_per_parameter_clipping_is_named():
    rejects(check_train_step, per_parameter_clip_step, "clipped on its own")


def test_train_step_not_implemented():
    def stub(model, batch, optimizer, loss_fn, max_norm=1.0):
        raise NotImplementedError()

    rejects(check_train_step, stub, "NotImplementedError")


# --------------------------------------------------------------------------- exercise 2: optimizer coverage


def coverage_ids(model, optimizer):
    covered = {id(p) for g in optimizer.param_groups for p in g["params"]}
    missing = [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in covered]
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad and id(p) in covered]
    return missing, frozen


def coverage_is(model, optimizer):
    params = [p for g in optimizer.param_groups for p in g["params"]]
    inside = lambda p: any(p is q for q in params)  # noqa: E731
    return (
        {n for n, p in model.named_parameters() if p.requires_grad and not inside(p)},
        tuple(n for n, p in model.named_parameters() if not p.requires_grad and inside(p)),
    )


@pytest.mark.parametrize("answer", [coverage_ids, coverage_is])
def test_coverage_correct_alternatives_pass(answer, capsys):
    check_optimizer_coverage(answer)
    assert capsys.readouterr().out.startswith("✓ optimizer_coverage")


def coverage_no_requires_grad_filter(model, optimizer):
    covered = {id(p) for g in optimizer.param_groups for p in g["params"]}
    missing = [n for n, p in model.named_parameters() if id(p) not in covered]
    return missing, coverage_ids(model, optimizer)[1]


def coverage_frozen_all(model, optimizer):
    return coverage_ids(model, optimizer)[0], [n for n, p in model.named_parameters() if not p.requires_grad]


def coverage_by_value(model, optimizer):
    params = [p for g in optimizer.param_groups for p in g["params"]]
    inside = lambda p: any(p.shape == q.shape and torch.equal(p, q) for q in params)  # noqa: E731
    return (
        [n for n, p in model.named_parameters() if p.requires_grad and not inside(p)],
        [n for n, p in model.named_parameters() if not p.requires_grad and inside(p)],
    )


def coverage_in_list(model, optimizer):
    params = [p for g in optimizer.param_groups for p in g["params"]]
    return [n for n, p in model.named_parameters() if p.requires_grad and p not in params], []


def coverage_first_group_only(model, optimizer):
    covered = {id(p) for p in optimizer.param_groups[0]["params"]}
    return (
        [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in covered],
        [n for n, p in model.named_parameters() if not p.requires_grad and id(p) in covered],
    )


def coverage_with_snapshot(model, optimizer):
    """The course's snapshot() already knows which parameters the optimizer holds."""
    s = train_state.snapshot(model, optimizer)
    return (
        [n for n in s.params if s.trainable[n] and s.optimizer[n] is None],
        [n for n in s.params if not s.trainable[n] and s.optimizer[n] is not None],
    )


def coverage_that_fixes(model, optimizer):
    missing, frozen = coverage_ids(model, optimizer)
    for name, p in model.named_parameters():
        if name in frozen:
            p.requires_grad_(True)  # "fixes" the problem instead of reporting it
    return missing, frozen


WRONG_COVERAGE = {
    "swapped": (lambda m, o: coverage_ids(m, o)[::-1], "swapped"),
    "no requires_grad filter": (coverage_no_requires_grad_filter, "only trainable"),
    "frozen outside listed": (coverage_frozen_all, "frozen ones left out are correct"),
    "by value": (coverage_by_value, "compare identities with id(p)"),
    "p in list": (coverage_in_list, "compares tensors by value"),
    "first group only": (coverage_first_group_only, "every param group"),
    "tensors not names": (lambda m, o: ([p for p in m.parameters()], []), "names"),
    "single list": (lambda m, o: [], "a pair (missing, frozen_inside)"),
    "course helper": (coverage_with_snapshot, "the course's own code"),
    "changes the model": (coverage_that_fixes, "should only look"),
}


@pytest.mark.parametrize("name", WRONG_COVERAGE)
def test_coverage_mistakes_are_named(name):
    rejects(check_optimizer_coverage, *WRONG_COVERAGE[name])


def test_coverage_guard_is_undone_after_the_check():
    with pytest.raises(ExerciseError):
        check_optimizer_coverage(coverage_with_snapshot)
    model = torch.nn.Linear(2, 1)
    assert train_state.snapshot(model, torch.optim.SGD(model.parameters(), lr=0.1)).optimizer["weight"] == {}


# --------------------------------------------------------------------------- exercise 3: evaluate


def evaluate_no_grad(model, batches, loss_fn):
    modes = {m: m.training for m in model.modules()}
    model.eval()
    total, n = 0.0, 0
    with torch.no_grad():
        for x, y in batches:
            total += loss_fn(model(x), y).item() * x.shape[0]
            n += x.shape[0]
    for m, mode in modes.items():
        m.train(mode)  # parents come before children in modules(), so each child ends as it was
    return total / n


def evaluate_inference_mode(model, batches, loss_fn):
    modes = [m.training for m in model.modules()]
    model.eval()
    with torch.inference_mode():
        losses = torch.stack([loss_fn(model(x), y) * len(x) for x, y in batches])
        result = float(losses.sum() / sum(len(x) for x, _ in batches))
    for m, mode in zip(model.modules(), modes):
        m.training = mode
    return result


@pytest.mark.parametrize("answer", [evaluate_no_grad, evaluate_inference_mode])
def test_evaluate_correct_alternatives_pass(answer, capsys):
    check_evaluate(answer)
    assert capsys.readouterr().out.startswith("✓ evaluate")


def eval_variant(eval_mode=True, no_grad=True, restore="each", weighted=True, item=True, detach=False, mutate=False):
    def evaluate(model, batches, loss_fn):
        modes = {m: m.training for m in model.modules()}
        was = model.training
        if eval_mode:
            model.eval()
        total, n = 0.0, 0
        with torch.set_grad_enabled(not no_grad):
            for x, y in batches:
                if mutate:
                    x -= x.mean()
                out = model(x)
                loss = loss_fn(out.detach() if detach else out, y)
                total = total + (loss if not item else loss.item()) * (len(x) if weighted else 1)
                n += len(x) if weighted else 1
        if restore == "each":
            for m, mode in modes.items():
                m.train(mode)
        elif restore == "top":
            model.train(was)
        elif restore == "train":
            model.train()
        return total / n

    return evaluate


WRONG_EVALUATE = {
    "no eval": (eval_variant(eval_mode=False), "BatchNorm's running statistics"),
    "no no_grad": (eval_variant(no_grad=False), "built autograd graphs"),
    "detached output, graph still built": (eval_variant(no_grad=False, detach=True), "does not undo the graph"),
    "not restored": (eval_variant(restore="none"), "remember each module's `training` flag"),
    "always back to train": (eval_variant(restore="train"), "it came in eval mode and leaves in train mode"),
    "only the top-level mode restored": (eval_variant(restore="top"), "sets every submodule to the same mode"),
    "mean of means": (eval_variant(weighted=False), "mean of the three batch means"),
    "tensor": (eval_variant(item=False), "return a Python float"),
    "mutates the batches": (eval_variant(mutate=True), "changed the caller's batches"),
}


@pytest.mark.parametrize("name", WRONG_EVALUATE)
def test_evaluate_mistakes_are_named(name):
    rejects(check_evaluate, *WRONG_EVALUATE[name])


# --------------------------------------------------------------------------- exercise 4: exact resume


def save_deepcopy(model, optimizer, scheduler):
    return copy.deepcopy(
        {
            "m": model.state_dict(),
            "o": optimizer.state_dict(),
            "s": scheduler.state_dict(),
            "rng": torch.get_rng_state(),
        }
    )


def load_deepcopy(state, model, optimizer, scheduler):
    state = copy.deepcopy(state)
    model.load_state_dict(state["m"])
    optimizer.load_state_dict(state["o"])
    scheduler.load_state_dict(state["s"])
    torch.set_rng_state(state["rng"])


def save_buffer(model, optimizer, scheduler):
    buffer = io.BytesIO()
    torch.save(
        {
            "m": model.state_dict(),
            "o": optimizer.state_dict(),
            "s": scheduler.state_dict(),
            "rng": torch.random.get_rng_state(),
        },
        buffer,
    )
    return buffer.getvalue()


def load_buffer(state, model, optimizer, scheduler):
    loaded = torch.load(io.BytesIO(state), weights_only=True)
    model.load_state_dict(loaded["m"])
    optimizer.load_state_dict(loaded["o"])
    scheduler.load_state_dict(loaded["s"])
    torch.random.set_rng_state(loaded["rng"])


def save_objects(model, optimizer, scheduler):
    """Deep-copies the objects themselves (the optimizer copy keeps the model copy's parameters)."""
    return copy.deepcopy((model, optimizer, scheduler)), torch.get_rng_state()


def load_objects(state, model, optimizer, scheduler):
    (m, o, s), rng = state
    model.load_state_dict(m.state_dict())
    optimizer.load_state_dict(copy.deepcopy(o.state_dict()))
    scheduler.load_state_dict(s.state_dict())
    torch.set_rng_state(rng)


@pytest.mark.parametrize(
    "pair", [(save_deepcopy, load_deepcopy), (save_buffer, load_buffer), (save_objects, load_objects)]
)
def test_resume_correct_alternatives_pass(pair, capsys):
    check_resume(*pair)
    assert capsys.readouterr().out.startswith("✓ both resumes")


def old_load_state(state, model, optimizer, scheduler):
    """The chapter's reference load_state before issue 11: it loads the checkpoint's own tensors."""
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"])


@pytest.mark.parametrize("load, intact", [(ch06._load_reference, True), (old_load_state, False)])
def test_loading_then_training_leaves_the_checkpoint_as_saved(load, intact):
    """The reference load_state must not share tensors with the checkpoint (the old one did)."""
    with torch.random.fork_rng(devices=[]):
        run = ch06._resume_objects(0)
        ch06._resume_train(*run, range(3))
        checkpoint = ch06._save_reference(*run)
        saved = copy.deepcopy(checkpoint)
        fresh = ch06._resume_objects(1)
        load(checkpoint, *fresh)
        ch06._resume_train(*fresh, range(3, 6))
    tensors = [
        (checkpoint["optimizer"]["state"][i][k], saved["optimizer"]["state"][i][k])
        for i in saved["optimizer"]["state"]
        for k in saved["optimizer"]["state"][i]
    ]
    assert all(torch.equal(a, b) for a, b in tensors) is intact


def save_without(skip):
    def save(model, optimizer, scheduler):
        state = {
            "m": model.state_dict(),
            "o": optimizer.state_dict(),
            "s": scheduler.state_dict(),
            "rng": torch.get_rng_state(),
        }
        return state if skip == "copy" else copy.deepcopy({k: v for k, v in state.items() if k != skip})

    return save


def load_what_is_there(state, model, optimizer, scheduler):
    state = copy.deepcopy(state)
    if "m" in state:
        model.load_state_dict(state["m"])
    if "o" in state:
        optimizer.load_state_dict(state["o"])
    if "s" in state:
        scheduler.load_state_dict(state["s"])
    if "rng" in state:
        torch.set_rng_state(state["rng"])


def load_assign(state, model, optimizer, scheduler):
    state = dict(state)
    state["o"] = copy.deepcopy(state["o"])
    model.load_state_dict(state["m"], assign=True)  # the model's parameters become the checkpoint's tensors
    optimizer.param_groups[0]["params"] = list(model.parameters())  # the new parameter objects
    optimizer.load_state_dict(state["o"])
    scheduler.load_state_dict(state["s"])
    torch.set_rng_state(state["rng"])


def save_seed(model, optimizer, scheduler):
    return copy.deepcopy(
        {
            "m": model.state_dict(),
            "o": optimizer.state_dict(),
            "s": scheduler.state_dict(),
            "seed": torch.initial_seed(),
        }
    )


def load_seed(state, model, optimizer, scheduler):
    load_what_is_there(state, model, optimizer, scheduler)
    torch.manual_seed(state["seed"])


def save_and_reseed(model, optimizer, scheduler):
    state = save_deepcopy(model, optimizer, scheduler)
    torch.manual_seed(0)  # "for reproducibility"
    return state


def save_with_helper(model, optimizer, scheduler):
    run = {"model": model, "optimizer": optimizer, "scheduler": scheduler}
    return train_state._save_parts(run, ("model", "optimizer", "scheduler", "rng"))


WRONG_RESUME = {
    "no copy when saving": (save_without("copy"), load_what_is_there, "references to the live tensors"),
    "no copy when loading (the old reference)": (
        ch06._save_reference,
        old_load_state,
        "loading the same checkpoint again restored other optimizer state",
    ),
    "load with assign=True": (save_deepcopy, load_assign, "again restored other model weights"),
    "model missing": (save_without("m"), load_what_is_there, "load model.state_dict()"),
    "optimizer missing": (save_without("o"), load_what_is_there, "optimizer state was not restored"),
    "scheduler missing": (save_without("s"), load_what_is_there, "learning-rate schedule was not restored"),
    "rng missing": (save_without("rng"), load_what_is_there, "RNG state was not restored"),
    "seed instead of rng state": (save_seed, load_seed, "a seed restarts the sequence"),
    "save reseeds the run": (save_and_reseed, load_deepcopy, "changed the run it saved"),
    "course helper": (save_with_helper, load_deepcopy, "the course's own code"),
}


@pytest.mark.parametrize("name", WRONG_RESUME)
def test_resume_mistakes_are_named(name):
    save, load, hint = WRONG_RESUME[name]
    with pytest.raises(ExerciseError, match=re.escape(hint)):
        check_resume(save, load)
