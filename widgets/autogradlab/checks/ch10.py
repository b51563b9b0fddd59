"""Checkers for chapter 10 (debugging lab): overfit one batch, chart a batch's dependencies with
backprop, and two mystery scripts whose fixes must make the loss fall with the doctor silent.

The data of the chapter lives here too, so the notebook and its checkers use the same.

>>> x, y = clusters(6, seed=0)
>>> tuple(x.shape), tuple(y.shape), y.dtype
((6, 2), (6,), torch.int64)
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from autogradlab.checks.ch09 import _call_without_helpers
from autogradlab.checks.core import ExerciseError, call_learner, compare, passed
from autogradlab.models.doctor import Report, diagnose

# --------------------------------------------------------------------------- data


CLASS_SHARES = (0.6, 0.3, 0.1)


def clusters(n: int, seed: int = 0, shares: tuple[float, ...] = CLASS_SHARES) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` 2-D points (n, 2) in three overlapping-free clusters, and their class (n,); the classes are
    drawn with probabilities ``shares`` (unbalanced, so the labels' entropy is not ln 3)."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.tensor([[2.0, 0.0], [-1.0, 1.7], [-1.0, -1.7]])
    y = torch.multinomial(torch.tensor(shares), n, replacement=True, generator=gen)
    return centres[y] + 0.6 * torch.randn(n, 2, generator=gen), y


def readings(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` rows of 8 sensor features (n, 8) and one target value each (n,), standardised (variance ≈ 1)."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(8, generator=torch.Generator().manual_seed(4321))
    x = torch.randn(n, 8, generator=gen)
    y = torch.tanh(x @ w / 2) * 2 + 0.3 * x[:, 0] * x[:, 1] + 0.1 * torch.randn(n, generator=gen)
    return x, (y - y.mean()) / y.std()


def batches_of(x: torch.Tensor, y: torch.Tensor, size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Consecutive ``(x, y)`` batches of ``size`` rows."""
    return [(x[i : i + size], y[i : i + size]) for i in range(0, len(x), size)]


def entropy(labels: torch.Tensor) -> float:
    """The labels' entropy H(p̂) in nats: the cross-entropy of the best input-independent prediction.

    >>> round(entropy(torch.tensor([0, 1, 0, 1])), 4)  # ln 2
    0.6931
    """
    p = torch.bincount(labels).double() / len(labels)
    p = p[p > 0]
    return float(-(p * p.log()).sum())


def train(mystery: Callable, epochs: int = 6, seed: int = 0, verbose: bool = True) -> tuple[list[float], Any]:
    """Run a mystery script: ``mystery(seed)`` returns ``(step, model, optimizer, batches)``; every epoch runs
    ``step`` over all batches. Returns the mean loss per epoch and the trained model.

    >>> def script(seed=0):
    ...     model = nn.Linear(2, 3)
    ...     opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ...     def step(batch):
    ...         opt.zero_grad()
    ...         loss = F.cross_entropy(model(batch[0]), batch[1])
    ...         loss.backward()
    ...         opt.step()
    ...         return loss.item()
    ...     return step, model, opt, batches_of(*clusters(64, seed), 16)
    >>> losses, _ = train(script, epochs=2, verbose=False)
    >>> len(losses)
    2
    """
    step, model, _, batches = mystery(seed)
    losses = []
    for epoch in range(epochs):
        values = [float(step(batch)) for batch in batches]
        losses.append(sum(values) / len(values))
        if verbose:
            print(f"epoch {epoch}: mean loss {losses[-1]:.4f}")
    return losses, model


# --------------------------------------------------------------------------- exercise 1: overfit one batch


class _Tiny(nn.Module):
    """A small classifier with batch norm, so its two modes compute different things."""

    def __init__(self, hidden: int = 32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, 3))

    def forward(self, x):
        return self.net(x)


