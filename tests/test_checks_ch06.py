"""Chapter 06 checkers: correct alternatives pass, each typical wrong answer gets its own hint."""

import copy
import io

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
from autogradlab.models.train_state import setups


def rejects(checker, answer, mistake, *more, kind=None):
    """The check raises, names ``mistake`` (and ``kind``), and gives a hint."""
    with pytest.raises(ExerciseError) as info:
        checker(answer, *more)
    error = info.value
    assert error.mistake == mistake and error.hint, (error.kind, error.mistake, str(error))
    assert kind is None or error.kind == kind, (error.kind, str(error))
    return error


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
        norms = [float(returned[1]) for returned, _, _ in ch06._run_steps(ch06._reference_step, seed, max_norm)]
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
    "stays in eval mode": (step_variant(train=False), "eval"),
    "train() after the forward": (step_variant(train="late"), "train_late"),
    "reseeds inside the step": (step_variant(reseed=True), "rng-only"),
    "stale gradients (no zero_grad)": (step_variant(zero="never"), "no_zero"),
    "zero_grad after backward": (step_variant(zero="after"), "zero_after"),
    "step before backward": (step_variant(step_first=True), "step_first"),
    "no clipping (threshold below the norm)": (step_variant(clip="none"), "no_clip"),
    "clip before backward": (step_variant(clip="before_backward"), "no_clip"),
    "clip after step": (step_variant(clip="after_step"), "clip_after"),
    "scales up when the norm is below max_norm": (step_variant(clip="always"), "always_scale"),
    "clip_grad_value_": (step_variant(clip="value"), "clip_value"),
    "no_grad around the forward": (step_variant(no_grad_forward=True), "no_graph"),
    "mutates the caller's batch": (step_variant(mutate=True), "batch-changed"),
    "extra forward for the log": (step_variant(log_forward=True), "extra_forward"),
    "raw loss returned": (step_variant(loss="raw"), "graph-returned"),
    "norm after clipping": (step_variant(norm="after_clip"), "norm-after-clip"),
    "before-snapshot without clone": (step_variant(before="detach"), "ratio-aliased"),
    "mean of per-parameter ratios": (step_variant(ratio="per_parameter"), "ratio-per-parameter"),
    "ratio over the new parameters": (step_variant(ratio="over_after"), "ratio-over-after"),
    "returns only the loss": (step_variant(only_loss=True), "not-three"),
    "grad mode left off": (step_variant(grad_mode_left_off=True), "grad mode (torch.is_grad_enabled())"),
}


@pytest.mark.parametrize("name", WRONG_STEPS)
def test_train_step_mistakes_are_named(name):
    answer, mistake = WRONG_STEPS[name]
    with pytest.raises(ExerciseError) as info:
        check_train_step(answer)
    assert info.value.mistake == mistake, (info.value.kind, info.value.mistake, str(info.value))
    assert info.value.hint or mistake == "not-three", str(info.value)


def the_printed_step_with_two_bugs(model, batch, optimizer, loss_fn, max_norm=1.0):
    """Chapter 06's Exercise 1 as printed: no model.train(), and the before-snapshot shares storage."""
    inputs, targets = batch
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    before = [p.detach() for p in model.parameters()]
    optimizer.step()
    delta = torch.cat([(p.detach() - b).reshape(-1) for p, b in zip(model.parameters(), before)])
    return loss.detach(), grad_norm, delta.norm() / torch.cat([b.reshape(-1) for b in before]).norm()


def test_the_printed_step_is_rejected_for_its_first_bug_and_then_its_second():
    rejects(check_train_step, the_printed_step_with_two_bugs, "eval")

    def half_fixed(model, *args, **kwargs):
        model.train()
        return the_printed_step_with_two_bugs(model, *args, **kwargs)

    rejects(check_train_step, half_fixed, "ratio-aliased")


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
    rejects(check_train_step, per_parameter_clip_step, "per_parameter")


def test_train_step_not_implemented():
    def stub(model, batch, optimizer, loss_fn, max_norm=1.0):
        raise NotImplementedError()

    with pytest.raises(ExerciseError) as info:
        check_train_step(stub)
    assert info.value.kind == "not-implemented"


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


def coverage_by_grad(model, optimizer):
    """Decides "missing" by the gradient, not by membership (errata §5b): the id-based part is right."""
    covered = {id(p) for g in optimizer.param_groups for p in g["params"]}
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    return missing, [n for n, p in model.named_parameters() if not p.requires_grad and id(p) in covered]


