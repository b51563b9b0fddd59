"""Checkers for chapter 05 (custom autograd Functions): the learner passes a ``torch.autograd.Function`` class.

:func:`check_autograd_function` runs the class's forward against a reference (recording what it saves),
calls its ``backward`` directly, so a gradient of the wrong shape is seen before autograd would silently sum
it to the input's shape, compares each gradient with autograd's gradient of the reference (naming a typical
wrong backward when the answer matches one), and runs ``torch.autograd.gradcheck`` itself. Both styles of
Function pass: ``forward(ctx, ...)`` and ``forward(...)`` with ``setup_context``. The exercises' right and
wrong answers live in tests/test_checks_ch05.py, not in these docstrings (``help()`` would show them to learners).
A call: ``check_autograd_function(cls, name="Square", reference=lambda x: x * x, cases=[Case((x,), "label")])``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from autogradlab.checks.core import (
    Case,
    ExerciseError,
    LearnerCall,
    Mistake,
    OffLimits,
    compare,
    mistakes,
    named,
    passed,
    routines,
    seeded,
)
from autogradlab.graph.traverse import node_name, walk
from autogradlab.i18n import N_, _

# What a Function's contract rules out: mistake id -> summary (filled per case) and hint.
BROKEN = {
    "not-a-function-class": N_("`{name}` should be a class deriving from torch.autograd.Function, but it is {shown}."),
    "ctx-attribute": N_("The forward of `{name}` stored tensors as ctx attributes ({shown}) for {label}."),
    "saves-too-much": N_("The forward of `{name}` saved {shown} for {label}; its backward needs fewer."),
    "arity": N_("The backward of `{name}` returned {shown} for {label}."),
    "ignores-needs-input-grad": N_("The backward of `{name}` computed a gradient for `{shown}`, an input that does not require grad ({label})."),
    "none-gradient": N_("The backward of `{name}` returned None for `{shown}`, an input that requires grad ({label})."),
}  # fmt: skip
BROKEN_HINTS = {
    "not-a-function-class": N_("pass the class itself, `{name}`, not an instance or a plain function."),
    "ctx-attribute": N_("save tensors with ctx.save_for_backward(...) and read them with ctx.saved_tensors: only then does autograd check their version counter, avoid a reference cycle through the output, and let saved-tensor hooks (checkpointing, offloading) see them. Plain attributes are for non-tensors."),
    "saves-too-much": N_("save only what backward reads: every saved tensor stays in memory until backward runs."),
    "arity": N_("backward returns one gradient per forward input, in order, each with that input's shape."),
    "ignores-needs-input-grad": N_("check ctx.needs_input_grad[i] and return None for inputs nobody asked a gradient for: that skips a whole matrix product for frozen weights or data."),
    "none-gradient": N_("return its gradient: None is only for inputs that do not need one."),
}  # fmt: skip


def broken(mistake: str, name: str, label: str = "", shown: str = "") -> ExerciseError:
    """The ExerciseError for a broken contract of :data:`BROKEN`."""
    fields = {"name": name, "label": label, "shown": shown}
    kind = "type" if mistake in ("not-a-function-class", "arity") else "contract"
    summary, hint = _(BROKEN[mistake]).format(**fields), _(BROKEN_HINTS[mistake]).format(**fields)
    return ExerciseError(kind, summary, hint=hint, mistake=mistake)


def _apply_of(cls, name: str) -> Callable:
    """``cls.apply`` for a Function subclass (``cls.apply`` itself is accepted too)."""
    if isinstance(cls, type) and issubclass(cls, torch.autograd.Function):
        return cls.apply
    if isinstance(getattr(cls, "__self__", None), type) and issubclass(cls.__self__, torch.autograd.Function):
        return cls
    shown = _("the class {name}").format(name=cls.__name__) if isinstance(cls, type) else type(cls).__name__
    raise broken("not-a-function-class", name, shown=shown)


def _leaves(args: tuple, frozen: Sequence[int]) -> list:
    floating = lambda a: isinstance(a, torch.Tensor) and a.is_floating_point()
    return [a.detach().clone().requires_grad_(i not in frozen) if floating(a) else a for i, a in enumerate(args)]


def _reference_grads(fn: Callable, args: tuple, frozen: Sequence[int], v: torch.Tensor) -> tuple:
    leaves = _leaves(args, frozen)
    wanted = [t for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad]
    grads = iter(torch.autograd.grad(fn(*leaves), wanted, v))
    return tuple(next(grads) if isinstance(t, torch.Tensor) and t.requires_grad else None for t in leaves)


def _forward(learner: LearnerCall, leaves: list, label: str) -> tuple:
    """Run the learner's forward; return its output and (shape, dtype) of each tensor it saved."""
    saved: list[tuple] = []
    pack = lambda t: (saved.append((tuple(t.shape), t.dtype)), t)[1]
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = learner.on(label)(*leaves)
    attributes = [k for k, v in vars(getattr(out, "grad_fn", None) or object()).items() if isinstance(v, torch.Tensor)]
    if attributes:
        raise broken("ctx-attribute", learner.name, label, ", ".join(f"ctx.{k}" for k in attributes))
    return out, saved