def reference_overfit(model: nn.Module, loss_fn: Callable, batch, steps: int = 100, lr: float = 1e-2) -> list[float]:
    """Train a deep copy of ``model`` on one batch with Adam; the loss of every step, before its update."""
    copied = copy.deepcopy(model)
    copied.train()
    optimizer = torch.optim.Adam(copied.parameters(), lr=lr)
    x, y = batch
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = loss_fn(copied(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _overfit_variant(kind: str) -> Callable:
    def run(model, loss_fn, batch, steps=100, lr=1e-2):
        copied = model if kind == "in place" else copy.deepcopy(model)
        if kind != "eval mode":
            copied.train()
        params = (model if kind == "optimizer on the original" else copied).parameters()
        optimizer = torch.optim.SGD(params, lr=lr) if kind == "sgd" else torch.optim.Adam(params, lr=lr)
        x, y = batch
        losses = []
        for _ in range(steps):
            if kind == "new optimizer every step":
                optimizer = torch.optim.Adam(copied.parameters(), lr=lr)
            if kind != "no zero_grad":
                optimizer.zero_grad()
            loss = loss_fn(copied(x), y)
            loss.backward()
            optimizer.step()
            if kind == "loss after the update":
                with torch.no_grad():
                    loss = loss_fn(copied(x), y)
            losses.append(loss.item())
        return losses

    return run


OVERFIT_MISTAKES = {
    "the copy's batch norm ran in eval mode: put the copy in training mode (copy.train()) whatever mode the "
    "caller's model is in.": "eval mode",
    "the optimizer was built on the original model's parameters, so it never moves the copy: build it from "
    "the copy's parameters.": "optimizer on the original",
    "gradients accumulate across steps: clear them every step (optimizer.zero_grad()).": "no zero_grad",
    "a new Adam every step forgets its moments (and restarts its bias correction): build the optimizer once.": "new optimizer every step",
    "each loss should be the one of the step's own forward, before its update; you recorded it after the "
    "update.": "loss after the update",
    "the losses match plain SGD: the contract asks for torch.optim.Adam(lr=lr).": "sgd",
}


def _snapshot(model: nn.Module) -> dict:
    return {
        "params": {k: v.detach().clone() for k, v in model.named_parameters()},
        "grads": {k: None if v.grad is None else v.grad.clone() for k, v in model.named_parameters()},
        "buffers": {k: v.clone() for k, v in model.named_buffers()},
        "modes": [m.training for m in model.modules()],
    }


def _unchanged(before: dict, model: nn.Module) -> str | None:
    after = _snapshot(model)
    if any(not torch.equal(before["params"][k], after["params"][k]) for k in before["params"]):
        return (
            "changed the caller's parameters: train a copy (copy.deepcopy(model)), and build the optimizer from "
            "the copy's parameters (copy.copy shares them)."
        )
    for k, g in before["grads"].items():
        h = after["grads"][k]
        if (g is None) != (h is None) or (g is not None and not torch.equal(g, h)):
            return (
                "changed the caller's .grad: the gradients belong to the copy (an optimizer built from "
                "model.parameters() instead of the copy's clears and steps the caller's)."
            )
    if any(not torch.equal(before["buffers"][k], after["buffers"][k]) for k in before["buffers"]):
        return "changed the caller's batch-norm statistics: run the forward passes on the copy only."
    if before["modes"] != after["modes"]:
        return "changed the caller's mode (train/eval): set the mode on the copy only."
    return None


def check_overfit_one_batch(overfit_one_batch) -> None:
    """Check ``overfit_one_batch(model, loss_fn, batch, steps, lr)`` against the exercise's contract.

    >>> check_overfit_one_batch(reference_overfit)  # doctest: +ELLIPSIS
    ✓ overfit_one_batch: ...
    """
    name = "overfit_one_batch"
    cases = [(0, 8, "eval"), (1, 5, "train")]
    for seed, n, mode in cases:
        torch.manual_seed(seed)
        model = _Tiny()
        model.train(mode == "train")
        x, y = clusters(n, seed=seed + 10)
        model(x).sum().backward()  # the caller's model holds gradients of its own
        batch = (x.clone(), y.clone())
        label = f"a batch of {n} points, the model in {mode} mode (seed {seed})"
        before = _snapshot(model)
        expected = reference_overfit(model, F.cross_entropy, batch, 60, 2e-2)
        got = _call_without_helpers(
            overfit_one_batch,
            (model, F.cross_entropy, batch, 60, 2e-2),
            name,
            label,
            "write the loop yourself (reference_overfit is the checker's answer).",
        )
        problem = _unchanged(before, model)
        if problem:
            raise ExerciseError(f"`{name}` {problem} (for {label})")
        if not (torch.equal(batch[0], x) and torch.equal(batch[1], y)):
            raise ExerciseError(f"`{name}` changed the batch in place for {label}.")
        if not isinstance(got, (list, tuple)) or len(got) != 60:
            raise ExerciseError(
                f"`{name}` should return a list with one loss per step (60 here) for {label}; got "
                f"{type(got).__name__}{f' of length {len(got)}' if hasattr(got, '__len__') else ''}."
            )
        if not all(isinstance(v, float) for v in got):
            kinds = sorted({type(v).__name__ for v in got})
            raise ExerciseError(
                f"`{name}` should return Python floats (loss.item()), got {kinds} for {label}: a "
                "list of loss tensors keeps every step's graph alive."
            )
        got_t, expected_t = torch.tensor(got, dtype=torch.float64), torch.tensor(expected, dtype=torch.float64)
        if torch.allclose(got_t, expected_t, rtol=1e-4, atol=1e-6):
            continue
        for hint, kind in OVERFIT_MISTAKES.items():
            wrong = _overfit_variant(kind)(copy.deepcopy(model), F.cross_entropy, batch, 60, 2e-2)
            if torch.allclose(got_t, torch.tensor(wrong, dtype=torch.float64), rtol=1e-4, atol=1e-6):
                raise ExerciseError(f"the losses of `{name}` differ from the reference for {label}.\nHint: {hint}")
        compare(got_t, expected_t, what=f"the losses of `{name}`", label=label)
    final = expected[-1]
    passed(
        f"{name}: the reference losses on {len(cases)} batches (caller's model in eval and in train mode, "
        f"left untouched); the healthy model reaches loss {final:.2g} on one batch"
    )


# --------------------------------------------------------------------------- exercise 2: batch dependencies


class PerExample(nn.Module):
    """An MLP: every example's output depends on that example's input only."""

    def __init__(self, d_in: int = 4, d_out: int = 3, softmax: bool = False):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, 8), nn.Tanh(), nn.Linear(8, d_out))
        self.softmax = softmax

    def forward(self, x):
        out = self.net(x)
        return out.softmax(dim=-1) if self.softmax else out


