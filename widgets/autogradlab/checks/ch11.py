"""Checkers for chapter 11 (autograd under torch.compile).

1. ``check_saved_bytes``: read, from the forward and backward graphs AOTAutograd made, the memory the
   compiled forward keeps for backward; checked against the saved-tensor hooks on functions the page
   never shows, under both partitioners.
2. ``check_step_without_breaks``: remove the graph breaks from a training step without changing its loss
   or its gradients: one graph, no break, no eager fallback.
3. ``check_checkpoint_policy``: a selective-checkpoint policy that keeps a compiled MLP stack within a
   byte budget with the fewest recomputed FLOPs, measured on stacks of other sizes.

The course material they run lives in :mod:`autogradlab.models.compiled.exercises`.
"""

from __future__ import annotations

import copy
from functools import cache, partial

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import CheckpointPolicy

from autogradlab.checks.core import ExerciseError, LearnerCall, close, mistakes, passed
from autogradlab.graph.saved_bytes import SavedBytes
from autogradlab.i18n import N_, _, said
from autogradlab.models.compiled import (
    base_of,
    compile_recorded,
    graph_breaks,
    quiet,
    read_partition,
    with_policy,
)
from autogradlab.models.compiled.exercises import (
    BUDGET_SHARE,
    POLICY_CASES,
    SAVED_CASES,
    STEP_CASES,
    all_matmul_bytes,
    least_recompute_flops,
    logged_step,
    policy_case,
    quiet_print,
    step_case,
)