def _backward(cls, out, v, leaves, frozen, names, name: str, label: str, hints: str | None) -> tuple:
    """Call the learner's backward directly: one gradient per input, None exactly where no gradient is wanted."""
    backward = lambda: cls.backward(out.grad_fn, v)
    grads = LearnerCall(backward, f"{name}.backward", error_hints=hints, frozen_inputs=False).on(label)()
    grads = grads if isinstance(grads, tuple) else (grads,)
    if len(grads) != len(leaves):
        shown = _("{n} values for {inputs} inputs ({names})").format(n=len(grads), inputs=len(leaves), names=", ".join(names))  # fmt: skip
        raise broken("arity", name, label, shown)
    for i, g in enumerate(grads):
        if i in frozen and g is not None:
            raise broken("ignores-needs-input-grad", name, label, names[i])
        if g is None and isinstance(leaves[i], torch.Tensor) and leaves[i].requires_grad:
            raise broken("none-gradient", name, label, names[i])
    return grads


def check_autograd_function(
    cls,
    *,
    name: str,
    reference: Callable,
    cases: Sequence[Case],
    input_names: Sequence[str] = ("x",),
    mistakes: Sequence[Mistake] = (),
    forward_mistakes: Sequence[Mistake] = (),
    nonfinite: Mistake | None = None,
    error_hints: str | None = None,
    max_saved: int | None = None,
    saved_check: Callable[[list, torch.Tensor], Mistake | None] | None = None,
    off_limits: OffLimits = OffLimits(),
    gradcheck: bool = True,
    then: Callable[[Callable, str], None] | None = None,
) -> None:
    """Check a learner's ``torch.autograd.Function`` subclass: forward, backward (called directly), gradcheck.

    ``reference`` is plain differentiable torch code computing the same forward; its autograd gradients are
    the expected backward. A :class:`Mistake`'s ``compute(*inputs, v)`` returns the gradients of a typical
    wrong backward (``forward_mistakes``: ``compute(*inputs)``, a wrong forward); ``nonfinite`` names the slip
    behind an inf or NaN that no listed mistake explains. A case's ``context["frozen"]`` lists inputs that do
    not require grad: the backward must return None for them (``ctx.needs_input_grad``). The forward keeps
    tensors in ``save_for_backward``, saves at most ``max_saved`` (``saved_check(saved, out)`` may name a
    further slip in what is saved), and uses nothing ``off_limits`` rules out. ``then(apply, name)`` runs the
    exercise's own extra checks before the ✓ line.
    """
    apply = _apply_of(cls, name)
    owner = cls if isinstance(cls, type) else cls.__self__
    forward = LearnerCall(apply, name, off_limits, error_hints, frozen_inputs=False)
    for case in cases:
        frozen, label = tuple(case.context.get("frozen", ())), case.label
        leaves = _leaves(case.args, frozen)
        out, saved = _forward(forward, leaves, label)
        expected = reference(*[a.detach() if isinstance(a, torch.Tensor) else a for a in case.args])
        if max_saved is not None and len(saved) > max_saved:
            shown = _("{n} tensors (shapes {shapes})").format(n=len(saved), shapes=[shape for shape, _dtype in saved])
            raise broken("saves-too-much", name, label, shown)
        slip = saved_check(saved, expected) if saved_check else None
        if slip is not None:
            summary = _("`{name}` saves more than backward needs ({label}).").format(name=name, label=label)
            raise ExerciseError("contract", summary, hint=slip.hint, mistake=slip.id)
        wrong_forward = {m: m.compute(*case.args) for m in forward_mistakes}
        what = _("The forward of `{name}`").format(name=name)
        compare(out, expected, what=what, label=label, mistakes=wrong_forward, nonfinite=nonfinite)
        v = torch.randn(expected.shape, generator=seeded(len(label)), dtype=expected.dtype)
        got = _backward(owner, out, v, leaves, frozen, input_names, name, label, error_hints)
        wrong = [m.compute(*case.args, v) for m in mistakes]
        context = {"batch_size": case.args[0].shape[0]} if case.args[0].dim() > 1 else {}
        for i, r in enumerate(_reference_grads(reference, case.args, frozen, v)):
            if r is not None:
                what = _("The gradient of `{input}` that `{name}`'s backward returns").format(input=input_names[i], name=name)  # fmt: skip
                known = {m: w[i] for m, w in zip(mistakes, wrong)}
                compare(got[i], r, what=what, label=label, context=context, mistakes=known, nonfinite=nonfinite)
        options = {"eps": 1e-6, "atol": 1e-5, "rtol": 1e-3, "raise_exception": False}
        if gradcheck and not torch.autograd.gradcheck(apply, tuple(_leaves(case.args, frozen)), **options):
            hint = _("run torch.autograd.gradcheck(Fn.apply, inputs) yourself on float64 inputs: it prints the Jacobian your backward gives next to the finite-difference one.")  # fmt: skip
            raise ExerciseError("value", _("gradcheck fails for `{name}` on {label}.").format(name=name, label=label), hint=hint, mistake="gradcheck")  # fmt: skip
    if then is not None:
        then(apply, name)
    what = _("forward, backward and gradcheck pass") if gradcheck else _("forward and backward match their definition")
    message = _("{name}: {what} on {n} inputs") if len(cases) != 1 else _("{name}: {what} on 1 input")
    passed(message.format(name=name, what=what, n=len(cases)))


