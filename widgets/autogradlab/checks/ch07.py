"""Checkers for chapter 07 (gradient accumulation).

Each checker runs the learner's code on small float64 (or fp16-autocast) models and
holds the exercise's whole contract, not only the final numbers: the gradients or
updates are compared with a reference computed in one pass by autograd, and a
:class:`_Trace` records what happened on the way (how many forward and backward
passes, in which order, whether backward ran under autocast, which dtype the
forward used), so a right number reached the wrong way is still named. The edges
the exercises name are in every check: stale gradients before the call, a last
window shorter than ``accum_steps``, a micro-batch or rank with no counted token,
a clip threshold both above and below the gradient norm, an overflowing window.
"""

from __future__ import annotations

import contextlib
import math
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

from autogradlab.checks.core import Case, ExerciseError, call_learner, check_function, compare, passed, seeded
from autogradlab.models import token_accumulation

# --------------------------------------------------------------------------- shared: what the learner's code did


class _Trace:
    """Records a model's graph-building forward passes ("F") and backward passes ("B"), in order.

    A backward pass is seen through a post-accumulate-grad hook on the first
    parameter: it fires once per ``backward()`` that reaches the parameter. The hook
    also records whether autocast was on during backward, and a forward hook on
    ``dtype_of`` records the dtype its output had (autocast's compute dtype).
    """

    def __init__(self, model: torch.nn.Module, dtype_of: torch.nn.Module | None = None):
        self.events: list[str] = []
        self.forward_dtypes: list[torch.dtype] = []
        self.backward_under_autocast = False
        first = next(model.parameters())
        self._handles = [
            model.register_forward_hook(self._forward),
            first.register_post_accumulate_grad_hook(self._backward),
        ]
        if dtype_of is not None:
            self._handles.append(dtype_of.register_forward_hook(lambda m, i, out: self.forward_dtypes.append(out.dtype)))

    def _forward(self, module, inputs, output) -> None:
        if isinstance(output, torch.Tensor) and output.requires_grad:
            self.events.append("F")

    def _backward(self, param) -> None:
        self.events.append("B")
        self.backward_under_autocast |= torch.is_autocast_enabled("cpu")

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()

    @property
    def backwards(self) -> int:
        return self.events.count("B")

    @property
    def most_graphs_alive(self) -> int:
        """The largest number of forward passes run since the last backward: graphs held at once."""
        most = alive = 0
        for event in self.events:
            alive = alive + 1 if event == "F" else 0
            most = max(most, alive)
        return most


def _one_backward_per_micro_batch(trace: _Trace, name: str, label: str, needed: int, allowed: int) -> None:
    """Accumulation keeps one micro-batch's graph at a time: backward each before the next forward.

    ``needed``: micro-batches that must be backpropagated; ``allowed``: the most that may be
    (a micro-batch with no counted token may be skipped). A forward that is not followed by its
    backward (a skipped empty micro-batch) is tolerated once, so at most 2 graphs pending.
    """
    if trace.backwards == 0 and needed:
        raise ExerciseError(
            f"`{name}` ran no backward pass that wrote .grad for {label}.\n"
            "Hint: accumulate with loss.backward(), once per micro-batch: torch.autograd.grad does not write .grad, "
            "and gradients written into .grad by hand skip the accumulation this exercise is about."
        )
    if trace.backwards < needed and trace.most_graphs_alive > 2:
        raise ExerciseError(
            f"`{name}` ran {trace.backwards} backward pass(es) for {label}, where {needed} micro-batches need one each.\n"
            "Hint: summing the micro-batch losses and calling backward once for the window gives the same gradient, "
            "but keeps every micro-batch's graph (its activations) alive until the end of the window: the memory "
            "accumulation exists to save. Call backward once per micro-batch, right after its forward pass."
        )
    if trace.most_graphs_alive > 2:
        raise ExerciseError(
            f"`{name}` ran {trace.most_graphs_alive} forward passes before the next backward for {label}.\n"
            "Hint: with all forward passes first, every micro-batch's graph is alive at once (the memory of the whole "
            "window). Run each micro-batch's backward right after its forward, before the next micro-batch."
        )
    if not needed <= trace.backwards <= allowed:
        why = ("accumulate with loss.backward() (torch.autograd.grad does not write .grad), once per micro-batch."
               if trace.backwards < needed else
               "each micro-batch's loss is backpropagated once; an extra backward adds its gradient again.")
        raise ExerciseError(
            f"`{name}` ran {trace.backwards} backward pass(es) for {label}; expected one per micro-batch ({needed}"
            + (f" to {allowed}" if allowed != needed else "") + f").\nHint: {why}"
        )


def _flat_params(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


def _flat_grads(model) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).clone()
                      for p in model.parameters()])


def _grads_cleared(model) -> bool:
    return all(p.grad is None or not p.grad.abs().sum() > 0 for p in model.parameters())