# fmt: off
SAVED_HINTS = {
    "tangents": N_("the backward graph's inputs named tangents_… are the incoming gradients, not saved values: backward receives them when it runs, the forward keeps nothing for them."),
    "inputs": N_("a saved input (a placeholder of the forward graph: a parameter, the batch) exists anyway: it adds no memory."),
    "views-of-inputs": N_("a saved view of an input (t, permute, view, expand …: `node.target.is_view`) shares the input's memory: follow view ops back to their base before you count."),
    "per-value": N_("two saved values can be views of one tensor (a result and its `alias`, the halves of a `chunk`): count the memory of their base once, not each value."),
    "elements": N_("count bytes, not elements: `node.meta['val']` is a tensor with `.numel()` and `.element_size()`."),
    "four-bytes": N_("the element size depends on the dtype: 8 bytes for float64, 2 for the bfloat16 copies autocast saves."),
    "all-outputs": N_("the forward graph's first outputs are the function's results, not values saved for backward: take the backward graph's inputs (minus the tangents) as the saved set."),
    None: N_("list the saved values, follow each view back to its base, and count the bases that are not inputs, each once."),
}
BREAK_HINTS = {
    "item": N_("`.item()` or `float()` turns a tensor into a Python number, which Dynamo cannot keep in a graph: compare and divide with tensors (`torch.where`, `loss.detach()`)."),
    "branch": N_("a Python `if` on a tensor's value breaks the graph: compute both sides and pick with `torch.where`, or notice that the op does nothing where the condition is false."),
    "print": N_("`print` runs Python on the side: return the loss and let the caller log it."),
    "disabled": N_("a `torch.compiler.disable`d function is run eagerly between two graphs: that is a break too; write its work with tensor ops instead."),
}
STEP_HINTS = {
    "clamp-dropped": N_("the clamp changes the gradient where outputs lie beyond ±10 (there it is 0): keep it, it needs no `if`."),
    "normalize-dropped": N_("a loss above 1 is divided by its own value (a constant: `.item()`); keep that, written with tensors."),
    "normalize-always": N_("only a loss above 1 is divided by its value; below 1 the step is unchanged (`torch.where`)."),
    "not-detached": N_("`loss / loss` is the constant 1 with a zero gradient; `.item()` divided by a number that carries no gradient: that is `loss.detach()`."),
}
POLICY_HINTS = {
    "saves-nothing": N_("recomputing every matmul fits the budget but doubles the forward's FLOPs: some matmul outputs do fit, save those."),
    "all-matmuls": N_("every matmul output is 4 budgets' worth of bytes: choose which matmuls to save."),
    "larger-outputs": N_("`up`'s output (tokens × 4·width) is four times `down`'s (tokens × width) for the same FLOPs: per byte, saving `down` buys four times as much."),
    "addmm-only": N_("a Linear without bias runs `aten.mm`, not `aten.addmm`: this stack has both kinds."),
    "saves-pointwise": N_("pointwise outputs are large and cheap to recompute; the matmuls are what costs FLOPs."),
}
#: the checks' words, by key
SAID = {
    "bytes-type": N_("`saved_bytes` should return a whole number of bytes, got {value!r} for {label}."),
    "bytes-wrong": N_("`saved_bytes` is wrong for {label}: you count {got} B, the saved-tensor hooks measure {expected} B kept for backward (inputs left out)."),
    "saved-values": N_("Saved values: {values}"),
    "bytes-passed": N_("saved_bytes reads what {n} compiled forwards keep for backward, as the saved-tensor hooks measure it"),
    "step-type": N_("`step_without_breaks` should return the loss as a tensor with its graph, got {loss!r} for {label}."),
    "step-type-hint": N_("return the loss tensor itself; the caller calls backward() and logs it."),
    "loss": N_("`step_without_breaks` changes the loss for the batch with {label}: loss {got:.6g}, logged_step's {expected:.6g}."),
    "gradients": N_("`step_without_breaks` changes the gradients for the batch with {label}: loss {got:.6g}, logged_step's {expected:.6g}."),
    "breaks": N_("Dynamo still breaks `step_without_breaks` into {graphs} graphs: {n} break(s), the first at `{line}` ({reason})."),
    "fullgraph": N_("`torch.compile(step_without_breaks, fullgraph=True)` refuses it: {error}"),
    "step-passed": N_("step_without_breaks gives logged_step's loss and gradients on {n} batches, in one graph with no break"),
    "stack-bias": N_("{depth} block(s) of width {width}, {tokens} tokens, with bias"),
    "stack": N_("{depth} block(s) of width {width}, {tokens} tokens, without bias"),
    "policy-type": N_("`policy` returned {decision!r} for {op} ({label}); it must return a CheckpointPolicy."),
    "policy-type-hint": N_("return CheckpointPolicy.MUST_SAVE or CheckpointPolicy.PREFER_RECOMPUTE."),
    "policy-raised": N_("compiling the stack with `policy` raised {type} for {label}: {error}"),
    "policy-raised-hint": N_("return a `torch.utils.checkpoint.CheckpointPolicy` (MUST_SAVE or PREFER_RECOMPUTE) for every op."),
    "policy-wrong": N_("for {label}: `policy` keeps {saved} B (budget {budget} B) and recomputes {flops} matmul FLOPs (the fewest possible within the budget: {least})."),
    "over-budget": N_("Over the budget."),
    "too-much-recompute": N_("Within the budget, but more recomputation than needed."),
    "policy-passed": N_("policy keeps {n} compiled stacks within a quarter of their matmul bytes, recomputing the fewest FLOPs"),
}
# fmt: on


_said = partial(said, SAID)


# --------------------------------------------------------------------------- exercise 1: saved memory from the graphs


def _saved(forward, backward):
    """(forward node, is it a tangent) for every input of the backward graph."""
    nodes = {n.name: n for n in forward.graph.nodes}
    return [(nodes.get(p.name, p), p.name.startswith("tangents")) for p in backward.graph.find_nodes(op="placeholder")]


def _bytes(node, element_size=None) -> int:
    value = node.meta["val"]
    return value.numel() * (value.element_size() if element_size is None else element_size)


def _total(forward, backward, *, tangents=False, inputs=False, views=False, per_value=False, element_size=None):
    """The reference (all flags off) and the slips the flags switch on, in one place."""
    memory = {}
    for node, tangent in _saved(forward, backward):
        base = base_of(node)
        if tangent and not tangents:
            continue
        if not tangent and base.op == "placeholder" and not (inputs or (views and node.op != "placeholder")):
            continue
        key = node if per_value or tangent else base
        memory[key] = _bytes(node if per_value or tangent else base, element_size)
    return sum(memory.values())


