"""Checkers for chapter 07 (gradient accumulation).

Each checker runs the learner's step through :class:`~autogradlab.checks.core.LearnerCall` on
seeded set-ups (:mod:`autogradlab.models.step_cases`, :mod:`autogradlab.models.token_accumulation`)
and holds the exercise's whole contract: the gradients or updates are compared with a reference,
and a :class:`_Trace` records how they were reached (forward and backward passes in order,
backward under autocast, the forward's dtype), so a right number reached the wrong way is still
named. The edges the exercises name are in every check: stale gradients, a shorter last window,
micro-batches and ranks without a counted token, a clip threshold above and below the gradient
norm, an overflowing window. :data:`HINTS` names every mistake; a :class:`Variant` of the
reference step makes it, so a wrong result equal to a variant's is named exactly.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector

from autogradlab.checks.core import ExerciseError, LearnerCall, OffLimits, close, compare, passed
from autogradlab.checks.stateful import Runs, recorded_scaler_calls, run_variants, variants
from autogradlab.i18n import N_, said
from autogradlab.models import step_cases as cases
from autogradlab.models import token_accumulation as tokens

# fmt: off
EMPTY = N_("a micro-batch with no counted token has no token mean: 0/0 = NaN (`losses[mask].mean()`, or cross_entropy's mean when every target is ignored), and NaN × 0 is still NaN. A token SUM of no tokens is an exact 0.")

#: mistake id → hint (the variants' errors are "value" errors from compare; the others' kinds are in _KINDS).
HINTS = {
    "no-backward": N_("accumulate with loss.backward(), once per micro-batch: autograd.grad does not write .grad."),
    "one-backward-per-window": N_("one backward for the window's summed loss gives the same gradient, but keeps every micro-batch's graph alive to the end: the memory accumulation exists to save. Backward each micro-batch right after its forward."),
    "forwards-first": N_("with all forward passes first, every micro-batch's graph is alive at once (the memory of the whole window): backward each micro-batch right after its forward."),
    "backward-count": N_("each micro-batch's loss is backpropagated once; an extra backward adds its gradient again."),
    "micro-batches-changed": N_("the data belongs to the caller (the next epoch reads it again): `targets[~mask] = -100` or `x /= ...` changes it. Make a new tensor: `torch.where(mask, targets, -100)`."),
    "grads-left": N_("zero the gradients after each optimizer step, the last one (and a skipped one) included."),
    "step-each": N_("it stepped after every micro-batch: step (and zero_grad) once per window."),
    "last-window-dropped": N_("the last, shorter window never stepped: its gradients would be lost."),
    "step-count": N_("one optimizer step per window of accum_steps micro-batches (the last may be shorter)."),
    "no-divide": N_("the loss was not divided by the number of micro-batches in the window: the gradient is K× the window's mean gradient, like a K× larger learning rate (clipping hides it above max_norm)."),
    "divide-total": N_("the loss was divided by the number of micro-batches in the whole list, not in its window."),
    "partial-by-k": N_("the last, shorter window was divided by accum_steps although it holds fewer micro-batches: its mean is the sum divided by ITS size."),
    "zero-each": N_("the gradients were cleared before every micro-batch, so only the window's last one counted."),
    "never-zero": N_("the gradients were never cleared after a step, so each window added to the previous one's."),
    "stale-kept": N_("the stale gradients that were in .grad before the call are in the result: clear them before the first micro-batch (zero_grad(set_to_none=True))."),
    "own-mean-k": N_("that is each micro-batch's own token mean ÷ K: every micro-batch then weighs the same, so a token among few counts more. Divide each micro-batch's token SUM by the window's count."),
    "own-mean": N_("that is each micro-batch's own token mean, not divided by anything: K means add up to about K× the window's mean, weighted by micro-batch instead of by token."),
    "default-mean-k": N_("cross_entropy's default mean averages over every position, prompt and padding included, and ÷K weighs micro-batches equally: sum the counted tokens' losses, divide by the window's count."),
    "padding": N_("padding and prompt tokens were counted: multiply the per-token losses by the mask before summing."),
    "mask-ignored": N_("every position's loss was summed and divided by the number of positions: sum only the counted tokens' losses, and count only the True entries of the masks."),
    "positions": N_("you divided by the number of positions (B·T over the micro-batches), padding and prompt included: N is the number of True entries in the masks."),
    "running": N_("each micro-batch was divided by the tokens seen SO FAR: N is the whole window's count (count the masks up front, or divide .grad by N after the last backward)."),
    "logged-mean": N_("the logged loss is the mean of the micro-batch means: it weighs micro-batches, not tokens, so it is not the loss whose gradient you computed."),
    "logged-loss": N_("the logged loss is the window's token mean: the sum of what the micro-batches backpropagated."),
    "empty-micro-batch-nan": EMPTY,
    "bf16": N_("the exercise names float16: `torch.autocast('cpu', dtype=torch.float16)`. bf16 has float32's range and needs no scaler; fp16's small gradients underflow, which GradScaler exists for."),
    "no-autocast": N_("run each micro-batch's forward and loss under `torch.autocast('cpu', dtype=torch.float16)`."),
    "backward-in-autocast": N_("autocast is for the forward pass and the loss: end the `with` block before scaler.scale(loss).backward() (PyTorch's AMP notes advise against backward under autocast)."),
    "scaler-step-each": N_("one scaler.step(optimizer) per window, after the last micro-batch's backward."),
    "update-count": N_("call scaler.update() once per window, right after scaler.step(optimizer): it halves the scale after an overflow, grows it after good steps, and resets the scaler."),
    "update-before-step": N_("scaler.update() resets the scaler: call it after scaler.step(optimizer)."),
    "optimizer-step": N_("the parameters changed although the gradients overflowed: scaler.step(optimizer) skips the update when unscale_ found inf/NaN (optimizer.step() does not)."),
    "clip-first": N_("clipping ran on the SCALED gradients (their norm is S× too large, so the clip shrank them about S× too much): unscale first, then clip. Chapter 08 measures what this order costs."),
    "no-clip": N_("the gradients were not clipped: clip the total norm to max_norm, in true (unscaled) units."),
    "no-scale": N_("backward ran on the unscaled loss, but unscale_ still divided by S: backpropagate scaler.scale(loss)."),
    "all-reduce-skipped": N_("every rank takes part in every all_reduce, also a rank without tokens: in a real run the others wait for it for ever (DDP's all-reduce inside backward too)."),
    "not-one-loss-per-micro-batch": N_("each micro-batch runs its own backward (one graph at a time; DDP all-reduces in the last one's), so each needs its own 0-dim loss."),
    "not-a-scalar": N_("sum the counted tokens' losses: backward starts from one number."),
    "no-graph": N_("every micro-batch's loss runs backward, also one without tokens: keep it a tensor connected to token_losses (a masked sum; no .item(), .detach() or torch.tensor(...))."),
    "empty-nan": EMPTY,
    "rank-own-mean": N_("that is each micro-batch's own token mean ÷ K, which DDP then averages over the ranks: micro-batches and ranks with few tokens weigh as much as those with many. Divide token SUMS by the window's count on all ranks."),
    "rank-count": N_("each rank divided by its OWN window's token count: all_reduce the count, so every rank divides by the window's tokens on all ranks."),
    "micro-count": N_("each micro-batch was divided by its own count summed over the ranks: the count is the WINDOW's, over every micro-batch of every rank. Add up the window's masks, then one all_reduce."),
    "no-world": N_("DDP divides the summed gradients by world_size (it averages): multiply each loss by world_size, so the ranks' average is the gradient of the global token mean."),
    "over-world": N_("DDP already divides by world_size; dividing the loss by it too makes the gradient world_size² too small. Multiply by world_size instead."),
    "divide-by-k": N_("÷K belongs to per-micro-batch MEANS; a token sum divided by the window's count is already the window's share: no ÷K on top."),
    "rank-padding": N_("padding tokens were counted: multiply the losses by the mask before summing."),
}
SCALER_ERROR_HINTS = {  # by the kind of error the step raised (autogradlab.tracebacks.ERROR_KINDS)
    "scaler_unscaled_twice": N_("unscale once per optimizer step, after the LAST micro-batch's backward, right before clipping."),
    "scaler_never_scaled": N_("backpropagate the scaled loss: scaler.scale(loss).backward()."),
    "scaler_no_inf_checks": N_("scaler.update() needs scaler.step(optimizer) in the same step, and scaler.step needs gradients that came from scaler.scale(loss).backward()."),
}
RANK_ERROR_HINTS = {
    "none_value": N_("all_reduce works in place, like torch.distributed.all_reduce: it returns None and leaves the sum in the tensor you pass."),
}
#: the checks' words, by key: what the learner's code did (filled in with the LearnerCall's ``name`` and ``label``), the inputs
SAID = {
    "loop-label": N_("{count} micro-batches of 3 samples, accum_steps={k} (windows of {windows}; stale gradients in .grad before the call; MSE mean loss, SGD, float64)"),
    "loop-what": N_("the gradient at optimizer step {step} (a window of {size})"),
    "token-label": N_("a window of {count} micro-batch(es) of (B, T) = {shapes}, stale .grad"),
    "no-token": N_("{shape} with no counted token"),
    "token-what": N_("the gradient left in .grad"),
    "amp-label": N_("3 micro-batches of 4 samples, GradScaler('cpu', init_scale={scale:g}), {case}"),
    "amp-clip": N_("gradient norm {norm:.3g} {sign} max_norm {max_norm}"),
    "amp-overflow": N_("one micro-batch with an inf input (overflow)"),
    "amp-what": N_("the parameter update"),
    "world-label": N_("{ranks} ranks × {count} micro-batches of different shapes"),
    "world-empty": N_("{ranks} ranks × {count} micro-batches of different shapes, micro-batches and one rank's whole window without a counted token"),
    "world-what": N_("DDP's average gradient with respect to each token's loss"),
    "backwards": N_("`{name}` ran {n} backward pass(es) that wrote .grad for {label}."),
    "alive": N_("`{name}` ran {n} backward pass(es) that wrote .grad for {label}; up to {alive} forward passes ran before a backward."),
    "backward-count": N_("`{name}` ran {n} backward pass(es) that wrote .grad for {label}; expected one per micro-batch ({needed})."),
    "grads-left": N_("after `{name}` gradients are still in .grad for {label}."),
    "micro-batches-changed": N_("`{name}` changed the caller's data in place for {label}."),
    "steps": N_("`{name}` stepped {n} times for {label}; expected {want}."),
    "nan-grad": N_("`{name}` left inf/NaN in .grad for {label}."),
    "not-float": N_("`{name}` returned {type} for {label}; expected the window's token-mean loss as a Python float (for logging)."),
    "logged": N_("`{name}` returned {value:.6g} for {label}; the window's token mean is {loss:.6g}."),
    "dtype": N_("`{name}` ran the forward in {dtypes} dtype for {label}."),
    "backward-in-autocast": N_("`{name}` called backward inside the autocast region for {label}."),
    "scaler-step-each": N_("`{name}` called scaler.step {n} times for {label}."),
    "update-before-step": N_("`{name}` called scaler.update() before scaler.step for {label}."),
    "update-count": N_("`{name}` called scaler.update() {n} times for {label}."),
    "optimizer-step": N_("the parameters changed although the gradients overflowed, for {label}."),
    "step-count": N_("optimizer.step() ran {n} times for {label}; expected once."),
    "scale": N_("the scale is {got:g} after the step, expected {want:g} (it halves after an overflow, grows after a good step), for {label}."),
    "all-reduce-skipped": N_("the ranks called all_reduce different numbers of times: {calls}."),
    "not-one-loss-per-micro-batch": N_("`{name}` returned {type} on rank {rank} for {label}; expected a list of {n} losses."),
    "not-a-scalar": N_("the loss of micro-batch {k} on rank {rank} ({n} counted tokens) for {label} has shape {shape}; a loss is a 0-dim tensor."),
    "no-graph": N_("the loss of micro-batch {k} on rank {rank} ({n} counted tokens) for {label} is a {type} without a graph."),
    "empty-nan": N_("the loss of micro-batch {k} on rank {rank} ({n} counted tokens) for {label} is {value}."),
    "loop-passed": N_("accumulation_loop: one step per window with the window's mean gradient, one backward per micro-batch (3 set-ups, stale gradients, shorter last window)"),
    "token-passed": N_("accumulate_token_mean: .grad is the window's token-mean gradient, one backward per micro-batch, logged loss right (3 windows: padding, prompts, a micro-batch without counted tokens, stale gradients)"),
    "amp-passed": N_("amp_accumulation_step: fp16 forward, backward ×K outside autocast, unscale before clip, skipped overflow step, scale updated (clip active and inactive)"),
    "world-passed": N_("rank_window_losses: DDP's average of the accumulated gradients is the window's global token-mean gradient (2 worlds: 2 ranks × 3 micro-batches, 3 ranks × 2 with empty micro-batches and an empty rank)"),
}
# fmt: on
_KINDS = {"micro-batches-changed": "changed-input", "not-one-loss-per-micro-batch": "type", "not-a-scalar": "shape"}
_KINDS |= dict.fromkeys(("empty-micro-batch-nan", "empty-nan"), "not-finite")
_KINDS |= dict.fromkeys(("logged-mean", "logged-loss"), "value")


_said = functools.partial(said, SAID)


def _fail(mistake: str | None, learner: LearnerCall | None, said: str | None = None, **values) -> ExerciseError:
    """The error for ``mistake`` (None: a type error without a named slip), summary ``SAID[said or mistake]``."""
    summary = _said(said or mistake, **({"name": learner.name, "label": learner.label} if learner else {}), **values)
    kind = _KINDS.get(mistake, "contract") if mistake else "type"
    return ExerciseError(kind, summary, hint=mistake and HINTS[mistake], mistake=mistake)


def _variants(make: Callable, names: str) -> tuple:
    return variants(make, {name: HINTS[name] for name in names.split()})


# --------------------------------------------------------------------------- shared: what the learner's code did


class _Trace(contextlib.ExitStack):
    """Records a model's graph-building forward passes ("F") and its backward passes ("B"), in order; its hooks go at exit.

    A backward is seen by a post-accumulate-grad hook on the first parameter (once per
    ``backward()`` that reaches it), which also notes autocast being on; a forward hook on
    ``dtype_of`` records its output's dtype (autocast's compute dtype).
    """

    def __init__(self, model: torch.nn.Module, dtype_of: torch.nn.Module | None = None):
        super().__init__()
        self.events, self.dtypes, self.backward_under_autocast = [], set(), False
        self.enter_context(model.register_forward_hook(lambda m, i, out: out.requires_grad and self.events.append("F")))
        self.enter_context(next(model.parameters()).register_post_accumulate_grad_hook(self._backward))
        if dtype_of is not None:
            self.enter_context(dtype_of.register_forward_hook(lambda m, i, out: self.dtypes.add(out.dtype)))

    def _backward(self, param) -> None:
        self.events.append("B")
        self.backward_under_autocast |= torch.is_autocast_enabled("cpu")

    def check(self, learner: LearnerCall, needed: int, allowed: int) -> None:
        """One backward per micro-batch, right after its forward; a skipped empty one leaves at most 2 graphs pending."""
        n, alive = self.events.count("B"), max(map(len, "".join(self.events).split("B")))
        if n == 0 and needed:
            raise _fail("no-backward", learner, "backwards", n=n)
        if alive > 2:
            slip = "one-backward-per-window" if n < needed else "forwards-first"
            raise _fail(slip, learner, "alive", n=n, alive=alive)
        if not needed <= n <= allowed:
            raise _fail("backward-count", learner, n=n, needed=needed)


def _flat_grads(model) -> torch.Tensor:
    return parameters_to_vector(torch.zeros_like(p) if p.grad is None else p.grad for p in model.parameters()).detach()


def _check_cleared(model, learner: LearnerCall) -> None:
    if any(p.grad is not None and p.grad.any() for p in model.parameters()):
        raise _fail("grads-left", learner)


def _unchanged(before, after) -> bool:
    if isinstance(before, torch.Tensor):
        return isinstance(after, torch.Tensor) and before.shape == after.shape and torch.equal(before, after.detach())
    return len(before) == len(after) and all(map(_unchanged, before, after))  # lists and tuples of them


def _check_unchanged(before, after, learner: LearnerCall) -> None:
    if not _unchanged(before, after):
        raise _fail("micro-batches-changed", learner)


def _compare_naming_variant(got, expected, runs: Runs, same: Callable, what: str, label: str, **context) -> None:
    """:func:`compare`; when it fails, a variant whose result ``same`` accepts names the mistake."""
    try:
        compare(got, expected, what=what, label=label, context=context)
    except ExerciseError as error:
        slip = runs.closest(same)
        raise (error.but(hint=slip.hint, mistake=slip.name) if slip else error) from None


def _same_first(got, wrong) -> bool:
    return close(got[0], wrong[0])


# --------------------------------------------------------------------------- exercise 1: the accumulation loop


def _loop_variant(kind: str):
    """The reference loop (``kind="right"``) or one of its typical slips."""

    def loop(model, optimizer, loss_fn, micro_batches, accum_steps):
        if kind != "stale-kept":
            optimizer.zero_grad()
        n = len(micro_batches)
        for i, (x, y) in enumerate(micro_batches):
            size = min(accum_steps, n - i + i % accum_steps)
            if kind == "zero-each":
                optimizer.zero_grad()
            divide = {"no-divide": 1, "divide-total": n, "partial-by-k": accum_steps}.get(kind, size)
            (loss_fn(model(x), y) / divide).backward()
            if (i + 1) % accum_steps == 0 or i + 1 == n:
                optimizer.step()
                if kind != "never-zero":
                    optimizer.zero_grad()
        optimizer.zero_grad()

    return loop


_reference_loop = _loop_variant("right")
LOOP_VARIANTS = _variants(_loop_variant, "no-divide divide-total partial-by-k zero-each never-zero stale-kept")
LOOP_SETUPS = ((0, 8, 4), (1, 7, 3), (2, 6, 4))  # (seed, micro-batches, accum_steps): windows 4+4, 3+3+1, 4+2


def _run_loop(step, seed: int, count: int, accum_steps: int):
    """Run a loop with stale gradients present: the gradient each optimizer.step() applied, the trace, model, data."""
    model = cases.regression_mlp(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3)
    applied = []
    cases.stale_gradients(model, seed)
    batches = cases.regression_micro_batches(seed, count)
    with _Trace(model) as trace, optimizer.register_step_pre_hook(lambda *_: applied.append(_flat_grads(model))):
        step(model, optimizer, torch.nn.MSELoss(), batches, accum_steps)
    return applied, trace, model, batches


def _same_steps(got, wrong) -> bool:
    return len(got[0]) == len(wrong[0]) and all(close(a, b) for a, b in zip(got[0], wrong[0]))


def check_accumulation_loop(accumulation_loop: Callable) -> None:
    """Check ``accumulation_loop(model, optimizer, loss_fn, micro_batches, accum_steps)`` against the reference loop.

    >>> check_accumulation_loop(_reference_loop)
    ✓ accumulation_loop: one step per window with the window's mean gradient, one backward per micro-batch (3 set-ups, stale gradients, shorter last window)
    """
    for seed, count, k in LOOP_SETUPS:
        windows = [min(k, count - start) for start in range(0, count, k)]
        label = _said("loop-label", count=count, k=k, windows="+".join(map(str, windows)))
        learner = LearnerCall(accumulation_loop, "accumulation_loop", label=label)
        run = functools.partial(_run_loop, seed=seed, count=count, accum_steps=k)
        runs = run_variants(run, learner, _reference_loop, LOOP_VARIANTS)
        got, trace, model, batches = runs.learner
        _check_unchanged(cases.regression_micro_batches(seed, count), batches, learner)
        if len(got) != len(windows):
            mistake = {count: "step-each", count // k: "last-window-dropped"}.get(len(got), "step-count")
            raise _fail(mistake, learner, "steps", n=len(got), want=len(windows))
        trace.check(learner, count, count)
        for step, (g, e) in enumerate(zip(got, runs.reference[0])):
            what = _said("loop-what", step=step + 1, size=windows[step])
            _compare_naming_variant(g, e, runs, _same_steps, what, learner.label, accum_steps=windows[step])
        _check_cleared(model, learner)
    passed(_said("loop-passed"))


# --------------------------------------------------------------------------- exercise 2: a window's token mean


def _per_token_ce(model, features, targets):
    return F.cross_entropy(model(features).flatten(0, 1), targets.flatten(), reduction="none").view_as(targets)


def _token_variant(kind: str):
    """The reference (``kind="right"``) or one of its typical slips."""

    def answer(model, micro_batches):
        if kind != "stale-kept":
            model.zero_grad(set_to_none=True)
        k, seen, logged = len(micro_batches), 0, []
        window = sum(int(mask.sum()) for _, _, mask in micro_batches)
        positions = sum(mask.numel() for _, _, mask in micro_batches)
        for features, targets, mask in micro_batches:
            losses, n = _per_token_ce(model, features, targets), int(mask.sum())
            seen += n
            total = losses.sum() if kind in ("padding", "mask-ignored") else (losses * mask).sum()
            divide = {"own-mean-k": max(n, 1) * k, "own-mean": max(n, 1), "running": max(seen, 1)}
            loss = total / divide.get(kind, positions if kind in ("mask-ignored", "positions") else window)
            if kind == "default-mean-k":
                loss = losses.mean() / k
            loss.backward()
            logged.append(loss.item() if kind != "logged-mean" else (losses * mask).sum().item() / max(n, 1))
        return sum(logged) / (k if kind == "logged-mean" else 1)

    return answer


_reference_token_window = _token_variant("right")
_TOKEN_SLIPS = "own-mean-k own-mean default-mean-k padding mask-ignored positions running stale-kept logged-mean"
TOKEN_VARIANTS = _variants(_token_variant, _TOKEN_SLIPS)
TOKEN_OFF_LIMITS = OffLimits(
    course=("autogradlab.models.token_accumulation",),
    why="build the token mean yourself: autogradlab.models.token_accumulation is the course's reference for it.",
)


def _run_token_window(step, index: int):
    model = tokens.token_model(dim=6, vocab=5, seed=index)
    cases.stale_gradients(model, index)
    batches = [(m.features, m.targets, m.mask) for m in tokens.uneven_window(index)]
    with _Trace(model) as trace:
        logged = step(model, batches)
    return _flat_grads(model), logged, trace, batches


def _window_in_one_pass(index: int) -> tuple[torch.Tensor, float]:
    """The window's token-mean gradient and loss from ONE autograd pass over every micro-batch."""
    model, window = tokens.token_model(dim=6, vocab=5, seed=index), tokens.uneven_window(index)
    loss = sum(tokens.token_losses(model, m).sum() for m in window) / sum(m.tokens for m in window)
    return parameters_to_vector(torch.autograd.grad(loss, list(model.parameters()))), loss.item()