def _stale_gradients(model, seed: int) -> None:
    """Leftovers from before the call (e.g. a logging pass): large, so they cannot hide in a tolerance."""
    gen = seeded(900 + seed)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=gen, dtype=p.dtype) * 5


def _snapshot(value):
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_snapshot(v) for v in value)
    return value


def _untouched(before, after) -> bool:
    if isinstance(before, torch.Tensor):
        return isinstance(after, torch.Tensor) and before.shape == after.shape and torch.equal(before, after.detach())
    if isinstance(before, (tuple, list)):
        return len(before) == len(after) and all(_untouched(b, a) for b, a in zip(before, after))
    return True


def _inputs_untouched(before, after, name: str, label: str) -> None:
    if not _untouched(before, after):
        raise ExerciseError(
            f"`{name}` changed the caller's micro-batches in place for {label}.\n"
            "Hint: the data belongs to the caller (the next epoch reads it again): an in-place write such as "
            "`targets[~mask] = -100` or `x /= ...` changes it. Make a new tensor: `torch.where(mask, targets, -100)`."
        )


# --------------------------------------------------------------------------- exercise 1: the accumulation loop


def _loop_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).double()


def _micro_batches(seed: int, count: int, size: int = 3):
    gen = seeded(200 + seed)
    return [(torch.randn(size, 5, generator=gen, dtype=torch.float64), torch.randn(size, 2, generator=gen, dtype=torch.float64))
            for _ in range(count)]


def _reference_loop(model, optimizer, loss_fn, micro_batches, accum_steps):
    for start in range(0, len(micro_batches), accum_steps):
        window = micro_batches[start:start + accum_steps]
        optimizer.zero_grad(set_to_none=True)
        for x, y in window:
            (loss_fn(model(x), y) / len(window)).backward()
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _loop_variant(kind: str):
    """The typical wrong loops; each one's hint is in LOOP_MISTAKES."""

    def loop(model, optimizer, loss_fn, micro_batches, accum_steps):
        if kind != "stale_kept":
            optimizer.zero_grad()
        n = len(micro_batches)
        for i, (x, y) in enumerate(micro_batches):
            window_start = i - i % accum_steps
            size = min(accum_steps, n - window_start)
            divide = {"no_divide": 1, "divide_total": n, "partial_by_k": accum_steps}.get(kind, size)
            if kind == "zero_each":
                optimizer.zero_grad()
            (loss_fn(model(x), y) / divide).backward()
            if kind == "step_each" or (i + 1) % accum_steps == 0 or (i + 1 == n and kind != "partial_dropped"):
                optimizer.step()
                if kind != "never_zero":
                    optimizer.zero_grad()
        optimizer.zero_grad()

    return loop


LOOP_MISTAKES = {
    "the loss was not divided by the window size: the accumulated gradient is K× the window's mean gradient, "
    "which acts like a K× larger learning rate.": _loop_variant("no_divide"),
    "the loss was divided by the number of micro-batches in the whole list, not by the size of its window.":
        _loop_variant("divide_total"),
    "the last, shorter window was divided by accum_steps although it holds fewer micro-batches: its mean is the sum "
    "divided by ITS size (count the window's micro-batches before its first backward).": _loop_variant("partial_by_k"),
    "the gradients were cleared before every micro-batch, so only the window's last micro-batch counted: "
    "zero_grad once per window.": _loop_variant("zero_each"),
    "the gradients were never cleared after a step, so each window added to the previous window's gradients: "
    "call optimizer.zero_grad(set_to_none=True) after optimizer.step().": _loop_variant("never_zero"),
    "the stale gradients that were in .grad before the call went into the first step: clear the gradients before the "
    "first micro-batch (optimizer.zero_grad(set_to_none=True)), not only after each step.": _loop_variant("stale_kept"),
}

# (number of micro-batches, accum_steps): windows of 4+4; 3+3+1; 4+2 (the last window shorter in two set-ups)
LOOP_SETUPS = ((0, 8, 4), (1, 7, 3), (2, 6, 4))


def _run_loop(fn, seed: int, count: int, accum_steps: int, call=None):
    """Run a loop with stale gradients present; return the gradient seen at each optimizer.step, the trace, the model."""
    model = _loop_model(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3)
    step_grads = []
    original = optimizer.step

    def recording_step(*args, **kwargs):
        step_grads.append(_flat_grads(model))
        return original(*args, **kwargs)

    optimizer.step = recording_step
    _stale_gradients(model, seed)
    batches = _micro_batches(seed, count)
    trace = _Trace(model)
    try:
        args = (model, optimizer, torch.nn.MSELoss(), batches, accum_steps)
        call(fn, args) if call else fn(*args)
    finally:
        trace.remove()
    return step_grads, trace, model, batches