def _f64(*shape, gen, scale=1.0, shift=0.0):
    return torch.randn(*shape, generator=gen, dtype=torch.float64) * scale + shift


# --------------------------------------------------------------------------- LinearReLU


def _linear_cases() -> list[Case]:
    gen = seeded(50)
    specs = [  # (N, D, E, transposed x, frozen inputs, what the label adds)
        *((n, d, e, False, (), "") for n, d, e in [(3, 4, 2), (5, 2, 3), (1, 3, 2), (4, 3, 1)]),
        (4, 3, 5, False, (0, 2), ", where only W requires grad"),
        (6, 2, 3, False, (0,), ", x as data (no grad)"),
        (5, 3, 4, True, (), ", a non-contiguous x (a transposed (3, 5) tensor)"),
    ]
    cases = []
    for n, d, e, transposed, frozen, note in specs:
        x = _f64(d, n, gen=gen).T if transposed else _f64(n, d, gen=gen)
        args, label = (x, _f64(d, e, gen=gen), _f64(e, gen=gen)), f"x {(n, d)}, W {(d, e)}, b {(e,)}{note}"
        cases.append(Case(args, label, {"frozen": frozen}))
    return cases


def _linear_relu_grads(x, W, G, mask, dW_factor=1.0, db=torch.sum):
    G = G * mask
    return G @ W.T, x.T @ G * dW_factor, db(G, 0)


