"""Chapter 12 checkers: mysteries 2, 3 and 4. For each, correct fixes written in different ways pass; the
unchanged script, symptom-chasing changes and partial fixes are rejected with a mistake id, and a first
attempt gets no hint that could name the bug. Tests read the errors' fields, never their text."""

import re

import pytest

from autogradlab.checks.ch10 import LAB
from autogradlab.checks.ch12 import check_mystery_2, check_mystery_3, check_mystery_4
from autogradlab.checks.core import ExerciseError
from autogradlab.models.mysteries import fixed_source, source

CHECKS = {2: check_mystery_2, 3: check_mystery_3, 4: check_mystery_4}


@pytest.fixture(autouse=True)
def fresh_lab():
    LAB.clear()
    yield
    LAB.clear()


def script(tmp_path, number, replacements, base="shipped"):
    text = source(number) if base == "shipped" else fixed_source(number)
    for old, new in replacements:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = tmp_path / f"mystery_{number}.py"
    path.write_text(text)
    return path


BUG_2 = "lr = lr_factor(self.step_count, self.cfg, self.total_steps)"
BUG_3 = "            loss = loss / self.cfg.accum_steps  # average over the window's micro-batches\n"
LOSS_3 = "ignore_index=IGNORE)\n"
COUNT_3 = (
    "        total = 0.0\n",
    "        total = 0.0\n        count = sum(int(t.ne(IGNORE).sum()) for _, t in window)\n",
)
BUG_4 = "return y.mul_(1.7159)  # in place: no second activation-sized tensor"

FIXES = {
    "2 reference": (2, []),
    "2 factor times lr": (2, [(BUG_2, "lr = lr_factor(self.step_count, self.cfg, self.total_steps) * self.cfg.lr")]),
    "2 LambdaLR": (
        2,
        [
            ("        self.total_steps = cfg.epochs", "        self.total_steps = cfg.epochs"),
            (
                "        self.step_count = 0\n\n    def epoch_batches",
                "        self.step_count = 0\n        self.schedule = torch.optim.lr_scheduler.LambdaLR(\n"
                "            self.optimizer, lambda step: lr_factor(step, cfg, self.total_steps)\n        )\n\n"
                "    def epoch_batches",
            ),
            ("        self.update_learning_rate()\n", ""),
            ("        self.optimizer.step()\n", "        self.optimizer.step()\n        self.schedule.step()\n"),
        ],
    ),
    "3 reference": (3, []),
    "3 weighted means": (
        3,
        [COUNT_3, (BUG_3, "            loss = loss * int(targets.ne(IGNORE).sum()) / count\n")],
    ),
    "4 reference": (4, []),
    "4 clone": (4, [(BUG_4, "return y.clone().mul_(1.7159)")]),
    "4 saved for backward": (
        4,
        [
            ("        ctx.y = y\n", "        ctx.save_for_backward(y)\n"),
            (
                "return grad_output * (1 - ctx.y * ctx.y)",
                "(y,) = ctx.saved_tensors\n        return grad_output * (1 - y * y)",
            ),
            (BUG_4, "return 1.7159 * y"),
        ],
    ),
    "4 plain torch.tanh": (
        4,
        [("y = Tanh.apply(x * (2 / 3))", "y = torch.tanh(x * (2 / 3))"), (BUG_4, "return y * 1.7159")],
    ),
}


@pytest.mark.parametrize("case", list(FIXES))
def test_correct_fixes_pass(tmp_path, case, capsys):
    number, replacements = FIXES[case]
    base = "fixed" if case.endswith("reference") else "shipped"
    CHECKS[number](script(tmp_path, number, replacements, base))
    assert capsys.readouterr().out.startswith(f"✓ mystery {number}")