def _windows(count: int, k: int) -> list[int]:
    return [min(k, count - start) for start in range(0, count, k)]


def check_accumulation_loop(accumulation_loop: Callable) -> None:
    """Check ``accumulation_loop(model, optimizer, loss_fn, micro_batches, accum_steps)`` against the reference loop.

    >>> check_accumulation_loop(_reference_loop)
    ✓ accumulation_loop: one step per window with the window's mean gradient, one backward per micro-batch (3 set-ups, stale gradients, shorter last window)
    """
    for seed, count, k in LOOP_SETUPS:
        windows = _windows(count, k)
        label = (f"{count} micro-batches of 3 samples, accum_steps={k} (windows of {'+'.join(map(str, windows))}; "
                 f"stale gradients in .grad before the call; MSE mean loss, SGD, float64)")
        fresh = _micro_batches(seed, count)
        got, trace, model, batches = _run_loop(
            accumulation_loop, seed, count, k, call=lambda fn, args: call_learner(fn, args, "accumulation_loop", label)
        )
        _inputs_untouched(fresh, batches, "accumulation_loop", label)
        if len(got) != len(windows):
            if len(got) == count:
                why = "it stepped after every micro-batch: step (and zero_grad) once per window."
            elif len(got) == count // k and count % k:
                why = (f"the last, shorter window ({windows[-1]} micro-batch{'es' if windows[-1] > 1 else ''}) never "
                       "stepped: its gradients would be lost. Step at the end of the list too.")
            else:
                why = "one optimizer.step() per window of accum_steps micro-batches (the last one may be shorter)."
            raise ExerciseError(
                f"`accumulation_loop` called optimizer.step() {len(got)} times for {label}; expected {len(windows)}.\n"
                f"Hint: {why}"
            )
        _one_backward_per_micro_batch(trace, "accumulation_loop", label, count, count)
        expected, _, _, _ = _run_loop(_reference_loop, seed, count, k)
        wrong = {hint: _run_loop(fn, seed, count, k)[0] for hint, fn in LOOP_MISTAKES.items()}
        for step, (g, e) in enumerate(zip(got, expected)):
            mistakes = {hint: w[step] for hint, w in wrong.items() if len(w) == len(expected)}
            compare(g, e, what=f"the gradient at optimizer step {step + 1} (a window of {windows[step]})", label=label,
                    context={"accum_steps": windows[step]}, mistakes=mistakes)
        if not _grads_cleared(model):
            raise ExerciseError(
                f"after `accumulation_loop` the gradients of the last window are still in .grad for {label}.\n"
                "Hint: zero them after each optimizer.step(), the last one included."
            )
    passed("accumulation_loop: one step per window with the window's mean gradient, one backward per micro-batch "
           "(3 set-ups, stale gradients, shorter last window)")


# --------------------------------------------------------------------------- exercise 2: the exact token mean of a window

DIM, VOCAB = 6, 5


def _token_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(DIM, 8), torch.nn.Tanh(), torch.nn.Linear(8, VOCAB)).double()