class TimeMean(nn.Module):
    """Sequences (B, T, D) → (B, D): a per-step linear layer, then the mean over time.

    ``bug=True`` takes the mean with ``view(T, B, D)``, as if the batch were time-major: a reshape that
    mixes examples (the intended op is ``mean(dim=1)``)."""

    def __init__(self, d: int = 3, bug: bool = False):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.bug = bug

    def forward(self, x):
        h = torch.tanh(self.lin(x))
        batch, steps, d = h.shape
        return h.view(steps, batch, d).mean(dim=0) if self.bug else h.mean(dim=1)


class Normed(nn.Module):
    """Linear → BatchNorm → linear, one output per example (shape (B,)): batch norm in training mode
    normalises with the batch's statistics, so every output depends on every example."""

    def __init__(self, d_in: int = 4):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, 6), nn.BatchNorm1d(6), nn.Tanh(), nn.Linear(6, 1))

    def forward(self, x):
        return self.net(x).squeeze(1)


class PerStep(nn.Module):
    """Sequences (B, T, D) → per-step class scores (B, T, C), no mixing across examples."""

    def __init__(self, d: int = 3, classes: int = 2):
        super().__init__()
        self.lin = nn.Linear(d, classes)

    def forward(self, x):
        return self.lin(x).log_softmax(dim=-1)


