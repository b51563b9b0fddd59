"""Exercise checkers: ``from autogradlab.checks.ch00 import check_derivative``.

The kernel lives in :mod:`autogradlab.checks.core` (how a checker calls the learner's code,
compares and explains); each chapter's checkers in ``chNN``. A checker prints one ``✓`` line
or raises :class:`ExerciseError`.
"""

from autogradlab.checks.core import (
    BY_HAND,
    Case,
    ExerciseError,
    LearnerCall,
    Mistake,
    OffLimits,
    check_function,
    compare,
    passed,
    seeded,
)

__all__ = [
    "BY_HAND",
    "Case",
    "ExerciseError",
    "LearnerCall",
    "Mistake",
    "OffLimits",
    "check_function",
    "compare",
    "passed",
    "seeded",
]