def _token_micro_batch(gen, batch: int, length: int, empty: bool = False):
    """Prompt (not counted), then response (counted), then padding (not counted): not a prefix mask."""
    features = torch.randn(batch, length, DIM, generator=gen, dtype=torch.float64)
    targets = torch.randint(0, VOCAB, (batch, length), generator=gen)
    positions = torch.arange(length)[None, :]
    prompt = torch.randint(0, max(1, length // 3), (batch, 1), generator=gen)
    response = torch.randint(1, length + 1, (batch, 1), generator=gen)
    mask = (positions >= prompt) & (positions < prompt + response)
    if empty:
        mask[:] = False  # e.g. prompts only, or sequences truncated before their response
    return features, targets, mask


# (B, T) per micro-batch; None marks a micro-batch with no counted token
TOKEN_WINDOWS = (
    ((3, 7), (2, 11), (4, 5)),
    ((2, 9), (3, 4, None), (1, 12), (2, 6)),
    ((5, 8),),
)


def _token_window(seed: int):
    gen = seeded(500 + seed)
    return [_token_micro_batch(gen, spec[0], spec[1], empty=len(spec) > 2) for spec in TOKEN_WINDOWS[seed]]


def _per_token_ce(model, features, targets):
    logits = model(features)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view_as(targets)


def _reference_token_window(model, micro_batches):
    """One backward per micro-batch of sum(counted token losses) / N, N counted over the whole window first."""
    model.zero_grad(set_to_none=True)
    window_tokens = sum(int(mask.sum()) for _, _, mask in micro_batches)
    total = 0.0
    for features, targets, mask in micro_batches:
        loss = (_per_token_ce(model, features, targets) * mask).sum() / window_tokens
        loss.backward()
        total += loss.item()
    return total


def _token_window_variant(kind: str):
    """The typical wrong answers; each one's hint is in TOKEN_MISTAKES."""

    def answer(model, micro_batches):
        if kind != "stale_kept":
            model.zero_grad(set_to_none=True)
        k = len(micro_batches)
        window_tokens = sum(int(mask.sum()) for _, _, mask in micro_batches)
        seen, logged = 0, []
        for features, targets, mask in micro_batches:
            losses = _per_token_ce(model, features, targets)
            n = int(mask.sum())
            seen += n
            if kind == "own_mean_k":
                loss = (losses * mask).sum() / max(n, 1) / k
            elif kind == "own_mean":
                loss = (losses * mask).sum() / max(n, 1)
            elif kind == "padding":
                loss = losses.sum() / window_tokens
            elif kind == "positions":
                loss = (losses * mask).sum() / sum(m.numel() for _, _, m in micro_batches)
            elif kind == "running":
                loss = (losses * mask).sum() / max(seen, 1)
            elif kind == "nan_mean":
                loss = losses[mask].mean() * n / window_tokens
            else:
                loss = (losses * mask).sum() / window_tokens
            loss.backward()
            logged.append(loss.item() if kind != "logged_mean" else (losses * mask).sum().item() / max(n, 1))
        return sum(logged) / (k if kind == "logged_mean" else 1)

    return answer


TOKEN_MISTAKES = {
    "that is each micro-batch's own token mean divided by K: every micro-batch then weighs the same, so a token in a "
    "micro-batch with few tokens counts more than one in a micro-batch with many. Divide each micro-batch's token "
    "SUM by the token count of the whole window.": _token_window_variant("own_mean_k"),
    "that is each micro-batch's own token mean, not divided by anything: K micro-batch means add up to about K× the "
    "window's mean, weighted by micro-batch instead of by token.": _token_window_variant("own_mean"),
    "padding and prompt tokens were counted: multiply the per-token losses by the mask (or index with it) before "
    "summing.": _token_window_variant("padding"),
    "you divided by the number of positions (B·T summed over micro-batches), which counts padding and prompt as "
    "tokens: N is the number of True entries in the masks.": _token_window_variant("positions"),
    "each micro-batch was divided by the tokens seen SO FAR: N must be the count of the whole window, known before "
    "the first backward. Count it from the masks up front (they are cheap: no forward pass needed).":
        _token_window_variant("running"),
    "the gradients that were in .grad before the call are still in the result: clear them first "
    "(model.zero_grad(set_to_none=True)).": _token_window_variant("stale_kept"),
}


@contextlib.contextmanager
def _course_helpers_refused() -> Iterator[None]:
    """The package's own token-mean helpers would do the exercise: make them refuse while the learner's code runs.

    Swapping ``__code__`` reaches every name they were imported under (a
    ``from ... import micro_batch_loss`` at the top of a notebook included).
    """

    def refuse(*args, **kwargs):  # runs with the helper's globals: builtins only
        raise RuntimeError(
            "this exercise asks you to build the token mean yourself: autogradlab's micro_batch_loss, "
            "accumulated_gradient and full_batch_gradient are the course's reference and are off limits here"
        )

    helpers = (token_accumulation.micro_batch_loss, token_accumulation.accumulated_gradient,
               token_accumulation.full_batch_gradient)
    saved = [f.__code__ for f in helpers]
    try:
        for f in helpers:
            f.__code__ = refuse.__code__
        yield
    finally:
        for f, code in zip(helpers, saved):
            f.__code__ = code


def _run_token_window(fn, seed: int, call=None):
    model = _token_model(seed)
    _stale_gradients(model, seed)
    batches = _token_window(seed)
    trace = _Trace(model)
    try:
        logged = call(fn, (model, batches)) if call else fn(model, batches)
    finally:
        trace.remove()
    return _flat_grads(model), logged, trace, batches


def _window_reference_one_pass(seed: int) -> tuple[torch.Tensor, float]:
    """The window's token-mean gradient from ONE autograd pass over all micro-batches: independent of accumulation."""
    model = _token_model(seed)
    batches = _token_window(seed)
    total = sum((_per_token_ce(model, f, t) * m).sum() for f, t, m in batches)
    loss = total / sum(int(m.sum()) for _, _, m in batches)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    return torch.cat([g.reshape(-1) for g in grads]), loss.item()


def check_token_mean_window(accumulate_token_mean: Callable) -> None:
    """Check ``accumulate_token_mean(model, micro_batches)``: .grad = gradient of the window's token mean.

    >>> check_token_mean_window(_reference_token_window)
    ✓ accumulate_token_mean: .grad is the window's token-mean gradient, one backward per micro-batch, logged loss right (3 windows: padding, prompts, a micro-batch without counted tokens, stale gradients)
    """
    name = "accumulate_token_mean"
    for seed, spec in enumerate(TOKEN_WINDOWS):
        shapes = ", ".join(f"({s[0]}, {s[1]})" + (" with no counted token" if len(s) > 2 else "") for s in spec)
        label = f"a window of {len(spec)} micro-batch{'es' if len(spec) > 1 else ''} of (B, T) = {shapes}, stale .grad"
        fresh = _token_window(seed)

        def call(fn, args):
            with _course_helpers_refused():
                return call_learner(fn, args, name, label)

        got, logged, trace, batches = _run_token_window(accumulate_token_mean, seed, call)
        _inputs_untouched(fresh, batches, name, label)
        empty = sum(1 for s in spec if len(s) > 2)
        _one_backward_per_micro_batch(trace, name, label, len(spec) - empty, len(spec))
        expected, loss = _window_reference_one_pass(seed)
        if not torch.isfinite(got).all():
            hint = ("a micro-batch with no counted token gives 0/0 = NaN if you take its own mean (`losses[mask].mean()`, "
                    "or cross_entropy with ignore_index on a micro-batch whose targets are all ignored), and NaN × 0 is "
                    "still NaN. A token SUM of an empty micro-batch is 0, exact." if empty else
                    "look for a division by a count that can be zero.")
            raise ExerciseError(f"`{name}` left inf/NaN in .grad for {label}.\nHint: {hint}")
        wrong = {hint: _run_token_window(fn, seed)[0] for hint, fn in TOKEN_MISTAKES.items()}
        compare(got, expected, what="the gradient left in .grad", label=label,
                context={"num_tokens": sum(int(m.sum()) for _, _, m in fresh)}, mistakes=wrong)
        try:
            logged_value = float(logged.detach() if isinstance(logged, torch.Tensor) else logged)
        except (TypeError, ValueError, RuntimeError):
            raise ExerciseError(
                f"`{name}` returned {type(logged).__name__} for {label}; expected the window's token-mean loss "
                "as a Python float (for logging)."
            ) from None
        if not math.isfinite(logged_value):
            raise ExerciseError(
                f"`{name}` returned {logged_value} as the window's loss for {label}.\nHint: a micro-batch with no "
                "counted token has no token mean: 0/0 = NaN (`losses[mask].mean()`, or cross_entropy's mean when every "
                "target is ignored). Multiplying that NaN by its token count 0 leaves NaN. A token SUM of no tokens is 0."
            )
        if abs(logged_value - loss) > 1e-9 * max(1.0, abs(loss)):
            mean_of_means = _run_token_window(_token_window_variant("logged_mean"), seed)[1]
            hint = ("that is the mean of the micro-batch means: it weighs micro-batches, not tokens, so the logged loss "
                    "is not the loss whose gradient you computed. Add up what each micro-batch backpropagated."
                    if abs(logged_value - mean_of_means) < 1e-9 else
                    "the logged loss is the window's token mean: the sum of what the micro-batches backpropagated.")
            raise ExerciseError(
                f"`{name}` returned {logged_value:.6g} for {label}; the window's token-mean loss is {loss:.6g}.\n"
                f"Hint: {hint}"
            )
    passed(f"{name}: .grad is the window's token-mean gradient, one backward per micro-batch, logged loss right "
           "(3 windows: padding, prompts, a micro-batch without counted tokens, stale gradients)")


# --------------------------------------------------------------------------- exercise 4: the loss one DDP rank backpropagates


def _rank_cases(seed: int) -> list[Case]:
    """Worlds of ranks with different token counts; each case is one rank. A rank with no counted token included."""
    gen = seeded(seed)
    cases = []
    # (B, T) of every rank of a world; None: that rank holds no counted token
    worlds = [((3, 7), (2, 5)), ((2, 6), (4, 3), (1, 9)), ((2, 8), (3, 4, None), (2, 5), (1, 7))]
    for world in worlds:
        ranks = []
        for spec in world:
            b, t = spec[:2]
            losses = torch.rand(b, t, generator=gen, dtype=torch.float64) * 3
            lengths = torch.randint(1, t + 1, (b,), generator=gen)
            lengths[0] = max(1, t - 1)  # some padding in every rank
            mask = torch.arange(t)[None, :] < lengths[:, None]
            if len(spec) > 2:
                mask[:] = False
            ranks.append((losses, mask))
        total = sum(int(m.sum()) for _, m in ranks)
        for rank, (losses, mask) in enumerate(ranks):
            # what all_reduce leaves: a 0-dim int64 tensor in the bigger worlds, a Python int in the smallest
            global_tokens = total if len(world) == 2 else torch.tensor(total)
            label = (f"rank {rank} of {len(world)}, token_losses of shape {tuple(losses.shape)}, {int(mask.sum())} "
                     f"tokens here, {total} on all ranks (global_tokens as {type(global_tokens).__name__})")
            cases.append(Case((losses, mask, global_tokens, len(world)), label, context={"num_tokens": total}))
    return cases


def _rank_loss_reference(token_losses, mask, global_tokens, world_size):
    return (token_losses * mask).sum() * world_size / global_tokens


RANK_MISTAKES = {
    "DDP divides the summed gradients by world_size (it averages): multiply the loss by world_size so that the "
    "average of the ranks' gradients is the gradient of the global token mean.":
        lambda l, m, n, w: (l * m).sum() / n,
    "that is this rank's own token mean: ranks with fewer tokens then weigh as much as ranks with many. "
    "Divide by the global token count (all_reduce it before the backward pass) and multiply by world_size.":
        lambda l, m, n, w: (l * m).sum() / m.sum().clamp_min(1),
    "this rank's token mean divided by world_size is still a per-rank mean (and DDP already averages): "
    "divide the token SUM by the global count.":
        lambda l, m, n, w: (l * m).sum() / m.sum().clamp_min(1) / w,
    "multiplying the rank's token mean by world_size scales a per-rank mean: divide the token SUM by global_tokens.":
        lambda l, m, n, w: (l * m).sum() / m.sum().clamp_min(1) * w,
    "padding tokens were counted: multiply by the mask before summing.":
        lambda l, m, n, w: l.sum() * w / n,
}


def _check_rank_gradients(fn, cases, name):
    """What DDP needs: every rank's loss differentiable, (1/W)·d loss_r / d token = mask / N, also with no tokens."""
    for case in cases:
        losses = case.args[0].detach().clone().requires_grad_(True)
        got = call_learner(fn, (losses, *case.args[1:]), name, case.label)
        if not isinstance(got, torch.Tensor) or not got.requires_grad:
            empty = not case.args[1].any()
            raise ExerciseError(
                f"`{name}` returned a value without a graph for {case.label}.\n"
                + ("Hint: a rank with no counted token must still run backward: DDP's all-reduce waits for every "
                   "rank, so a rank that skips backward hangs the others. Return a 0 that is connected to "
                   "token_losses, e.g. a masked sum (which is exactly 0 here)." if empty else
                   "Hint: the loss must stay a tensor connected to token_losses (no .item(), no .detach(), "
                   "no torch.tensor(...)), or backward cannot run.")
            )
        (grad,) = torch.autograd.grad(got, losses)
        world, total = case.args[3], int(case.args[2])
        expected = case.args[1].to(torch.float64) / total * world  # DDP divides by world: (1/W)·grad = mask / N
        compare(grad, expected, what=f"the gradient of `{name}` with respect to token_losses", label=case.label,
                context={"num_tokens": total})


def check_rank_token_loss(rank_loss: Callable) -> None:
    """Check ``rank_loss(token_losses, mask, global_tokens, world_size)``: what one DDP rank backpropagates.

    >>> check_rank_token_loss(_rank_loss_reference)
    ✓ rank_loss matches the reference on 9 inputs
    ✓ rank_loss: DDP's average of the ranks' gradients is the global token-mean gradient (worlds of 2, 3, 4 ranks, one rank without tokens)
    """
    cases = _rank_cases(1)
    got = call_learner(rank_loss, _snapshot(cases[0].args), "rank_loss", cases[0].label)
    if isinstance(got, torch.Tensor) and got.dim() > 0:
        raise ExerciseError(
            f"`rank_loss` returned a tensor of shape {tuple(got.shape)} for {cases[0].label}: a loss is a single "
            "number (0-dim tensor) that this rank backpropagates."
        )
    for case in cases:
        if not case.args[1].any():
            value = call_learner(rank_loss, _snapshot(case.args), "rank_loss", case.label)
            if isinstance(value, torch.Tensor) and not torch.isfinite(value).all():
                raise ExerciseError(
                    f"`rank_loss` returned {float(value)} for {case.label}.\nHint: this rank has no counted token: "
                    "its own token mean is 0/0 = NaN, and NaN × 0 is still NaN. DDP would spread that NaN to every "
                    "rank in the all-reduce. A masked SUM of no tokens is an exact 0."
                )
    check_function(rank_loss, _rank_loss_reference, cases, name="rank_loss", mistakes=RANK_MISTAKES)
    _check_rank_gradients(rank_loss, cases, "rank_loss")
    passed("rank_loss: DDP's average of the ranks' gradients is the global token-mean gradient "
           "(worlds of 2, 3, 4 ranks, one rank without tokens)")


# --------------------------------------------------------------------------- exercise 3: AMP with accumulation

MAX_NORM = 0.5
INIT_SCALE = 2.0**12


def _amp_reference(model, optimizer, scaler, micro_batches, max_norm):
    accum_steps = len(micro_batches)
    for x, y in micro_batches:
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.mse_loss(model(x), y)
        scaler.scale(loss / accum_steps).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)


def _amp_variant(kind: str):
    """The typical wrong orders whose result is a wrong update; each one's hint is in AMP_MISTAKES."""

    def step(model, optimizer, scaler, micro_batches, max_norm):
        k = 1 if kind == "no_divide" else len(micro_batches)
        for x, y in micro_batches:
            with torch.autocast("cpu", dtype=torch.float16):
                loss = F.mse_loss(model(x), y) / k
            scaled = scaler.scale(loss)
            (loss if kind == "no_scale" else scaled).backward()
        if kind == "clip_first":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.unscale_(optimizer)
        else:
            scaler.unscale_(optimizer)
            if kind != "no_clip":
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    return step


AMP_MISTAKES = {
    "clipping ran on the SCALED gradients (their norm is S× too large, so clipping shrank them about S× too much): "
    "unscale the gradients first, then clip.": _amp_variant("clip_first"),
    "the loss was not divided by the number of micro-batches: the window's gradient is K× its mean gradient "
    "(clipping hides that only while the norm is above max_norm).": _amp_variant("no_divide"),
    "the gradients were not clipped: clip the total norm to max_norm, in true (unscaled) units, before the step.":
        _amp_variant("no_clip"),
    "backward ran on the unscaled loss, but unscale_ still divided the gradients by S: backpropagate the scaled loss, "
    "scaler.scale(loss).backward().": _amp_variant("no_scale"),
}

# seed → (scale of the inputs, so the true gradient norm is above or below MAX_NORM, overflow?)
AMP_SETUPS = ((0, 3.0, False), (1, 0.05, False), (0, 3.0, True))


def _amp_setup(seed: int, input_scale: float, overflow: bool):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=INIT_SCALE, growth_interval=1)  # grows after every good step
    gen = seeded(300 + seed)
    micro = [(torch.randn(4, 6, generator=gen) * input_scale, torch.randn(4, 3, generator=gen) * input_scale)
             for _ in range(3)]
    if overflow:
        micro[1][0][0, 0] = float("inf")  # one bad sample: the gradients of this window overflow
    return model, optimizer, scaler, micro