LINEAR_RELU_HINTS = {
    "no-mask": N_("ReLU passes the gradient only where its output is positive: multiply G by the mask before the three formulas."),
    "db-mean": N_("b is added to every row, so its gradient is the masked G summed over the batch, not averaged."),
    "dW-over-batch": N_("dW = xᵀ (G ⊙ mask) was divided by the batch size: the upstream G already carries any 1/N of the loss."),
    "mask-inverted": N_("the mask is inverted: the gradient passes where the output is positive."),
}  # fmt: skip
_LINEAR_RELU_SLIPS = {
    "no-mask": lambda x, W, b, G: _linear_relu_grads(x, W, G, 1.0),
    "db-mean": lambda x, W, b, G: _linear_relu_grads(x, W, G, x @ W + b > 0, db=torch.mean),
    "dW-over-batch": lambda x, W, b, G: _linear_relu_grads(x, W, G, x @ W + b > 0, 1 / x.shape[0]),
    "mask-inverted": lambda x, W, b, G: _linear_relu_grads(x, W, G, x @ W + b <= 0),
}
LINEAR_RELU_MISTAKES = mistakes(LINEAR_RELU_HINTS, _LINEAR_RELU_SLIPS)
MASK_HINT = N_("ReLU's backward needs only where the output is positive: save the bool mask `out > 0` (1 byte per element) instead of the floating output (4 or 8 bytes per element).")  # fmt: skip


def _saves_float_output(saved: list, out: torch.Tensor) -> Mistake | None:
    floats = [shape for shape, dtype in saved if shape == tuple(out.shape) and dtype.is_floating_point]
    return Mistake("saves-float-output", MASK_HINT) if floats else None


def check_linear_relu(LinearReLU) -> None:
    """Check ``LinearReLU.apply(x, W, b)`` = relu(x @ W + b), a fused layer whose backward reads a bool mask."""
    check_autograd_function(
        LinearReLU,
        name="LinearReLU",
        reference=lambda x, W, b: torch.relu(x @ W + b),
        cases=_linear_cases(),
        input_names=("x", "W", "b"),
        mistakes=LINEAR_RELU_MISTAKES,
        error_hints=_("backward returns one gradient per forward input, in order (x, W, b), each with that input's shape: (G ⊙ mask) Wᵀ for x, xᵀ (G ⊙ mask) for W, G ⊙ mask summed over the batch for b."),
        max_saved=3,
        saved_check=_saves_float_output,
    )  # fmt: skip


# --------------------------------------------------------------------------- StableSoftplus


def _softplus_cases() -> list[Case]:
    gen = seeded(51)
    return [
        Case((_f64(4, 5, gen=gen, scale=3),), _("x of shape (4, 5), values around ±3")),
        Case((_f64(2, 3, 4, gen=gen),), _("x of shape (2, 3, 4)")),
        Case((_f64(3, 4, gen=gen, scale=10, shift=1000.0),), _("large x (around +1000) of shape (3, 4)")),
        Case((_f64(2, 3, gen=gen, scale=5, shift=-60.0),), _("very negative x (around −60) of shape (2, 3)")),
        Case((_f64(5, 3, gen=gen, scale=2).T,), _("a non-contiguous x (a transposed (5, 3) tensor)")),
    ]