def _as_float(value) -> float | None:
    try:
        return float(value.detach() if isinstance(value, torch.Tensor) else value)
    except (TypeError, ValueError, RuntimeError):
        return None


def _same_grad_and_log(got, wrong) -> bool:
    """The right gradient, and the same (wrong) logged loss as the variant."""
    value = _as_float(got[1])
    return _same_first(got, wrong) and value is not None and math.isclose(value, wrong[1], rel_tol=1e-9)


def check_token_mean_window(accumulate_token_mean: Callable) -> None:
    """Check ``accumulate_token_mean(model, micro_batches)``: .grad = gradient of the window's token mean.

    >>> check_token_mean_window(_reference_token_window)
    ✓ accumulate_token_mean: .grad is the window's token-mean gradient, one backward per micro-batch, logged loss right (3 windows: padding, prompts, a micro-batch without counted tokens, stale gradients)
    """
    for index, spec in enumerate(tokens.UNEVEN_WINDOWS):
        shapes = ", ".join(_said("no-token", shape=s[:2]) if len(s) > 2 else str(s) for s in spec)
        label = _said("token-label", count=len(spec), shapes=shapes)
        learner = LearnerCall(accumulate_token_mean, "accumulate_token_mean", TOKEN_OFF_LIMITS, label=label)
        runs = run_variants(functools.partial(_run_token_window, index=index), learner, None, TOKEN_VARIANTS)
        got, logged, trace, batches = runs.learner
        fresh = tokens.uneven_window(index)
        _check_unchanged([(m.features, m.targets, m.mask) for m in fresh], batches, learner)
        empty = sum(m.tokens == 0 for m in fresh)
        trace.check(learner, len(spec) - empty, len(spec))
        expected, loss = _window_in_one_pass(index)
        if not torch.isfinite(got).all():
            raise _fail("empty-micro-batch-nan", learner, "nan-grad")
        tokens_in = sum(m.tokens for m in fresh)
        _compare_naming_variant(got, expected, runs, _same_first, _said("token-what"), label, num_tokens=tokens_in)
        value = _as_float(logged)
        if value is None:
            raise _fail(None, learner, "not-float", type=type(logged).__name__)
        if not math.isclose(value, loss, rel_tol=1e-9, abs_tol=1e-12):
            slip = runs.closest(_same_grad_and_log)
            mistake = slip.name if slip else "logged-loss" if math.isfinite(value) else "empty-micro-batch-nan"
            raise _fail(mistake, learner, "logged", value=value, loss=loss)
    passed(_said("token-passed"))