def _true_grad_norm(seed: int, input_scale: float) -> float:
    """The float32 norm of the window's mean gradient: is the clip threshold above or below it?"""
    model, _, _, micro = _amp_setup(seed, input_scale, False)
    loss = sum(F.mse_loss(model(x), y) for x, y in micro) / len(micro)
    return float(torch.linalg.vector_norm(torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(model.parameters()))])))


def _record_calls(scaler, log: list) -> None:
    """Log the scaler's calls in order (instance attributes shadow the methods for this one object)."""
    for method in ("scale", "unscale_", "step", "update"):
        original = getattr(scaler, method)

        def recorded(*args, _original=original, _method=method, **kwargs):
            log.append(_method)
            return _original(*args, **kwargs)

        setattr(scaler, method, recorded)


def _run_amp(fn, seed, input_scale, overflow, call=None):
    model, optimizer, scaler, micro = _amp_setup(seed, input_scale, overflow)
    calls = []
    original = optimizer.step

    def counting_step(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    optimizer.step = counting_step
    scaler.calls = []
    _record_calls(scaler, scaler.calls)
    start = _flat_params(model)
    trace = _Trace(model, dtype_of=model[0])
    try:
        args = (model, optimizer, scaler, micro, MAX_NORM)
        call(fn, args) if call else fn(*args)
    finally:
        trace.remove()
    return _flat_params(model) - start, scaler, model, len(calls), trace, micro


def _call_amp(fn, args, label):
    try:
        return call_learner(fn, args, "amp_accumulation_step", label)
    except ExerciseError as error:
        text = str(error)
        if "unscale_() has already been called" in text:
            text += ("\nHint: unscale once per optimizer step, at the boundary: after the LAST micro-batch's backward, "
                     "right before clipping.")
        elif "_scale is None" in text:
            text += "\nHint: backpropagate the scaled loss: scaler.scale(loss).backward()."
        elif "No inf checks were recorded" in text:
            text += ("\nHint: scaler.update() needs scaler.step(optimizer) in the same step, and scaler.step needs "
                     "gradients that came from scaler.scale(loss).backward().")
        raise ExerciseError(text) from None


def _check_scaler_order(calls: list[str], label: str) -> None:
    """At most one scaler.step, and one scaler.update after it, per window."""
    name = "amp_accumulation_step"
    if calls.count("step") > 1:
        raise ExerciseError(
            f"`{name}` called scaler.step(optimizer) {calls.count('step')} times for {label}; expected once.\n"
            "Hint: one optimizer step per window, after the last micro-batch's backward."
        )
    before_step = "step" in calls and "update" in calls and calls.index("update") < calls.index("step")
    if calls.count("update") != 1 or before_step:
        raise ExerciseError(
            f"`{name}` called scaler.update() {calls.count('update')} time(s)" + (", before scaler.step" if before_step else "")
            + f" for {label}.\nHint: call scaler.update() once per optimizer step, right after scaler.step(optimizer): "
            "update() resets the scaler for the next step (a scaler.step after it unscales the gradients again)."
        )


def _check_amp_trace(trace: _Trace, label: str) -> None:
    name = "amp_accumulation_step"
    dtypes = set(trace.forward_dtypes)
    if dtypes == {torch.bfloat16}:
        raise ExerciseError(
            f"`{name}` ran the forward pass in bfloat16 for {label}.\nHint: the exercise names float16: "
            "`torch.autocast('cpu', dtype=torch.float16)`. bf16 has float32's range and needs no loss scaling; "
            "fp16 is the format whose small gradients underflow, the one GradScaler exists for."
        )
    if dtypes != {torch.float16}:
        raise ExerciseError(
            f"`{name}` ran the forward pass in {', '.join(sorted(str(d) for d in dtypes)) or 'no'} dtype for {label}, "
            "not under fp16 autocast.\nHint: run each micro-batch's forward pass and loss inside "
            "`with torch.autocast('cpu', dtype=torch.float16):`."
        )
    if trace.backward_under_autocast:
        raise ExerciseError(
            f"`{name}` called backward inside the autocast region for {label}.\nHint: autocast is for the forward "
            "pass and the loss; end the `with torch.autocast(...)` block before scaler.scale(loss).backward(). "
            "(Backward runs each op in the dtype its forward used anyway; PyTorch's AMP notes advise against "
            "backward under autocast.)"
        )


def check_amp_accumulation_step(amp_accumulation_step: Callable) -> None:
    """Check ``amp_accumulation_step(model, optimizer, scaler, micro_batches, max_norm)``: one fp16 AMP step over a window.

    >>> check_amp_accumulation_step(_amp_reference)
    ✓ amp_accumulation_step: fp16 forward, backward ×K outside autocast, unscale before clip, skipped overflow step, scale updated (clip active and inactive)
    """
    name = "amp_accumulation_step"
    for seed, input_scale, overflow in AMP_SETUPS:
        norm = _true_grad_norm(seed, input_scale)
        clip = f"gradient norm {norm:.3g} > max_norm {MAX_NORM}" if norm > MAX_NORM else \
            f"gradient norm {norm:.3g} < max_norm {MAX_NORM}"
        label = (f"3 micro-batches of 4 samples, GradScaler('cpu', init_scale={INIT_SCALE:g}), "
                 + ("one micro-batch with an inf input (overflow)" if overflow else clip))
        got, scaler, model, steps, trace, _ = _run_amp(
            amp_accumulation_step, seed, input_scale, overflow, lambda fn, args: _call_amp(fn, args, label))
        _check_amp_trace(trace, label)
        _one_backward_per_micro_batch(trace, name, label, 3, 3)
        _check_scaler_order(scaler.calls, label)
        if overflow:
            if not torch.isfinite(got).all() or got.abs().max() > 0:
                raise ExerciseError(
                    f"the parameters changed although the gradients overflowed, for {label}.\nHint: step through "
                    "scaler.step(optimizer): it skips the update when unscale_ found inf/NaN (optimizer.step() does not)."
                )
            if scaler.get_scale() != INIT_SCALE / 2:
                raise ExerciseError(
                    f"after an overflow the scale should halve ({INIT_SCALE:g} → {INIT_SCALE / 2:g}), got "
                    f"{scaler.get_scale():g}, for {label}.\nHint: call scaler.update() once per optimizer step, after "
                    "scaler.step(optimizer)."
                )
        else:
            if steps != 1:
                raise ExerciseError(
                    f"optimizer.step() ran {steps} times for {label}; expected once.\nHint: one optimizer step per "
                    "window, through scaler.step(optimizer), after the last micro-batch."
                )
            expected, ref_scaler, _, _, _, _ = _run_amp(_amp_reference, seed, input_scale, False)
            wrong = {hint: _run_amp(fn, seed, input_scale, False)[0] for hint, fn in AMP_MISTAKES.items()}
            compare(got, expected, what="the parameter update", label=label, context={"accum_steps": 3}, mistakes=wrong)
            if scaler.get_scale() != ref_scaler.get_scale():
                raise ExerciseError(
                    f"the scale is {scaler.get_scale():g} after a good step, expected {ref_scaler.get_scale():g} "
                    f"(this scaler grows after every good step), for {label}.\nHint: call scaler.update() once per "
                    "optimizer step, after scaler.step(optimizer)."
                )
        if not _grads_cleared(model):
            raise ExerciseError(
                f"after the step the gradients are still in .grad, for {label}.\n"
                "Hint: end with optimizer.zero_grad(set_to_none=True), also when the step was skipped."
            )
    passed("amp_accumulation_step: fp16 forward, backward ×K outside autocast, unscale before clip, skipped overflow "
           "step, scale updated (clip active and inactive)")