WRONG_COVERAGE = {
    "swapped": (lambda m, o: coverage_ids(m, o)[::-1], "swapped"),
    "no requires_grad filter": (coverage_no_requires_grad_filter, "no-requires-grad-filter"),
    "frozen outside listed": (coverage_frozen_all, "frozen-outside-listed"),
    "by value": (coverage_by_value, "by-value"),
    "p in list": (coverage_in_list, "size_mismatch"),  # `in` compares by value: == between shapes that do not match
    "first group only": (coverage_first_group_only, "first-group"),
    "missing means no .grad": (coverage_by_grad, "grad-criterion"),
    "tensors not names": (lambda m, o: ([p for p in m.parameters()], []), "tensors-not-names"),
    "single list": (lambda m, o: [], "not-a-pair"),
    "course helper": (coverage_with_snapshot, "autogradlab.models.train_state.state.snapshot"),
    "changes the model": (coverage_that_fixes, "changed-model"),
}


@pytest.mark.parametrize("name", WRONG_COVERAGE)
def test_coverage_mistakes_are_named(name):
    answer, mistake = WRONG_COVERAGE[name]
    with pytest.raises(ExerciseError) as info:
        check_optimizer_coverage(answer)
    assert info.value.mistake == mistake, (info.value.kind, info.value.mistake, str(info.value))
    assert info.value.hint or info.value.kind == "type", str(info.value)


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
    "no eval": (eval_variant(eval_mode=False), "bn-statistics"),
    "no no_grad": (eval_variant(no_grad=False), "graph"),
    "detached output, graph still built": (eval_variant(no_grad=False, detach=True), "graph"),
    "not restored": (eval_variant(restore="none"), "mode"),
    "always back to train": (eval_variant(restore="train"), "mode"),
    "only the top-level mode restored": (eval_variant(restore="top"), "submodule-mode"),
    "mean of means": (eval_variant(weighted=False), "mean-of-means"),
    "tensor": (eval_variant(item=False), "tensor"),
    "mutates the batches": (eval_variant(mutate=True), "batch-changed"),
}


@pytest.mark.parametrize("name", WRONG_EVALUATE)
def test_evaluate_mistakes_are_named(name):
    rejects(check_evaluate, *WRONG_EVALUATE[name])


# --------------------------------------------------------------------------- exercise 4: exact resume


def save_deepcopy(model, optimizer, scheduler, loader):
    return copy.deepcopy(
        {
            "m": model.state_dict(),
            "o": optimizer.state_dict(),
            "s": scheduler.state_dict(),
            "rng": torch.get_rng_state(),
            "order": loader.generator.get_state(),
        }
    )


def load_deepcopy(state, model, optimizer, scheduler, loader):
    state = copy.deepcopy(state)
    model.load_state_dict(state["m"])
    optimizer.load_state_dict(state["o"])
    scheduler.load_state_dict(state["s"])
    torch.set_rng_state(state["rng"])
    loader.generator.set_state(state["order"])


def save_buffer(model, optimizer, scheduler, loader):
    buffer = io.BytesIO()
    parts = {"m": model.state_dict(), "o": optimizer.state_dict(), "s": scheduler.state_dict()}
    torch.save({**parts, "rng": torch.random.get_rng_state(), "order": loader.generator.get_state()}, buffer)
    return buffer.getvalue()


def load_buffer(state, model, optimizer, scheduler, loader):
    loaded = torch.load(io.BytesIO(state), weights_only=True)
    model.load_state_dict(loaded["m"])
    optimizer.load_state_dict(loaded["o"])
    scheduler.load_state_dict(loaded["s"])
    torch.random.set_rng_state(loaded["rng"])
    loader.generator.set_state(loaded["order"])


def save_objects(model, optimizer, scheduler, loader):
    """Deep-copies the objects themselves (the optimizer copy keeps the model copy's parameters)."""
    return copy.deepcopy((model, optimizer, scheduler)), torch.get_rng_state(), loader.generator.get_state().clone()


def load_objects(state, model, optimizer, scheduler, loader):
    (m, o, s), rng, order = state
    model.load_state_dict(m.state_dict())
    optimizer.load_state_dict(copy.deepcopy(o.state_dict()))
    scheduler.load_state_dict(s.state_dict())
    torch.set_rng_state(rng)
    loader.generator.set_state(order)


@pytest.mark.parametrize(
    "pair", [(save_deepcopy, load_deepcopy), (save_buffer, load_buffer), (save_objects, load_objects)]
)
def test_resume_correct_alternatives_pass(pair, capsys):
    check_resume(*pair)
    assert capsys.readouterr().out.startswith("✓ both resumes")


def old_load_state(state, model, optimizer, scheduler, loader):
    """The chapter's reference load_state before issue 11: it loads the checkpoint's own tensors."""
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"])
    loader.generator.set_state(state["loader"])