WRONG = {
    # mystery 2: the schedule's factor is the learning rate
    "2 unchanged": (2, [], "unchanged", "unchanged"),
    "2 lower cfg.lr": (2, [("    lr: float = 0.1", "    lr: float = 0.01")], "unchanged", "unchanged"),
    "2 halve the factor": (
        2,
        [(BUG_2, "lr = 0.5 * lr_factor(self.step_count, self.cfg, self.total_steps)")],
        "not-fixed",
        "learning-rate",
    ),
    "2 longer warm-up": (
        2,
        [("    warmup_steps: int = 10", "    warmup_steps: int = 40")],
        "not-fixed",
        "learning-rate",
    ),
    "2 clipping": (
        2,
        [
            (
                "        loss.backward()\n",
                "        loss.backward()\n        nn.utils.clip_grad_norm_(self.model.parameters(), 0.1)\n",
            )
        ],
        "not-fixed",
        "smaller-gradients",
    ),
    "2 leaky relu": (
        2,
        [
            (
                "            nn.ReLU(),\n            nn.Dropout(cfg.dropout),\n            nn.Linear(cfg.hidden, cfg.hidden)",
                "            nn.LeakyReLU(0.1),\n            nn.Dropout(cfg.dropout),\n            nn.Linear(cfg.hidden, cfg.hidden)",
            )
        ],
        "changed-elsewhere",
        "model",
    ),
    "2 adam": (
        2,
        [
            (
                "self.optimizer = torch.optim.SGD(\n            self.model.parameters(), lr=cfg.lr, momentum=cfg.momentum, "
                "nesterov=True, weight_decay=cfg.weight_decay\n        )",
                "self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr)",
            )
        ],
        "changed-elsewhere",
        "optimizer",
    ),
    # mystery 3: token means per micro-batch
    "3 unchanged": (3, [], "unchanged", "unchanged"),
    "3 sum over accum_steps": (
        3,
        [(LOSS_3, 'ignore_index=IGNORE, reduction="sum")\n')],
        "not-fixed",
        "larger-gradients",
    ),
    "3 padded count": (
        3,
        [
            ("        total = 0.0\n", "        total = 0.0\n        count = sum(t.numel() for _, t in window)\n"),
            (LOSS_3, 'ignore_index=IGNORE, reduction="sum")\n'),
            (BUG_3, "            loss = loss / count\n"),
        ],
        "not-fixed",
        "smaller-gradients",
    ),
    "3 count per micro-batch": (
        3,
        [
            (LOSS_3, 'ignore_index=IGNORE, reduction="sum")\n'),
            (BUG_3, "            loss = loss / int(targets.ne(IGNORE).sum()) / self.cfg.accum_steps\n"),
        ],
        "unchanged",
        "unchanged",
    ),
    "3 one batch of 32": (
        3,
        [
            ("    micro_batch: int = 8", "    micro_batch: int = 32"),
            ("    accum_steps: int = 4", "    accum_steps: int = 1"),
        ],
        "changed-elsewhere",
        "data",
    ),
    "3 higher lr": (3, [("    lr: float = 3e-3", "    lr: float = 1e-2")], "symptom-chasing", "learning-rate"),
    # mystery 4: an in-place write to what a custom Function's backward reads
    "4 unchanged": (4, [], "unchanged", "unchanged"),
    "4 lower lr": (4, [("    lr: float = 1e-2", "    lr: float = 1e-3")], "symptom-chasing", "learning-rate"),
    "4 save_for_backward only": (
        4,
        [
            ("        ctx.y = y\n", "        ctx.save_for_backward(y)\n"),
            (
                "return grad_output * (1 - ctx.y * ctx.y)",
                "(y,) = ctx.saved_tensors\n        return grad_output * (1 - y * y)",
            ),
        ],
        "raised",
        "stale",
    ),
    "4 clipping": (
        4,
        [
            (
                "        loss.backward()\n",
                "        loss.backward()\n        nn.utils.clip_grad_norm_(self.model.parameters(), 0.05)\n",
            )
        ],
        "not-fixed",
        "smaller-gradients",
    ),
    "4 sgd": (
        4,
        [
            (
                "torch.optim.Adam(self.model.parameters(), lr=cfg.lr)",
                "torch.optim.SGD(self.model.parameters(), lr=cfg.lr, momentum=0.9)",
            )
        ],
        "changed-elsewhere",
        "optimizer",
    ),
    "4 plain tanh, still in place": (
        4,
        [("y = Tanh.apply(x * (2 / 3))", "y = torch.tanh(x * (2 / 3))")],
        "raised",
        "stale",
    ),
}


@pytest.mark.parametrize("case", list(WRONG))
def test_wrong_fixes_are_rejected_without_naming_the_bug(tmp_path, case):
    number, replacements, kind, mistake = WRONG[case]
    with pytest.raises(ExerciseError) as info:
        CHECKS[number](script(tmp_path, number, replacements))
    error = info.value
    assert (error.kind, error.mistake) == (kind, mistake)
    assert error.kind == "raised" or error.measured["hint_level"] == 0


def test_a_rejected_fix_speaks_chinese_when_asked(tmp_path, monkeypatch):
    """Under AUTOGRADLAB_LANG=zh the lab's summary and hint are Chinese; kind and mistake stay."""
    monkeypatch.setenv("AUTOGRADLAB_LANG", "zh")
    number, replacements, kind, mistake = WRONG["4 sgd"]
    with pytest.raises(ExerciseError) as info:
        CHECKS[number](script(tmp_path, number, replacements))
    error, chinese = info.value, re.compile("[\u4e00-\u9fff]")
    assert (error.kind, error.mistake) == (kind, mistake), str(error)
    assert chinese.search(error.summary) and chinese.search(str(error).splitlines()[-1]), str(error)  # the hint line
