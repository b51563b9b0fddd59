"""The four mysteries: which script, the reference fix, the hint ladder and the debrief.

This is the instructor's side of the lab: the learner gets only the script
(:func:`autogradlab.models.mysteries.unpack`) and, from the checker, hints that escalate
with their attempts. Each :class:`Mystery` holds

* ``fix``: the ``(old, new)`` text replacements that turn the shipped script into the healthy
  reference (one source for both, so they differ in the bug only);
* ``ladder``: three hints, from the symptom to which tool to where (the checker reveals one more
  after each failed attempt, the last two only once a hypothesis is on record);
* ``debrief``: what the bug was, why it gave this symptom, the evidence that shows it and the red
  herrings (shown only after the fix passes its check).

>>> [(m.number, m.module) for m in MYSTERIES.values()]
[(1, 'reviews'), (2, 'sensors'), (3, 'tokens'), (4, 'rings')]
"""

from __future__ import annotations

from dataclasses import dataclass

from autogradlab.i18n import N_


@dataclass(frozen=True)
class Mystery:
    number: int
    module: str  # the shipped script: autogradlab.models.mysteries.<module>
    fix: tuple[tuple[str, str], ...]
    ladder: tuple[str, str, str]
    debrief: str


MYSTERIES = {
    1: Mystery(
        1,
        "reviews",
        fix=(("self.weight.data.float()", "self.weight.float()"),),
        ladder=(
            N_(
                "the loss sits at the entropy of the labels (ln 2 for balanced labels): the prediction does not "
                "depend on the review. Find out which parameters learn."
            ),
            N_(
                "after one training step, read every parameter's `.grad` (None, zero, or a real gradient?), then tap "
                "the tensors between the body and the loss with `register_hook` (chapter 09)."
            ),
            N_("`head.weight` never receives a gradient: read how `Float32Head.forward` uses its weight."),
        ),
        debrief=N_("""\
**The bug.** `Float32Head.forward` used `self.weight.data.float()`. `.data` hands out the weight's values
without its autograd identity, so the graph records a product with a constant: backward never reaches
`head.weight`, whose `.grad` stays `None`. The weight starts at zero and stays zero, so every logit equals the
bias; the bias learns the labels' log-odds (0 for balanced labels), and the loss sits at
$H(\\hat p) = \\ln 2$. The body's gradients pass through the zero weight and are exactly 0, so nothing else
learns either.

**The evidence.** The loss equals the labels' entropy (the output ignores the input); after one step
`head.weight.grad is None`, the bias has a gradient, every body parameter's gradient is exactly zero; the doctor
names `missing-grad` for `head.weight`.

**The red herrings.** The GradScaler (not needed with bf16, harmless), the zero initialisation (a sound trick,
as long as the weight gets a gradient), the `.data` writes in `_init_weights` (they run once, before any graph
exists), the warm-up and the clipping.

**The fix.** `self.weight.float()`, or just `self.weight`: a float32 weight's `.float()` is the weight itself,
and it keeps the graph. Use `detach()` where you mean to cut a graph, and neither where you do not."""),
    ),
    2: Mystery(
        2,
        "sensors",
        fix=(("lr = lr_factor(self.step_count", "lr = self.cfg.lr * lr_factor(self.step_count"),),
        ladder=(
            N_(
                "the loss jumps in the first steps, then settles at the entropy of the class shares: the prediction "
                "stopped depending on the input. Find out when, and what stopped moving."
            ),
            N_(
                "measure, step by step, the fraction of hidden ReLUs that output 0 for every training input, each "
                "layer's gradient norm and update ratio, and the learning rate the optimizer really used "
                "(`optimizer.param_groups`), not the one the config names."
            ),
            N_(
                "the learning rate in `optimizer.param_groups` is not `cfg.lr` times the schedule: read where the "
                "schedule is applied."
            ),
        ),
        debrief=N_("""\
**The bug.** `update_learning_rate` wrote the schedule's *factor* into the optimizer, `group["lr"] =
lr_factor(...)`, instead of `cfg.lr * lr_factor(...)`. During the warm-up the learning rate climbed to 1.0, ten
times the peak the config asks for, and `cfg.lr` was never read after the optimizer was built: changing it
changed nothing.

**Why the loss stops where it does.** The inputs are min-max scaled, so all of them are positive. One large SGD
step (with momentum) moves a hidden unit's weights and bias the same way for every input; when that makes its
pre-activation negative on every input, the unit outputs 0 and passes no gradient back, and nothing revives it.
Once every unit of the second layer is dead, the output is the last layer's bias, which learns the class shares:
the loss settles at $H(\\hat p) \\approx 1.243$, the entropy of the shares (not $\\ln 4$).

**The evidence.** `optimizer.param_groups[0]["lr"]` reads 1.0 at the end of the warm-up (step 10); by then
most of the second layer's ReLUs output 0 on every training input, and all of them by step 48, so the first
layers' gradients are exactly zero. The doctor, on the first three steps, warns that one step rewrote a large
part of the last layer's weight (`update-ratio-high`) and suggests a lower learning rate: right about the
symptom, but lowering `cfg.lr` changes nothing, because nothing reads it after the optimizer is built.

**The red herrings.** He initialisation, dropout, the class imbalance, `cfg.lr` itself (0.1 is a sound peak
for this model: the fixed script learns with it).

**The fix.** `self.cfg.lr * lr_factor(...)`, or a `LambdaLR(optimizer, lr_lambda)` that multiplies the
optimizer's own learning rate by the factor. When a schedule misbehaves, read the learning rate from
`optimizer.param_groups`, where the step reads it."""),
    ),
    3: Mystery(
        3,
        "tokens",
        fix=(
            (
                "        total = 0.0\n",
                "        total = 0.0\n        n_tokens = sum(int((t != IGNORE).sum()) for _, t in window)\n",
            ),
            ("ignore_index=IGNORE)\n", 'ignore_index=IGNORE, reduction="sum")\n'),
            (
                "            loss = loss / self.cfg.accum_steps  # average over the window's micro-batches\n",
                "            loss = loss / n_tokens  # the token mean over the whole window\n",
            ),
        ),
        ladder=(
            N_(
                "the accumulated run should follow the batch-32 run up to rounding (about 1e-6), and it differs from "
                "the first step: the two compute different gradients for the same 32 sequences."
            ),
            N_(
                "take one window: compare its accumulated gradient with the gradient of the same 32 sequences as one "
                "batch, and count the real tokens of each micro-batch."
            ),
            N_(
                "each micro-batch's loss is a mean over its own tokens: read how the loss is normalised before "
                "`backward()`."
            ),
        ),
        debrief=N_("""\
**The bug.** Each micro-batch's loss was `cross_entropy(..., ignore_index=IGNORE)`, a mean over *that
micro-batch's* real tokens, and dividing by `accum_steps` averaged the four means. A token then weighs
$1/(K n_k)$, where $n_k$ is the token count of its micro-batch, instead of $1/N$ with $N$ the tokens of the whole
window: a micro-batch of short sequences weighs as much as one of long sequences, so each token of a short
sequence counts several times more. The batch-32 run weighs every token by $1/N$. Several trainers shipped this
bug until 2024 (Hugging Face transformers fixed it in 4.46).

**The evidence.** The first window's accumulated gradient differs from the batch-32 gradient by 18 %, far beyond
rounding; its four micro-batches hold from 77 to 146 real tokens; the accumulated run's loss is higher from the
start, because the short sequences here are the noisy ones and they got the extra weight.

**The red herrings.** The padding (`ignore_index` leaves it out correctly), `loss / accum_steps` (right when every
micro-batch has the same weight), clipping after the window (right: it sees the whole window's gradient), the
cosine schedule stepping once per window.

**The fix.** Count the window's real tokens $N$ before the loop, sum the token losses (`reduction="sum"`) and
divide by $N$; the logged loss is then the window's token mean, as in the batch-32 run. With data parallelism,
$N$ is the count over all ranks (chapter 07)."""),
    ),
    4: Mystery(
        4,
        "rings",
        fix=(("return y.mul_(1.7159)  # in place: no second activation-sized tensor", "return y * 1.7159"),),
        ladder=(
            N_(
                "the loss falls for three epochs, then climbs far above ln 3 (the loss of a uniform guess): the "
                "updates push the wrong way. Check whether the gradients are right."
            ),
            N_(
                "compare the model's gradients on one batch with those of the same model built from plain torch ops "
                "(torch.tanh): `torch.autograd.gradcheck` tests a Function alone, but the bug may be in how it is used."
            ),
            N_(
                "the custom `Tanh` reads a tensor in backward that something changes after the forward: read what "
                "happens to its output."
            ),
        ),
        debrief=N_("""\
**The bug.** `ScaledTanh` scaled the output of the custom `Tanh` in place, `y.mul_(1.7159)`. `Tanh.forward` had
kept `y` as `ctx.y`, a plain attribute, so autograd did not know that backward would read it: the in-place
multiplication rewrote the tensor that backward uses, and backward computed $1 - (1.7159\\,y)^2$ instead of
$1 - y^2$. For $|y| > 0.58$ that is negative, so the gradient of every strongly active unit points the wrong
way and drives it further into saturation. Training works while few units saturate, then falls apart.

**The evidence.** `gradcheck` on `Tanh` alone passes; the model's gradients differ from those of the same
weights with `torch.tanh`, and their sign is wrong where the activations are large; `y._version` is 1 after the
forward. `ctx.save_for_backward(y)` would have turned the in-place write into the version-counter error of
chapter 04 instead of silent corruption.

**The red herrings.** The learning rate (a smaller one only delays the collapse, which is what makes it
tempting), the step decay, LeCun's constants.

**The fix.** Scale out of place, `return y * 1.7159`; and save what backward reads with
`ctx.save_for_backward(y)`, so a later in-place write raises instead of corrupting."""),
    ),
}
