"""Exercise checkers: ``from autogradlab.checks.ch00 import check_derivative``.

Shared parts live in :mod:`autogradlab.checks.core`; each chapter's checkers in
``chNN``. A checker prints one ``✓`` line or raises :class:`ExerciseError`.
"""

from autogradlab.checks.core import (
    Case,
    ExerciseError,
    call_learner,
    check_function,
    compare,
    passed,
    seeded,
)

__all__ = ["Case", "ExerciseError", "call_learner", "check_function", "compare", "passed", "seeded"]