OVERFLOW_HINT = N_("eˣ overflows to inf for x around 1000, and inf / inf = NaN in the backward. Split off the large part: log(1 + eˣ) = max(x, 0) + log(1 + e^(−|x|)), where the exponent is never positive; σ(x) = torch.sigmoid(x) is stable.")  # fmt: skip
SOFTPLUS_HINTS = {
    "overflow": OVERFLOW_HINT,
    "no-grad-output": N_("the backward forgot grad_output: multiply σ(x) by grad_output."),
    "exp-derivative": N_("d/dx log(1 + eˣ) = eˣ / (1 + eˣ) = σ(x), not eˣ: the 1 + eˣ of the log's derivative is missing."),
    "sigmoid-of-minus-x": N_("σ(x) = 1 / (1 + e⁻ˣ) is the derivative; 1 / (1 + eˣ) = σ(−x) is the derivative of softplus(−x)."),
    "softplus-as-derivative": N_("that is the softplus itself, not its derivative σ(x)."),
}  # fmt: skip
_SOFTPLUS_SLIPS = {
    "overflow": lambda x, v: (v * torch.exp(x) / (1 + torch.exp(x)),),
    "no-grad-output": lambda x, v: (torch.sigmoid(x),),
    "exp-derivative": lambda x, v: (v * torch.exp(x),),
    "sigmoid-of-minus-x": lambda x, v: (v * torch.sigmoid(-x),),
    "softplus-as-derivative": lambda x, v: (v * F.softplus(x),),
}
SOFTPLUS_MISTAKES = mistakes(SOFTPLUS_HINTS, _SOFTPLUS_SLIPS)
BUILD_IT_YOURSELF = OffLimits(
    routines=(*routines(F, "F", "softplus"), *routines(torch, "torch", "logaddexp"), *routines(torch.Tensor, "Tensor", "logaddexp")),
    why=N_("this exercise is to build the stable formula yourself; torch's softplus and logaddexp already are one."),
)  # fmt: skip


def _check_softplus_precision(apply: Callable, name: str) -> None:
    """For very negative x, softplus(x) ≈ eˣ is tiny: an answer off by 100% of it hides under any absolute tolerance."""
    x = torch.tensor([-20.0, -40.0, -300.0], dtype=torch.float64)
    got = LearnerCall(apply, name, BUILD_IT_YOURSELF).on(_("x = [−20, −40, −300]"))(x).detach()
    relative = float(((got - F.softplus(x)).abs() / F.softplus(x)).max())
    if not relative <= 1e-12:
        detail = _("For x = [−20, −40, −300] the true values are about [2.1e−9, 4.2e−18, 5.1e−131]; yours are {yours} (relative error {relative:.3g}).").format(yours=[float(f'{v:.3g}') for v in got], relative=relative)  # fmt: skip
        hint = _("1 + e⁻⁴⁰ rounds to exactly 1 in float64, so log(1 + u) returns 0; torch.log1p(u) computes log(1 + u) without forming 1 + u.")  # fmt: skip
        summary = _("The forward of `{name}` loses the tiny values.").format(name=name)
        raise ExerciseError("value", summary, detail=detail, hint=hint, mistake="log-not-log1p")


def check_softplus_function(StableSoftplus) -> None:
    """Check ``StableSoftplus.apply(x)`` = log(1 + eˣ) element-wise: stable and precise for any x, with its backward."""
    check_autograd_function(
        StableSoftplus,
        name="StableSoftplus",
        reference=F.softplus,
        cases=_softplus_cases(),
        mistakes=SOFTPLUS_MISTAKES,
        nonfinite=SOFTPLUS_MISTAKES[0],
        max_saved=2,
        off_limits=BUILD_IT_YOURSELF,
        then=_check_softplus_precision,
    )


# --------------------------------------------------------------------------- SafeNorm


def _norm_cases() -> list[Case]:
    gen = seeded(52)
    zero_row, three_d, column = _f64(4, 3, gen=gen), _f64(2, 3, 4, gen=gen), _f64(3, 1, gen=gen)
    zero_row[2], three_d[1, 0], column[1] = 0.0, 0.0, 0.0
    return [
        Case((_f64(5, 3, gen=gen),), _("x of shape (5, 3)")),
        Case((zero_row,), _("x of shape (4, 3) whose row 2 is all zeros")),
        Case((_f64(1, 5, gen=gen),), _("x of shape (1, 5)")),
        Case((column,), _("x of shape (3, 1) with a zero in row 1")),
        Case((three_d,), _("x of shape (2, 3, 4) with one all-zero row")),
    ]


