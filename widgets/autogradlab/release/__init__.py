"""Build the student chapters/ from the solution notebooks in solutions/.

``python -m autogradlab.release`` writes chapters/; ``--check`` only compares and
exits 1 when chapters/ is stale. The per-notebook rules are in :mod:`.student`.
"""

from autogradlab.release.student import ReleaseError, student_notebook, to_text, validate

__all__ = ["ReleaseError", "student_notebook", "to_text", "validate"]