def _all_outputs(forward, backward):
    """Every output of the forward graph that is new memory: the function's results counted as saved too."""
    (output,) = forward.graph.find_nodes(op="output")
    bases = {base_of(n) for n in output.args[0] if n is not None and hasattr(n, "op")}
    return sum(_bytes(b) for b in bases if b.op != "placeholder")


SAVED_MISTAKES = mistakes(
    SAVED_HINTS,
    {
        "tangents": partial(_total, tangents=True),
        "inputs": partial(_total, inputs=True),
        "views-of-inputs": partial(_total, views=True),
        "per-value": partial(_total, per_value=True),
        "elements": partial(_total, element_size=1),
        "four-bytes": partial(_total, element_size=4),
        "all-outputs": _all_outputs,
    },
)


def _as_bytes(value, label: str) -> int:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or float(value) != int(value):
        raise ExerciseError("type", _said("bytes-type", value=value, label=label))
    return int(value)


@cache
def _traced(case) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule, int]:
    """``case``'s compiled forward and backward graphs and the bytes the saved-tensor hooks measure: the same
    for every answer, so compiled once per process (each answer gets its own copy of the graphs)."""
    torch.compiler.reset()  # a fresh cache: no graph compiled before (by you or an earlier check) is reused
    args = case.inputs()
    compiled, recording = compile_recorded(case.fn, partition=case.partition)
    with quiet():
        out = compiled(*args)
        out.backward(torch.ones_like(out))
        with SavedBytes(exclude=args) as measured:
            compiled(*args)
    return recording.forward[0], recording.backward[0], measured.total


def check_saved_bytes(saved_bytes) -> None:
    """Check ``saved_bytes(forward, backward) -> int`` against the saved-tensor hooks on four functions.

    >>> from autogradlab.models.compiled import saved_values
    >>> def answer(forward, backward):
    ...     return sum({v.base: v.base_nbytes for v in saved_values(forward, backward) if v.source == "new"}.values())
    >>> check_saved_bytes(answer)
    ✓ saved_bytes reads what 4 compiled forwards keep for backward, as the saved-tensor hooks measure it
    """
    learner = LearnerCall(saved_bytes, "saved_bytes", frozen_inputs=False)
    candidates = list(SAVED_MISTAKES)  # the slips that agree with every answer so far
    for case in SAVED_CASES:
        forward, backward, expected = _traced(case)
        label = _(case.label)
        got = _as_bytes(learner.on(label)(*copy.deepcopy((forward, backward))), label)  # the answer may edit its copy
        candidates = [m for m in candidates if m.compute(forward, backward) == got]
        if got == expected:
            continue
        summary = _said("bytes-wrong", label=label, got=got, expected=expected)
        values = ", ".join(f"{n.name} {tuple(n.meta['val'].shape)}" for n, t in _saved(forward, backward) if not t)
        detail = _said("saved-values", values=values)
        slip = candidates[0].id if candidates else None
        measured = {"got": got, "expected": expected}
        raise ExerciseError("value", summary, detail=detail, hint=SAVED_HINTS[slip], mistake=slip, measured=measured)
    passed(_said("bytes-passed", n=len(SAVED_CASES)))


# --------------------------------------------------------------------------- exercise 2: a step without graph breaks


def _break_kind(reason: str, line: str) -> str:
    if "disable" in reason:
        return "disabled"
    if "print(" in line:
        return "print"
    if "item()" in reason or ".item()" in line or "float(" in line:
        return "item"
    if reason.startswith("generic_jump") or "if " in line:
        return "branch"
    return "other"


def _slip(clamp=True, normalize="above 1", divisor=torch.Tensor.detach):
    """The exercise's step with one slip: no clamp, no (or always) normalization, a divisor with a gradient."""

    def step(model, x, y):
        out = model(x)
        loss = F.mse_loss(out.clamp(-10, 10) if clamp else out, y)
        if normalize is None:
            return loss
        scaled = loss / divisor(loss)
        return scaled if normalize == "always" else torch.where(loss > 1, scaled, loss)

    return step