NORM_HINTS = {
    "no-grad-output": N_("the backward forgot grad_output: multiply x / ‖x‖ by grad_output.unsqueeze(-1)."),
    "not-normalised": N_("d‖x‖/dx = x / ‖x‖, not x: divide by the norm (and return 0 where the norm is 0)."),
    "zero-division": N_("at an all-zero row x / ‖x‖ is 0 / 0 = NaN. Return 0 there, and never divide by 0, even in a branch torch.where discards."),
    "where-branch": N_("torch.where picks values, but the branch it discards is still computed and still differentiated: 0 · (NaN from x / 0) is NaN. Make the discarded branch finite too: divide by a denominator that is never 0 (torch.where(norm > 0, norm, 1)) before the where."),
    "sqrt-in-backward": N_("your backward recomputes the norm with sqrt: differentiating it, sqrt's own backward at 0 divides by 2·√0, and no where after it can keep that NaN out (the cell above). Use the norm your forward saved, and divide by torch.where(norm > 0, norm, 1)."),
    "not-differentiable": N_("this exercise needs a backward made of differentiable torch ops (no @once_differentiable, no torch.no_grad(), no .detach()): a gradient penalty differentiates it."),
}  # fmt: skip
_NORM_SLIPS = {
    "no-grad-output": lambda x, v: (torch.nan_to_num(x / x.norm(dim=-1, keepdim=True)),),  # 0/0 -> 0
    "not-normalised": lambda x, v: (v.unsqueeze(-1) * x,),
}
NORM_MISTAKES = mistakes(NORM_HINTS, _NORM_SLIPS)
USE_YOUR_OWN_NORM = OffLimits(
    routines=(*routines(torch.linalg, "torch.linalg", "vector_norm", "norm"), *routines(torch, "torch", "norm"), *routines(torch.Tensor, "Tensor", "norm")),
    why=N_("this exercise is to write the norm's backward yourself; torch's norms bring their own."),
)  # fmt: skip


def _check_norm_double_backward(apply: Callable, name: str) -> None:
    """A gradient penalty differentiates the backward: it must be differentiable and stay finite at x = 0."""
    gen = seeded(54)
    with_zero = _f64(3, 4, gen=gen)
    with_zero[1] = 0.0
    leaf = with_zero.clone().requires_grad_()
    try:
        (g,) = torch.autograd.grad(apply(leaf).sum(), leaf, create_graph=True)
        (gg,) = torch.autograd.grad((g**2).sum() + g.sum(), leaf)
    except RuntimeError as exc:
        summary = _("The backward of `{name}` cannot be differentiated ({error}).").format(name=name, error=str(exc).splitlines()[0])  # fmt: skip
        raise named("not-differentiable", summary, NORM_HINTS) from None
    if not torch.isfinite(gg).all():
        recomputed = "SqrtBackward0" in {node_name(n) for n in walk([g])[0]}
        mistake = "sqrt-in-backward" if recomputed else "where-branch"
        summary = _("Differentiating the backward of `{name}` (a gradient penalty) gives NaN at the all-zero row of x.").format(name=name)  # fmt: skip
        raise named(mistake, summary, NORM_HINTS, "not-finite")
    x = _f64(3, 4, gen=gen).requires_grad_()
    if not torch.autograd.gradgradcheck(apply, (x,), eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=False):
        summary = _("gradgradcheck fails for `{name}` on x of shape (3, 4): the second derivatives through your backward are wrong.").format(name=name)  # fmt: skip
        hint = _("compute the backward with differentiable torch ops on the saved tensors, not under torch.no_grad() or on .detach()ed copies, so autograd can differentiate it.")  # fmt: skip
        raise ExerciseError("value", summary, hint=hint, mistake="gradgradcheck")


