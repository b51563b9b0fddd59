"""The learner's debugging tools from earlier chapters, run on a compiled function.

>>> import torch
>>> x = torch.tensor([-1.0, 4.0], requires_grad=True)
>>> anomaly_report(lambda: torch.where(x > 0, x.sqrt(), 0.0).sum())
"RuntimeError: Function 'SqrtBackward0' returned nan values in its 0th output."
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from autogradlab.models.compiled.record import quiet


def anomaly_report(loss_fn: Callable[[], torch.Tensor]) -> str:
    """Run ``loss_fn().backward()`` under anomaly detection; return what it raised (first line), or 'no error'.

    Anomaly mode also prints the forward call's traceback as a warning, with file paths that change
    from run to run: held back here, the error names the node.
    """
    with quiet():
        try:
            with torch.autograd.detect_anomaly(check_nan=True):
                loss_fn().backward()
        except RuntimeError as exc:
            return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
    return "no error"