@pytest.mark.parametrize("load, intact", [(ch06._load_reference, True), (old_load_state, False)])
def test_loading_then_training_leaves_the_checkpoint_as_saved(load, intact):
    """The reference load_state must not share tensors with the checkpoint (the old one did)."""
    with torch.random.fork_rng(devices=[]):
        run = setups.resume_setup(0)
        setups.resume_train(*run, epochs=1)
        checkpoint = ch06._save_reference(*run)
        saved = copy.deepcopy(checkpoint)
        fresh = setups.resume_setup(1)
        load(checkpoint, *fresh)
        setups.resume_train(*fresh, epochs=1)
    tensors = [
        (checkpoint["optimizer"]["state"][i][k], saved["optimizer"]["state"][i][k])
        for i in saved["optimizer"]["state"]
        for k in saved["optimizer"]["state"][i]
    ]
    assert all(torch.equal(a, b) for a, b in tensors) is intact


def save_without(skip):
    def save(model, optimizer, scheduler, loader):
        state = {
            "m": model.state_dict(),
            "o": optimizer.state_dict(),
            "s": scheduler.state_dict(),
            "rng": torch.get_rng_state(),
            "order": loader.generator.get_state(),
        }
        return state if skip == "copy" else copy.deepcopy({k: v for k, v in state.items() if k != skip})

    return save


def load_what_is_there(state, model, optimizer, scheduler, loader):
    state = copy.deepcopy(state)
    if "m" in state:
        model.load_state_dict(state["m"])
    if "o" in state:
        optimizer.load_state_dict(state["o"])
    if "s" in state:
        scheduler.load_state_dict(state["s"])
    if "rng" in state:
        torch.set_rng_state(state["rng"])
    if "order" in state:
        loader.generator.set_state(state["order"])


def load_assign(state, model, optimizer, scheduler, loader):
    state = dict(state)
    state["o"] = copy.deepcopy(state["o"])
    model.load_state_dict(state["m"], assign=True)  # the model's parameters become the checkpoint's tensors
    optimizer.param_groups[0]["params"] = list(model.parameters())  # the new parameter objects
    optimizer.load_state_dict(state["o"])
    scheduler.load_state_dict(state["s"])
    torch.set_rng_state(state["rng"])
    loader.generator.set_state(state["order"])


def save_seed(model, optimizer, scheduler, loader):
    state = save_without("rng")(model, optimizer, scheduler, loader)
    return {**state, "seed": torch.initial_seed()}


def load_seed(state, model, optimizer, scheduler, loader):
    load_what_is_there(state, model, optimizer, scheduler, loader)
    torch.manual_seed(state["seed"])


def load_reseeds_the_loader(state, model, optimizer, scheduler, loader):
    load_what_is_there(state, model, optimizer, scheduler, loader)
    loader.generator.manual_seed(7)  # the loader's seed: restarts its order from the first epoch


def save_and_reseed(model, optimizer, scheduler, loader):
    state = save_deepcopy(model, optimizer, scheduler, loader)
    torch.manual_seed(0)  # "for reproducibility"
    return state


def save_with_helper(model, optimizer, scheduler, loader):
    run = {"model": model, "optimizer": optimizer, "scheduler": scheduler}
    return train_state._save_parts(run, ("model", "optimizer", "scheduler", "rng"))


WRONG_RESUME = {
    "no copy when saving": (save_without("copy"), load_what_is_there, "live-references"),
    "no copy when loading (the old reference)": (ch06._save_reference, old_load_state, "shared-checkpoint"),
    "load with assign=True": (save_deepcopy, load_assign, "shared-checkpoint"),
    "model missing": (save_without("m"), load_what_is_there, "model"),
    "optimizer missing": (save_without("o"), load_what_is_there, "optimizer"),
    "scheduler missing": (save_without("s"), load_what_is_there, "scheduler"),
    "rng missing": (save_without("rng"), load_what_is_there, "rng"),
    "loader order missing": (save_without("order"), load_what_is_there, "loader"),
    "loader reseeded": (save_without("order"), load_reseeds_the_loader, "loader"),
    "seed instead of rng state": (save_seed, load_seed, "rng"),
    "save reseeds the run": (save_and_reseed, load_deepcopy, "changed-run"),
    "course helper": (save_with_helper, load_deepcopy, "autogradlab.models.train_state.resume._save_parts"),
}


@pytest.mark.parametrize("name", WRONG_RESUME)
def test_resume_mistakes_are_named(name):
    save, load, mistake = WRONG_RESUME[name]
    with pytest.raises(ExerciseError) as info:
        check_resume(save, load)
    assert info.value.mistake == mistake and info.value.hint, (info.value.kind, info.value.mistake, str(info.value))


def test_a_wrong_step_is_explained_in_chinese(monkeypatch):
    monkeypatch.setenv("AUTOGRADLAB_LANG", "zh")
    answer, mistake = WRONG_STEPS["stale gradients (no zero_grad)"]
    error = rejects(check_train_step, answer, mistake, kind="value")
    assert "这些状态与参考答案不同：.grad, 参数值, 优化器状态" in str(error) and "提示：过期的梯度" in str(error)
