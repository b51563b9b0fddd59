"""What the doctor can report: the documented code table, :class:`Finding` and :class:`Report`.

Each code has a default severity, a one-line meaning, a fix hint and its known
blind spots. :func:`code_table` shows the whole table in a notebook.

>>> f = Finding("missing-grad", "error", "fc.weight", "no gradient reached it")
>>> Report([f], steps=2, losses=[0.7, 0.7]).codes
{'missing-grad'}
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

from autogradlab.i18n import N_, _

SEVERITIES = ("error", "warning", "info")

# Thresholds for ‖Δθ‖/‖θ‖ of a weight matrix over one optimizer.step(). CS231n's notes
# ("Neural Networks Part 3", section "Ratio of weights:updates") give "somewhere around
# 1e-3" as a rough heuristic; the small models of this course run healthy at 1e-2 to
# 1e-1 (chapter 09 measures its MLP: median 0.026 at lr 0.5). The band is wide on
# purpose: outside [UPDATE_RATIO_LOW, UPDATE_RATIO_HIGH] a run either rewrites its
# weights every step or barely moves them.
UPDATE_RATIO_HIGH = 0.3
UPDATE_RATIO_LOW = 1e-5
# Ratios of tiny weights (a 3-input regression) swing widely in healthy runs: skip them.
UPDATE_RATIO_MIN_NUMEL = 16
# An update counts as undone when a write after optimizer.step() leaves less than this
# fraction of the step's change (‖θ_end − θ_before‖ ≤ UNDONE_FRACTION · ‖θ_after − θ_before‖).
UNDONE_FRACTION = 0.01
# A GradScaler still skipping at a scale below this is not calibrating: a true gradient would have
# to exceed fp16's 65504 / 256 ≈ 256 in some intermediate, while a backward that makes inf/NaN
# itself (sqrt, log or a division at 0) keeps skipping at any scale, 1 and below included.
SCALE_FLOOR = 2.0**8


# The values the code table's texts quote (its English is a template, translated, then filled with these).
_FIELDS = {"high": UPDATE_RATIO_HIGH, "low": UPDATE_RATIO_LOW, "numel": UPDATE_RATIO_MIN_NUMEL, "floor": SCALE_FLOOR}


@dataclass(frozen=True)
class Code:
    """One documented diagnosis: default severity, what it means, how to fix it, what it misses.

    The three texts are read in the learner's language (``autogradlab.i18n``), with the thresholds filled in.
    """

    severity: str
    meaning_text: str
    fix_text: str
    blind_spots_text: str

    @property
    def meaning(self) -> str:
        return _(self.meaning_text).format(**_FIELDS)

    @property
    def fix(self) -> str:
        return _(self.fix_text).format(**_FIELDS)

    @property
    def blind_spots(self) -> str:
        return _(self.blind_spots_text).format(**_FIELDS)


CODES: dict[str, Code] = {
    "step-raised": Code(
        "error",
        N_("the training step raised an exception; the doctor stopped there"),
        N_("read the message and the line quoted; fix that line, then diagnose again"),
        N_("later steps are not observed after the first exception"),
    ),
    "param-not-in-optimizer": Code(
        "error",
        N_(
            "a tensor that requires grad and receives a gradient (a model parameter, or an nn.Parameter/leaf "
            "found in the loss graph) is in no optimizer param group, so it never changes"
        ),
        N_(
            "register it (an nn.Parameter attribute, nn.ParameterList/ParameterDict instead of a Python list/dict) "
            "and build the optimizer from model.parameters() after the model is final"
        ),
        N_(
            "leaves of graphs that are neither backpropagated (backward()/scaler.scale(loss).backward()) nor returned "
            "(e.g. only torch.autograd.grad); a tensor outside the model that requires grad on purpose (an input you "
            "optimize) is reported as a warning"
        ),
    ),
    "frozen-param-in-optimizer": Code(
        "warning",
        N_("a parameter with requires_grad=False sits in the optimizer: it gets no gradient and never changes"),
        N_(
            "to train it set p.requires_grad_(True); if it is frozen on purpose build the optimizer from "
            "[p for p in model.parameters() if p.requires_grad]"
        ),
        N_("frozen tensors that are not in the optimizer are (correctly) ignored"),
    ),
    "missing-grad": Code(
        "error",
        N_(
            "a trainable parameter in the optimizer got no gradient in any observed step "
            "(its module is unused, or the path to the loss is cut by detach(), .data, torch.no_grad(), .item())"
        ),
        N_(
            "tap the path with tensor.register_hook and move backwards until the gradient disappears; "
            "remove the detach/no_grad there"
        ),
        N_("a parameter used only in some batches (e.g. a rarely routed expert) looks unused in few steps"),
    ),
    "nonfinite-grad": Code(
        "error",
        N_("inf or NaN in a gradient in a step that the optimizer applied"),
        N_(
            "run one step under torch.autograd.detect_anomaly() to find the op; check log/sqrt/division "
            "at 0, the learning rate, and the loss for inf/NaN"
        ),
        N_("inf/NaN in scaled gradients that a GradScaler skipped are reported as amp-step-skipped instead"),
    ),
    "grad-not-cleared": Code(
        "error",
        N_("a gradient left over from before an optimizer.step() was added to in the next step (missing zero_grad)"),
        N_("call optimizer.zero_grad() once per optimizer step (before backward or after step)"),
        N_(
            "needs at least two observed optimizer steps; a step that accumulates on purpose across "
            "optimizer.step() calls is reported too"
        ),
    ),
    "data-bypass": Code(
        "warning",
        N_(
            "a parameter's value changed outside optimizer.step() without its version counter moving: "
            "a write through .data, hidden from autograd"
        ),
        N_(
            "write under torch.no_grad() on the parameter itself (with torch.no_grad(): p.clamp_(-c, c)) "
            "or fold the constraint into the model"
        ),
        N_(
            "writes inside optimizer.step() are not checked (custom optimizers may use .data legitimately); "
            "a .data write in the same interval as a tracked in-place write is missed"
        ),
    ),
    "eval-mode-in-training": Code(
        "warning",
        N_("a Dropout/BatchNorm module ran in eval mode inside the training step, e.g. after validation"),
        N_("call model.train() at the start of the training step (and model.eval() only for validation)"),
        N_(
            "modules inside a completely frozen block are reported as info (eval mode there is often "
            "deliberate); other mode-dependent modules are not checked"
        ),
    ),
    "no-update": Code(
        "error",
        N_(
            "parameters with nonzero gradients did not change over an optimizer step, or optimizer.step() "
            "never ran (learning rate 0, a skipped step, the wrong optimizer)"
        ),
        N_(
            "check the param group's lr, that the step calls step() on this optimizer, "
            "and that the optimizer holds this model's parameters"
        ),
        N_("a step that only steps every K calls needs at least K batches to be observed"),
    ),
    "update-undone": Code(
        "error",
        N_(
            "optimizer.step() changed a parameter, but a write after the step (a clamp with a wrong bound, a reset, "
            "a reload of old weights) put it back to its value from before the step, in most observed steps"
        ),
        N_(
            "compare the parameter right after optimizer.step() (optimizer.register_step_post_hook) with its value at "
            "the end of your step, then read the write in between: is its bound or value what you meant?"
        ),
        N_(
            "an update undone only in part (a bound that still lets some values move) is not reported; single-number "
            "parameters are not checked (one pinned at a bound is often deliberate, e.g. a clamped temperature); a "
            "deliberate rollback of a bad step is reported too; needs at least two optimizer steps"
        ),
    ),
    "update-ratio-high": Code(
        "warning",
        N_(
            "a weight moved by more than {high:g} of its norm in one step "
            "(‖Δθ‖/‖θ‖; CS231n's rough heuristic is 1e-3, small models run healthy up to ~0.1)"
        ),
        N_("lower the learning rate, add warm-up or gradient clipping"),
        N_(
            "only weights with two or more dims and at least {numel} elements are checked "
            "(biases and norms start near 0, so their ratio is meaningless); a single legitimate spike is reported too"
        ),
    ),
    "update-ratio-low": Code(
        "warning",
        N_("a weight moved by less than {low:g} of its norm per step (median over the steps with a nonzero gradient)"),
        N_("raise the learning rate, check the lr schedule and any scaling of the loss"),
        N_(
            "only weights with two or more dims and enough elements are checked; a model at convergence also moves little"
        ),
    ),
    "amp-step-skipped": Code(
        "warning",
        N_(
            "the GradScaler skipped optimizer steps because scaled gradients held inf/NaN; skips while the scale backs "
            "off from its start, or right after it grew, with a finite loss, are its normal calibration (info)"
        ),
        N_(
            "every step skipped with a NaN/inf loss, or still skipped at a scale below the floor: find the inf/NaN in "
            "the inputs, forward or loss (detect_anomaly); still calibrating: observe more steps; skips at a scale "
            "that worked before: lower the learning rate or find the overflowing op"
        ),
        N_(
            "only a GradScaler passed as scaler= and used through scaler.step(optimizer) is observed; a backward that "
            "makes inf/NaN with a finite loss looks like calibration until the scale falls below {floor:g}"
        ),
    ),
    "clip-before-unscale": Code(
        "error",
        N_(
            "gradients were clipped while still multiplied by the GradScaler's scale S, so the clip threshold "
            "acts as max_norm / S: SGD's update shrinks by up to S; Adam's mostly cancels and shrinks through eps, "
            "more in larger models (the message says which optimizer it saw, and by how much)"
        ),
        N_("call scaler.unscale_(optimizer) before clip_grad_norm_/clip_grad_value_, then scaler.step(optimizer)"),
        N_(
            "only clipping through torch.nn.utils.clip_grad_norm_/clip_grad_value_ looked up at call time "
            "(not an alias imported earlier with `from ... import`) is observed; for Adam-like optimizers the size "
            "of the damage is estimated for a first Adam step on the gradients seen, not measured over training"
        ),
    ),
}

_ORDER = {code: i for i, code in enumerate(CODES)}
_COUNTED = {  # (one, several) findings of a severity, in the report's headline
    "error": (N_("{count} error"), N_("{count} errors")),
    "warning": (N_("{count} warning"), N_("{count} warnings")),
    "info": (N_("{count} info"), N_("{count} infos")),
}
_RANK = {s: i for i, s in enumerate(SEVERITIES)}


@dataclass(frozen=True)
class Finding:
    """One diagnosis: ``code`` (a key of :data:`CODES`), ``severity``, ``where`` it was seen, ``message``."""

    code: str
    severity: str
    where: str
    message: str

    def __post_init__(self) -> None:
        if self.code not in CODES:
            raise ValueError(f"unknown doctor code {self.code!r}; known codes: {', '.join(CODES)}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")

    @property
    def fix(self) -> str:
        return CODES[self.code].fix


def _sort_key(f: Finding) -> tuple:
    return (_RANK[f.severity], _ORDER[f.code], f.where)


@dataclass
class Report:
    """The doctor's findings for some training steps. Displays as a table with a fix hint per finding.

    >>> Report([], steps=3, losses=[0.9, 0.8, 0.7])
    Doctor: 3 steps observed, loss 0.9 → 0.7; no findings.
    """

    findings: list[Finding]
    steps: int = 0
    losses: list[float | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.findings = sorted(self.findings, key=_sort_key)

    @property
    def codes(self) -> set[str]:
        return {f.code for f in self.findings}

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def ok(self) -> bool:
        """True when there is no error and no warning (info findings are allowed)."""
        return not self.errors and not self.warnings

    def __getitem__(self, code: str) -> list[Finding]:
        """Findings with this code: ``report['missing-grad']``."""
        return [f for f in self.findings if f.code == code]

    def _headline(self) -> str:
        text = (_("Doctor: {count} step observed") if self.steps == 1 else _("Doctor: {count} steps observed")).format(
            count=self.steps
        )
        known = [x for x in self.losses if x is not None]
        if len(known) >= 2:
            text += _(", loss {first:.3g} → {last:.3g}").format(first=known[0], last=known[-1])
        elif len(known) == 1:
            text += _(", loss {first:.3g}").format(first=known[0])
        counts = [(len([f for f in self.findings if f.severity == s]), s) for s in SEVERITIES]
        parts = [_(_COUNTED[s][n != 1]).format(count=n) for n, s in counts if n]
        return text + (_("; {counts}.").format(counts=", ".join(parts)) if parts else _("; no findings."))

    def __repr__(self) -> str:
        lines = [self._headline()]
        for f in self.findings:
            lines.append(f"  {f.severity:<7} {f.code:<24} {f.where}")
            lines.append(f"          {f.message}")
            lines.append("          " + _("fix: {fix}").format(fix=f.fix))
        return "\n".join(lines)

    __str__ = __repr__

    def _repr_html_(self) -> str:
        head = f"<p><b>{html.escape(self._headline())}</b></p>"
        if not self.findings:
            return head
        colors = {"error": "#c0392b", "warning": "#b9770e", "info": "#2e86c1"}
        rows = "".join(
            "<tr>"
            f"<td style='color:{colors[f.severity]};font-weight:bold'>{f.severity}</td>"
            f"<td style='white-space:nowrap'><code>{html.escape(f.code)}</code></td>"
            f"<td style='text-align:left'>{html.escape(f.where)}</td>"
            f"<td style='text-align:left'>{html.escape(f.message)}"
            "<br>" + _("<i>fix:</i> {fix}").format(fix=html.escape(f.fix)) + "</td>"
            "</tr>"
            for f in self.findings
        )
        severity, code, where, what = _("severity"), _("code"), _("where"), _("what and how to fix")
        return (
            f"{head}<table><thead><tr><th>{severity}</th><th>{code}</th><th>{where}</th>"
            f"<th style='text-align:left'>{what}</th></tr></thead><tbody>{rows}</tbody></table>"
        )


class CodeTable:
    """The documented codes as a table (HTML in a notebook, text elsewhere)."""

    def __init__(self, blind_spots: bool = False) -> None:
        self.blind_spots = blind_spots

    def _rows(self) -> list[tuple[str, str, str]]:
        return [(code, c.severity, c.blind_spots if self.blind_spots else c.meaning) for code, c in CODES.items()]

    def __repr__(self) -> str:
        title = _("blind spot") if self.blind_spots else _("meaning")
        code, severity = _("code"), _("severity")
        lines = [f"{code:<26}{severity:<9}{title}"]
        lines += [f"{code:<26}{sev:<9}{text}" for code, sev, text in self._rows()]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        title = _("blind spots") if self.blind_spots else _("meaning")
        code, severity = _("code"), _("default severity")
        rows = "".join(
            f"<tr><td style='white-space:nowrap'><code>{code}</code></td><td>{sev}</td><td style='text-align:left'>{html.escape(text)}</td></tr>"
            for code, sev, text in self._rows()
        )
        return (
            f"<table><thead><tr><th>{code}</th><th>{severity}</th><th style='text-align:left'>{title}</th>"
            f"</tr></thead><tbody>{rows}</tbody></table>"
        )


def code_table(blind_spots: bool = False) -> CodeTable:
    """Every doctor code with its meaning (or, with ``blind_spots=True``, what it misses).

    >>> print(repr(code_table()).splitlines()[1].split()[0])
    step-raised
    """
    return CodeTable(blind_spots)