STEP_MISTAKES = mistakes(
    STEP_HINTS,
    {
        "clamp-dropped": _slip(clamp=False),
        "normalize-dropped": _slip(normalize=None),
        "normalize-always": _slip(normalize="always"),
        "not-detached": _slip(divisor=lambda loss: loss),
    },
)


def _run_step(step, label):
    model, x, y = step_case(label)
    with quiet_print():
        loss = step(model, x, y)
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or loss.grad_fn is None:
        summary, hint = _said("step-type", loss=loss, label=_(label)), _said("step-type-hint")
        raise ExerciseError("type", summary, hint=hint)
    loss.backward()
    return loss.detach(), [p.grad for p in model.parameters()]


def check_step_without_breaks(step_without_breaks) -> None:
    """Check ``step_without_breaks(model, x, y)``: ``logged_step``'s loss and gradients, one graph, no break.

    >>> def answer(model, x, y):
    ...     loss = F.mse_loss(model(x).clamp(-10, 10), y)
    ...     return torch.where(loss > 1, loss / loss.detach(), loss)
    >>> check_step_without_breaks(answer)
    ✓ step_without_breaks gives logged_step's loss and gradients on 4 batches, in one graph with no break
    """
    learner = LearnerCall(step_without_breaks, "step_without_breaks", frozen_inputs=False)
    for label in STEP_CASES:
        got, expected = _run_step(learner.on(_(label)), label), _run_step(logged_step, label)
        if _matches(expected, got):
            continue
        slip = next((m.id for m in STEP_MISTAKES if _matches(_run_step(m.compute, label), got)), None)
        what = "loss" if not close(got[0], expected[0]) else "gradients"
        summary = _said(what, label=_(label), got=got[0].item(), expected=expected[0].item())
        raise ExerciseError("value", summary, hint=STEP_HINTS.get(slip), mistake=slip)
    model, x, y = step_case("clamped, large loss")
    with quiet_print():
        found = graph_breaks(step_without_breaks, model, x, y)
    if found.breaks:
        first = found.breaks[0]
        kind = _break_kind(first.reason, first.line)
        summary = _said("breaks", graphs=found.graphs, n=len(found.breaks), line=first.line, reason=first.reason)
        raise ExerciseError("graph-break", summary, hint=BREAK_HINTS.get(kind), mistake=kind)
    torch.compiler.reset()
    try:  # fullgraph=True raises at any break, also one the explanation did not list
        with quiet(), quiet_print():
            torch.compile(step_without_breaks, backend="eager", fullgraph=True)(model, x, y)
    except Exception as exc:
        summary = _said("fullgraph", error=str(exc).splitlines()[0])
        raise ExerciseError("graph-break", summary, mistake="other") from None
    passed(_said("step-passed", n=len(STEP_CASES)))


def _matches(expected, got) -> bool:
    """The same loss and gradients (``_run_step``'s results)."""
    return close(got[0], expected[0]) and all(close(g, e) for g, e in zip(got[1], expected[1]))


# --------------------------------------------------------------------------- exercise 3: a policy under a byte budget


def _policies():
    aten = torch.ops.aten
    matmul = {aten.mm.default, aten.addmm.default}

    def by(save):
        def policy(ctx, op, *args, **kwargs):
            return CheckpointPolicy.MUST_SAVE if save(op, args) else CheckpointPolicy.PREFER_RECOMPUTE

        return policy

    def smaller(args):  # addmm(bias, input, weight): the output width is the weight's last dimension
        a, w = args[-2], args[-1]
        return w.shape[-1] < a.shape[-1]

    return {  # addmm-only first: on a stack without bias it saves as little as saves-nothing, which fails earlier
        "addmm-only": by(lambda op, args: op is aten.addmm.default and smaller(args)),
        "saves-nothing": by(lambda op, args: False),
        "all-matmuls": by(lambda op, args: op in matmul),
        "larger-outputs": by(lambda op, args: op in matmul and not smaller(args)),
        "saves-pointwise": by(lambda op, args: op not in matmul),
    }