def check_safe_norm_function(SafeNorm) -> None:
    """Check ``SafeNorm.apply(x)`` = ‖x‖ over the last dim, whose gradient is 0 (not NaN) where x is all zeros."""
    check_autograd_function(
        SafeNorm,
        name="SafeNorm",
        reference=lambda x: torch.linalg.vector_norm(x, dim=-1),
        cases=_norm_cases(),
        mistakes=NORM_MISTAKES,
        nonfinite=Mistake("zero-division", NORM_HINTS["zero-division"]),
        error_hints=_("grad_output has one value per row: grad_output.unsqueeze(-1) broadcasts it over the last dim."),
        max_saved=2,
        off_limits=USE_YOUR_OWN_NORM,
        then=_check_norm_double_backward,
    )


# --------------------------------------------------------------------------- clipped straight-through sign


def _ste_cases() -> list[Case]:
    gen = seeded(53)
    edges = torch.tensor([-1.5, -1.0, -0.5, 0.0, 0.25, 1.0, 1.0001, 3.0], dtype=torch.float64)
    return [
        Case((_f64(4, 5, gen=gen, scale=1.5),), _("x of shape (4, 5), values around ±1.5")),
        Case((edges,), _("x = [−1.5, −1, −0.5, 0, 0.25, 1, 1.0001, 3] (the edges: 0 and exactly ±1)")),
        Case((_f64(2, 1, 3, gen=gen, scale=2),), _("x of shape (2, 1, 3)")),
        Case((_f64(3, 4, gen=gen).T,), _("a non-contiguous x (a transposed (3, 4) tensor)")),
    ]


STE_HINTS = {
    "true-derivative": N_("that is the true derivative of sign (0 almost everywhere), which stops all learning: pass grad_output through where |x| ≤ 1."),
    "plain-ste": N_("that is the plain straight-through estimator: the clipped one passes the gradient only where |x| ≤ 1 and returns 0 outside."),
    "open-window": N_("the window is closed: |x| ≤ 1 includes x = ±1 (use <=, not <)."),
    "times-x": N_("the gradient is grad_output where |x| ≤ 1, not grad_output ⊙ x."),
    "inverted-window": N_("the window is inverted: pass the gradient where |x| ≤ 1, zero it outside."),
    "sign-of-zero": N_("sign(0) is 0: torch.sign(x), not 1 for x ≥ 0 (torch.where(x >= 0, 1, −1))."),
    "round": N_("the forward is sign(x), not round(x)."),
    "clamp": N_("the forward is sign(x), not the clamp (hardtanh) of x."),
}  # fmt: skip
_STE_SLIPS = {
    "true-derivative": lambda x, v: (torch.zeros_like(v),),
    "plain-ste": lambda x, v: (v,),
    "open-window": lambda x, v: (v * (x.abs() < 1),),
    "times-x": lambda x, v: (v * x * (x.abs() <= 1),),
    "inverted-window": lambda x, v: (v * (x.abs() > 1),),
}
STE_MISTAKES = mistakes(STE_HINTS, _STE_SLIPS)
_STE_FORWARD_SLIPS = {
    "sign-of-zero": lambda x: torch.where(x >= 0, 1.0, -1.0).to(x.dtype),
    "round": torch.round,
    "clamp": lambda x: x.clamp(-1, 1),
}
STE_FORWARD_MISTAKES = mistakes(STE_HINTS, _STE_FORWARD_SLIPS)


def _clipped_ste(x: torch.Tensor) -> torch.Tensor:
    """sign(x) forward; clamp's gradient (1 where −1 ≤ x ≤ 1, both ends included) backward."""
    return x.clamp(-1, 1) + (torch.sign(x) - x.clamp(-1, 1)).detach()


def check_clipped_sign_ste(ClippedSignSTE) -> None:
    """Check ``ClippedSignSTE.apply(x)``: forward ``torch.sign(x)``, backward grad_output where |x| ≤ 1, else 0.

    gradcheck does not apply: the backward is deliberately not the derivative of the forward.
    """
    check_autograd_function(
        ClippedSignSTE,
        name="ClippedSignSTE",
        reference=_clipped_ste,
        cases=_ste_cases(),
        mistakes=STE_MISTAKES,
        forward_mistakes=STE_FORWARD_MISTAKES,
        max_saved=1,
        gradcheck=False,
    )