def reference_dependencies(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """D[i, j] = ‖∂ model(x)[i] / ∂ x[j]‖ (Frobenius), from the full Jacobian; buffers may change (batch norm)."""
    jac = torch.autograd.functional.jacobian(model, x)  # out.shape + x.shape
    batch = x.shape[0]
    out_per, in_per = jac.numel() // (batch * x.numel()), x.numel() // batch
    return jac.reshape(batch, out_per, batch, in_per).permute(0, 2, 1, 3).reshape(batch, batch, -1).norm(dim=-1)


def _dependency_cases() -> list[tuple[str, Callable[[], tuple[nn.Module, torch.Tensor]]]]:
    def make(build, shape, mode="train"):
        def f():
            torch.manual_seed(0)
            model = build()
            model.train(mode == "train")
            return model, torch.randn(*shape, generator=torch.Generator().manual_seed(1))

        return f

    return [
        ("a per-example MLP, outputs (5, 3)", make(PerExample, (5, 4))),
        ("an MLP ending in softmax (each row sums to 1)", make(lambda: PerExample(softmax=True), (5, 4))),
        ("a mean over time taken through view(T, B, D) (mixes examples)", make(lambda: TimeMean(bug=True), (5, 3, 3))),
        ("the same model with mean(dim=1)", make(TimeMean, (5, 3, 3))),
        ("batch norm in training mode, outputs (6,)", make(Normed, (6, 4))),
        ("batch norm in eval mode", make(Normed, (6, 4), "eval")),
        ("per-step scores, outputs (4, 3, 2)", make(PerStep, (4, 3, 3))),
    ]


DEPENDENCY_MISTAKES = {
    "sum": "a sum of outputs can cancel (a softmax row sums to 1, so its gradient is 0): take the gradient of "
    "every output element (or the Jacobian) and the norm over them.",
    "transposed": "D[i, j] is the dependency of example i's *output* on example j's *input*: rows are outputs.",
    "abs sum": "use the Frobenius norm (square root of the sum of squares) of the Jacobian block, not a sum of "
    "absolute values.",
    "eval": "keep the model's mode: in training mode batch norm mixes examples, and that is what D must show.",
}


def _dependency_variant(kind: str, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    if kind == "eval":
        model = copy.deepcopy(model).eval()
    d = reference_dependencies(model, x)
    if kind == "transposed":
        return d.t()
    if kind in ("sum", "abs sum"):
        batch = x.shape[0]
        rows = []
        for i in range(batch):
            xi = x.detach().clone().requires_grad_()
            out = model(xi)
            if kind == "sum":
                (g,) = torch.autograd.grad(out[i].sum(), xi)
                rows.append(g.reshape(batch, -1).norm(dim=1))
            else:
                jac = torch.autograd.functional.jacobian(lambda inp: model(inp)[i], x)
                rows.append(jac.reshape(-1, batch, x.numel() // batch).abs().sum(dim=(0, 2)))
        return torch.stack(rows)
    return d


def _model_state(model: nn.Module) -> tuple:
    return (
        [None if p.grad is None else p.grad.clone() for p in model.parameters()],
        [m.training for m in model.modules()],
    )


def check_batch_dependencies(batch_dependencies) -> None:
    """Check ``batch_dependencies(model, x)`` → (B, B) matrix of ‖∂ out[i] / ∂ x[j]‖.

    >>> check_batch_dependencies(reference_dependencies)  # doctest: +ELLIPSIS
    ✓ batch_dependencies: ...
    """
    name = "batch_dependencies"
    cases = _dependency_cases()
    mixing = 0
    for label, build in cases:
        model, x = build()
        expected = reference_dependencies(copy.deepcopy(model), x)
        grads_before, modes_before = _model_state(model)
        x_given = x.clone()
        got = _call_without_helpers(
            batch_dependencies,
            (model, x_given),
            name,
            label,
            "compute the gradients yourself (reference_dependencies is the checker's answer).",
        )
        grads_after, modes_after = _model_state(model)
        if modes_after != modes_before:
            raise ExerciseError(f"`{name}` changed the model's mode for {label}.\nHint: {DEPENDENCY_MISTAKES['eval']}")
        if any(
            (a is None) != (b is None) or (a is not None and not torch.equal(a, b))
            for a, b in zip(grads_before, grads_after)
        ):
            raise ExerciseError(
                f"`{name}` left gradients in the model's parameters (.grad) for {label}.\nHint: ask for the "
                "gradient with respect to the input only, torch.autograd.grad(output, x_copy), which does not touch "
                "the parameters' .grad."
            )
        if x_given.requires_grad or x_given.grad is not None or not torch.equal(x_given, x):
            raise ExerciseError(
                f"`{name}` changed the x it was given (its values, requires_grad or .grad) for "
                f"{label}.\nHint: work on a copy, x.detach().clone().requires_grad_()."
            )
        if isinstance(got, torch.Tensor):
            got = got.detach()
        wrong = {hint: _dependency_variant(kind, copy.deepcopy(model), x) for kind, hint in DEPENDENCY_MISTAKES.items()}
        batch = x.shape[0]
        wrong[
            "only the diagonal: a per-example computation (vmap, or a loop that runs the model on one example at "
            "a time) cannot see what mixes examples; run the model on the whole batch."
        ] = torch.diag(expected.diag())
        compare(
            got,
            expected.to(got.dtype) if isinstance(got, torch.Tensor) else expected,
            what=f"`{name}`",
            label=label,
            mistakes=wrong,
            check_dtype=False,
            context={},
        )
        if expected.shape != (batch, batch):
            raise AssertionError("reference shape")
        mixing += int(bool((expected - torch.diag(expected.diag())).abs().max() > 1e-6))
    passed(
        f"{name}: exact dependency norms on {len(cases)} models ({mixing} mix examples, "
        f"{len(cases) - mixing} do not); model, parameters' .grad and x left as they were"
    )


# --------------------------------------------------------------------------- mysteries


def doctor_after_hypothesis(hypothesis: Any, mystery: Callable) -> Report:
    """Diagnose a mystery script, but only once the learner has written a first hypothesis.

    >>> doctor_after_hypothesis("", None)
    Traceback (most recent call last):
    ...
    autogradlab.checks.core.ExerciseError: Write your first hypothesis before asking the doctor: ...
    """
    if not isinstance(hypothesis, str) or len(hypothesis.split()) < 3:
        raise ExerciseError(
            "Write your first hypothesis before asking the doctor: one line (a few words at least) in the "
            "hypothesis variable, saying what you think is wrong and what you checked, then run this cell again."
        )
    step, model, optimizer, batches = call_learner(mystery, (0,), getattr(mystery, "__name__", "mystery"), "seed 0")
    print(f"Your hypothesis: {hypothesis.strip()}\n")
    return diagnose(step, model, optimizer, batches[:3])


def _setup(fixed: Callable, name: str, seed: int) -> tuple:
    setup = call_learner(fixed, (seed,), name, f"seed {seed}")
    if not (isinstance(setup, tuple) and len(setup) == 4):
        raise ExerciseError(
            f"`{name}(seed)` should return (step, model, optimizer, batches) like the mystery "
            f"script, got {type(setup).__name__}"
            f"{f' of length {len(setup)}' if isinstance(setup, tuple) else ''}."
        )
    return setup


def _run_fixed(fixed: Callable, name: str, seed: int, epochs: int):
    step, model, optimizer, batches = _setup(fixed, name, seed)
    losses = []
    for _ in range(epochs):
        values = [float(call_learner(step, (b,), f"{name}'s step", f"seed {seed}")) for b in batches]
        losses.append(sum(values) / len(values))
    return losses, model


def _doctor_silent(fixed: Callable, name: str) -> None:
    step, model, optimizer, batches = _setup(fixed, name, 2)
    report = diagnose(step, model, optimizer, batches[:3])
    bad = report.errors + report.warnings
    if bad:
        raise ExerciseError(f"the doctor reports {bad[0].code} for `{name}`: {bad[0].message}\nHint: {bad[0].fix}")


MYSTERY_EPOCHS = 6


def check_mystery_1(fixed_mystery_1) -> None:
    """Check a repaired mystery 1: the doctor silent, the loss falling well below the labels' entropy over a
    fixed seeded run, and the trained model right on clean data it never saw.

    >>> def fixed(seed=0):
    ...     x, y = clusters(1024, seed=seed)
    ...     order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    ...     x, y = x[order], y[order]
    ...     torch.manual_seed(seed)
    ...     model = nn.Sequential(nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 3))
    ...     opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ...     def step(batch):
    ...         opt.zero_grad()
    ...         loss = F.cross_entropy(model(batch[0]), batch[1])
    ...         loss.backward()
    ...         opt.step()
    ...         return loss.item()
    ...     return step, model, opt, batches_of(x, y, 64)
    >>> check_mystery_1(fixed)  # doctest: +ELLIPSIS
    ✓ fixed_mystery_1: ...
    """
    name = "fixed_mystery_1"
    if not callable(fixed_mystery_1):
        raise ExerciseError(f"`{name}` should be a function of the seed, like mystery_1.")
    _doctor_silent(fixed_mystery_1, name)
    for seed in (0, 1):
        h = entropy(clusters(1024, seed=seed)[1])
        losses, model = _run_fixed(fixed_mystery_1, name, seed, MYSTERY_EPOCHS)
        if not losses[-1] < 0.5 * h:
            raise ExerciseError(
                f"with `{name}` (seed {seed}) the loss ends at {losses[-1]:.4f}; the labels' entropy is {h:.4f}, and "
                "a model that learns from its inputs ends far below it (under half).\nHint: a loss stuck at the "
                "labels' entropy means the predictions do not depend on the inputs: do inputs and labels still belong "
                "together when they reach the model?"
            )
        x_new, y_new = clusters(500, seed=100 + seed)
        with torch.no_grad():
            model.eval()
            accuracy = float((model(x_new).argmax(dim=1) == y_new).float().mean())
        if accuracy < 0.95:
            raise ExerciseError(
                f"the model trained by `{name}` (seed {seed}) classifies only {accuracy:.0%} of new, "
                "correctly labelled points right: it learned something other than the task."
            )
    passed(
        f"{name}: doctor silent; loss {losses[0]:.3f} → {losses[-1]:.3f} (labels' entropy {h:.3f}); "
        f"{accuracy:.0%} right on new points (2 seeds)"
    )


def check_mystery_2(fixed_mystery_2) -> None:
    """Check a repaired mystery 2: the doctor silent, the loss (mean squared error) falling far below the
    targets' variance over a fixed seeded run, and the trained model right on new data.

    >>> def fixed(seed=0):
    ...     x, y = readings(1024, seed=seed)
    ...     torch.manual_seed(seed)
    ...     model = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 1))
    ...     opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    ...     def step(batch):
    ...         opt.zero_grad()
    ...         loss = ((model(batch[0]).squeeze(1) - batch[1]) ** 2).mean()
    ...         loss.backward()
    ...         opt.step()
    ...         return loss.item()
    ...     return step, model, opt, batches_of(x, y, 64)
    >>> check_mystery_2(fixed)  # doctest: +ELLIPSIS
    ✓ fixed_mystery_2: ...
    """
    name = "fixed_mystery_2"
    if not callable(fixed_mystery_2):
        raise ExerciseError(f"`{name}` should be a function of the seed, like mystery_2.")
    _doctor_silent(fixed_mystery_2, name)
    for seed in (0, 1):
        variance = float(readings(1024, seed=seed)[1].var())
        losses, model = _run_fixed(fixed_mystery_2, name, seed, MYSTERY_EPOCHS)
        if not losses[-1] < 0.3 * variance:
            raise ExerciseError(
                f"with `{name}` (seed {seed}) the loss ends at {losses[-1]:.4f}; the targets' variance is "
                f"{variance:.4f}: predicting the mean for every input already gets that.\nHint: compare the shapes "
                "of the prediction, the target and their difference."
            )
        x_new, y_new = readings(500, seed=100 + seed)
        with torch.no_grad():
            pred = model(x_new)
        if pred.shape != (500, 1) and pred.shape != (500,):
            raise ExerciseError(f"the model of `{name}` should give one value per row, got shape {tuple(pred.shape)}.")
        error = float(((pred.reshape(-1) - y_new) ** 2).mean())
        if error > 0.3 * variance:
            raise ExerciseError(
                f"the model trained by `{name}` (seed {seed}) has a mean squared error of {error:.3f} "
                f"on new rows (variance {variance:.3f}): the training loss was not the squared error "
                "of each prediction against its own target."
            )
    passed(
        f"{name}: doctor silent; loss {losses[0]:.3f} → {losses[-1]:.3f} (target variance {variance:.3f}); "
        f"mean squared error {error:.3f} on new rows (2 seeds)"
    )


__all__ = [
    "CLASS_SHARES",
    "clusters",
    "readings",
    "batches_of",
    "entropy",
    "train",
    "PerExample",
    "TimeMean",
    "Normed",
    "PerStep",
    "check_overfit_one_batch",
    "check_batch_dependencies",
    "doctor_after_hypothesis",
    "check_mystery_1",
    "check_mystery_2",
]