def _exercise_error_in(exc: BaseException) -> ExerciseError | None:
    """The ExerciseError a learner's policy raised, however deep torch's tracing wrapped it."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, ExerciseError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


@cache
def _slip_measure(name: str, case: tuple) -> tuple[int, int]:
    """(saved bytes, recomputed FLOPs) of the known wrong policy ``name`` on ``case``: the same in every
    call, so measured once per process (naming a slip would otherwise recompile every wrong policy)."""
    return _measure_policy(_policies()[name], case)[:2]


def _measure_policy(policy, case) -> tuple[int, int, int]:
    """(saved bytes by the hooks, recomputed matmul FLOPs, budget) of a compiled stack under ``policy``."""
    tokens, width, depth, bias = case
    model, x = policy_case(*case)
    compiled, recording = compile_recorded(lambda batch: with_policy(model, policy)(batch).square().mean())
    with quiet():
        compiled(x).backward()
        with SavedBytes(exclude=[*model.parameters(), x]) as saved:
            compiled(x)
    budget = int(BUDGET_SHARE * all_matmul_bytes(tokens, width, depth))
    return saved.total, read_partition(recording).recomputed_flops, budget


def check_checkpoint_policy(policy) -> None:
    """Check a selective-checkpoint ``policy(ctx, op, *args, **kwargs)`` on three MLP stacks.

    >>> def answer(ctx, op, *args, **kwargs):
    ...     matmul = op in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)
    ...     small = matmul and args[-1].shape[-1] < args[-2].shape[-1]
    ...     return CheckpointPolicy.MUST_SAVE if small else CheckpointPolicy.PREFER_RECOMPUTE
    >>> check_checkpoint_policy(answer)
    ✓ policy keeps 3 compiled stacks within a quarter of their matmul bytes, recomputing the fewest FLOPs
    """
    torch.compiler.reset()
    learner = LearnerCall(policy, "policy", frozen_inputs=False)
    for case in POLICY_CASES:
        tokens, width, depth, bias = case
        label = _said("stack-bias" if bias else "stack", depth=depth, width=width, tokens=tokens)

        # The learner's errors are kept, not raised, while torch traces: an exception inside the compiled
        # run can leave its checkpoint mode active in the process (seen on torch 2.11); raised after it.
        problems: list[ExerciseError] = []

        def checked(ctx, op, *args, label=label, problems=problems, **kwargs):
            try:
                decision = learner.on(label)(ctx, op, *args, **kwargs)
            except ExerciseError as error:
                problems.append(error)
                return CheckpointPolicy.PREFER_RECOMPUTE
            if not isinstance(decision, CheckpointPolicy):
                summary = _said("policy-type", decision=decision, op=op, label=label)
                problems.append(ExerciseError("type", summary, hint=_said("policy-type-hint")))
                return CheckpointPolicy.PREFER_RECOMPUTE
            return decision

        try:
            saved, flops, budget = _measure_policy(checked, case)
        except Exception as exc:  # raised inside torch while it traced the policy
            if problems:
                raise problems[0] from None
            if inner := _exercise_error_in(exc):
                raise inner from None
            summary = _said("policy-raised", type=type(exc).__name__, label=label, error=str(exc).splitlines()[0])
            raise ExerciseError("raised", summary, hint=_said("policy-raised-hint")) from None
        if problems:
            raise problems[0]
        least = least_recompute_flops(tokens, width, depth)
        if saved <= budget and flops <= least:
            continue
        slip = next((n for n in _policies() if _slip_measure(n, case) == (saved, flops)), None)
        measured = {"saved": saved, "budget": budget, "flops": flops, "least": least}
        summary, symptom = (
            _said("policy-wrong", label=label, **measured),
            "over-budget" if saved > budget else "too-much-recompute",
        )
        hint, detail = POLICY_HINTS.get(slip), _said(symptom)
        raise ExerciseError("contract", summary, detail=detail, hint=hint, mistake=slip or symptom, measured=measured)
    passed(_said("policy-passed", n=len(POLICY_CASES)))
