"""Checkers for chapter 12 (debugging lab, part 2): mysteries 2, 3 and 4.

The lab's machinery is chapter 10's (:mod:`autogradlab.checks.ch10`): :func:`note` records a hypothesis
and its evidence, :func:`doctor_view` opens after it, each fix is judged by behaviour against the
healthy reference (:func:`check_fix`), and :func:`debrief` explains the bug once its check passed.
"""

from __future__ import annotations

from autogradlab.checks.ch10 import LAB, check_fix, debrief, doctor_view, note


def check_mystery_2(script) -> None:
    """Check the repaired ``debug_lab/mystery_2.py``."""
    check_fix(2, script)


def check_mystery_3(script) -> None:
    """Check the repaired ``debug_lab/mystery_3.py``."""
    check_fix(3, script)


def check_mystery_4(script) -> None:
    """Check the repaired ``debug_lab/mystery_4.py``."""
    check_fix(4, script)


__all__ = ["LAB", "check_mystery_2", "check_mystery_3", "check_mystery_4", "debrief", "doctor_view", "note"]