# --------------------------------------------------------------------------- exercise 3: repair an AMP step over a window

MAX_NORM = 0.5
# (seed, input scale: ‖g‖ above/below MAX_NORM, overflow)
AMP_SETUPS = ((0, 3.0, False), (1, 0.05, False), (0, 3.0, True))


def _amp_variant(kind: str):
    """The reference step (``kind="right"``) or one of its typical slips."""

    def step(model, optimizer, scaler, micro_batches, max_norm):
        k = 1 if kind == "no-divide" else len(micro_batches)
        for x, y in micro_batches:
            with torch.autocast("cpu", dtype=torch.float16):
                loss = F.mse_loss(model(x), y) / k
            scaled = scaler.scale(loss)
            (loss if kind == "no-scale" else scaled).backward()
        if kind == "clip-first":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.unscale_(optimizer)
        if kind not in ("clip-first", "no-clip"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    return step


_amp_reference = _amp_variant("right")
AMP_VARIANTS = _variants(_amp_variant, "clip-first no-divide no-clip no-scale")


def _run_amp(step, seed, input_scale, overflow):
    model, optimizer, scaler, window = cases.amp_window(seed, input_scale, overflow)
    steps, start = [], parameters_to_vector(model.parameters()).detach()
    counted = optimizer.register_step_post_hook(lambda *_: steps.append(1))  # scaler.step's call counts too
    with _Trace(model, dtype_of=model[0]) as trace, counted, recorded_scaler_calls(scaler) as calls:
        step(model, optimizer, scaler, window, MAX_NORM)
    return parameters_to_vector(model.parameters()).detach() - start, scaler, model, len(steps), trace, calls


def _true_grad_norm(seed: int, input_scale: float) -> float:
    """The float32 norm of the window's mean gradient: is the clip threshold above or below it?"""
    model, _, _, window = cases.amp_window(seed, input_scale, False)
    loss = sum(F.mse_loss(model(x), y) for x, y in window) / len(window)
    return float(parameters_to_vector(torch.autograd.grad(loss, list(model.parameters()))).norm())


def _check_amp_calls(trace: _Trace, calls: list[str], learner: LearnerCall) -> None:
    """fp16 forward, backward outside autocast, one backward per micro-batch, one scaler.step then one update."""
    if trace.dtypes != {torch.float16}:
        dtypes = ", ".join(sorted(map(str, trace.dtypes))) or "no"
        raise _fail("bf16" if trace.dtypes == {torch.bfloat16} else "no-autocast", learner, "dtype", dtypes=dtypes)
    if trace.backward_under_autocast:
        raise _fail("backward-in-autocast", learner)
    trace.check(learner, 3, 3)
    if calls.count("step") > 1:
        raise _fail("scaler-step-each", learner, n=calls.count("step"))
    if "step" in calls and "update" in calls and calls.index("update") < calls.index("step"):
        raise _fail("update-before-step", learner)
    if calls.count("update") != 1:
        raise _fail("update-count", learner, n=calls.count("update"))


def check_amp_accumulation_step(amp_accumulation_step: Callable) -> None:
    """Check ``amp_accumulation_step(model, optimizer, scaler, micro_batches, max_norm)``: one fp16 step over a window.

    >>> check_amp_accumulation_step(_amp_reference)
    ✓ amp_accumulation_step: fp16 forward, backward ×K outside autocast, unscale before clip, skipped overflow step, scale updated (clip active and inactive)
    """
    step = LearnerCall(amp_accumulation_step, "amp_accumulation_step", error_hints=SCALER_ERROR_HINTS)
    for seed, input_scale, overflow in AMP_SETUPS:
        norm = _true_grad_norm(seed, input_scale)
        case = _said("amp-clip", norm=norm, sign=">" if norm > MAX_NORM else "<", max_norm=MAX_NORM)
        label = _said("amp-label", scale=cases.AMP_INIT_SCALE, case=_said("amp-overflow") if overflow else case)
        learner = step.on(label)
        run = functools.partial(_run_amp, seed=seed, input_scale=input_scale, overflow=overflow)
        runs = run_variants(run, learner, _amp_reference, AMP_VARIANTS)
        got, scaler, model, steps, trace, calls = runs.learner
        _check_amp_calls(trace, calls, learner)
        if overflow and (not torch.isfinite(got).all() or got.abs().max() > 0):
            raise _fail("optimizer-step", learner)
        if not overflow and steps != 1:
            raise _fail("step-count", learner, n=steps)
        if not overflow:
            _compare_naming_variant(got, runs.reference[0], runs, _same_first, _said("amp-what"), label, accum_steps=3)
        if scaler.get_scale() != runs.reference[1].get_scale():
            raise _fail("update-count", learner, "scale", got=scaler.get_scale(), want=runs.reference[1].get_scale())
        _check_cleared(model, learner)
    passed(_said("amp-passed"))


# --------------------------------------------------------------------------- exercise 4: DDP × accumulation, token mean


def _rank_variant(kind: str):
    """The reference (``kind="right"``) or one of its typical slips."""

    def answer(micro_batches, world_size, all_reduce):
        counts = [mask.sum().double() for _, mask in micro_batches]
        window = sum(counts)
        for count in counts if kind == "micro-count" else [] if kind in ("rank-count", "rank-own-mean") else [window]:
            all_reduce(count)
        per_micro = counts if kind in ("micro-count", "rank-own-mean") else [window] * len(counts)
        k = len(counts)
        scale = {"no-world": 1, "over-world": 1 / world_size, "divide-by-k": world_size / k, "rank-own-mean": 1 / k}
        return [
            (losses if kind == "rank-padding" else losses * mask).sum() * scale.get(kind, world_size) / n.clamp_min(1)
            for (losses, mask), n in zip(micro_batches, per_micro)
        ]

    return answer


_rank_reference = _rank_variant("right")
_RANK_SLIPS = "rank-own-mean rank-count micro-count no-world over-world divide-by-k rank-padding"
RANK_VARIANTS = _variants(_rank_variant, _RANK_SLIPS)


def _run_world(step, index: int):
    """``step`` on every rank of world ``index``: what each returned, and the inputs it got."""
    world = tokens.rank_windows(index)
    # non-leaf copies: a learner's in-place write then changes the values (and is reported) instead of raising
    inputs = [[(losses.clone().requires_grad_(True).clone(), mask.clone()) for losses, mask in rank] for rank in world]
    sim = tokens.RankWorld(len(world))
    results = sim.run(step, inputs, len(world))
    if len(set(sim.calls)) > 1:
        raise _fail("all-reduce-skipped", None, calls=sim.calls)
    for result in results:
        if isinstance(result, Exception):
            raise result
    return results, inputs


def _token_grads(results, inputs) -> torch.Tensor:
    """(1/W)·d loss / d token_losses, all ranks and micro-batches in one flat vector: what DDP leaves per token."""
    grads = [
        torch.autograd.grad(loss, token_losses, retain_graph=True, allow_unused=True, materialize_grads=True)[0]
        for losses, rank in zip(results, inputs)
        for loss, (token_losses, _) in zip(losses, rank)
    ]
    return parameters_to_vector(grads) / len(inputs)


def _same_token_grads(got, wrong) -> bool:
    return close(_token_grads(*got), _token_grads(*wrong))


def _check_rank_losses(results, inputs, learner: LearnerCall) -> None:
    for rank, (losses, window) in enumerate(zip(results, inputs)):
        if not isinstance(losses, (list, tuple)) or len(losses) != len(window):
            raise _fail("not-one-loss-per-micro-batch", learner, type=type(losses).__name__, rank=rank, n=len(window))
        for k, (loss, (_losses, mask)) in enumerate(zip(losses, window)):
            fail = functools.partial(_fail, learner=learner, k=k, rank=rank, n=int(mask.sum()))
            if isinstance(loss, torch.Tensor) and loss.dim() > 0:
                raise fail("not-a-scalar", shape=tuple(loss.shape))
            if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
                raise fail("no-graph", type=type(loss).__name__)
            if not torch.isfinite(loss.detach()):
                raise fail("empty-nan", value=float(loss.detach()))


def check_rank_window_losses(rank_window_losses: Callable) -> None:
    """Check ``rank_window_losses(micro_batches, world_size, all_reduce)``: the losses one DDP rank backpropagates
    over an accumulation window, so that DDP's average gradient is that of the window's global token mean.

    >>> check_rank_window_losses(_rank_reference)
    ✓ rank_window_losses: DDP's average of the accumulated gradients is the window's global token-mean gradient (2 worlds: 2 ranks × 3 micro-batches, 3 ranks × 2 with empty micro-batches and an empty rank)
    """
    for index, world in enumerate(tokens.RANK_WINDOWS):
        label = _said("world-empty" if index else "world-label", ranks=len(world), count=len(world[0]))
        learner = LearnerCall(rank_window_losses, "rank_window_losses", error_hints=RANK_ERROR_HINTS, label=label)
        runs = run_variants(functools.partial(_run_world, index=index), learner, _rank_reference, RANK_VARIANTS)
        results, inputs = runs.learner
        fresh = tokens.rank_windows(index)
        _check_unchanged(fresh, [[(t.detach(), m) for t, m in rank] for rank in inputs], learner)
        _check_rank_losses(results, inputs, learner)
        total = sum(int(mask.sum()) for rank in fresh for _, mask in rank)
        expected = parameters_to_vector(mask.double() / total for rank in fresh for _, mask in rank)
        got = _token_grads(results, inputs)
        _compare_naming_variant(got, expected, runs, _same_token_grads, _said("world-what"), label, num_tokens=total)
    passed(_said("world-passed"))
