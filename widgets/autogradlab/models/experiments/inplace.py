"""inplace: the version-counter error, reproduced on the device, and its out-of-place fix.

Autograd saves some tensors for backward and remembers each one's version
(``t._version``, +1 on every in-place op). If an in-place op changes a saved
tensor before backward, backward refuses to use it and raises.

>>> from autogradlab.models.experiments.inplace import run_inplace
>>> [case["raised"] for case in run_inplace("cpu").cases]
[True, True, False]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from autogradlab.models.experiments.common import as_record, experiment_device, markdown_table
from autogradlab.torch_internals import version


@dataclass
class InplaceResult:
    """Per case: did backward raise, the saved vs current version, and does the fix match float64."""

    device: str
    cases: list[dict] = field(default_factory=list)

    def table(self) -> str:
        return inplace_table(self)


def inplace_table(result) -> str:
    rec = as_record(result)
    rows = [
        [c["name"], c["raised"], c["version_when_saved"], c["version_at_backward"], c["fix_matches_float64"]]
        for c in rec["cases"]
    ]
    return markdown_table(
        ["case", "backward raised", "version when saved", "version at backward", "fix matches float64"], rows
    )


def _add_to_saved(x, w1, w2):
    a = torch.relu(x @ w1)  # relu saves its output a; a @ w2 saves a too
    out = a @ w2
    saved_version = version(a)
    a.add_(1.0)
    return out, a, saved_version


def _add_fixed(x, w1, w2):
    a = torch.relu(x @ w1)
    out = a @ w2
    saved_version = version(a)
    a = a + 1.0  # a new tensor: the saved one is untouched
    return out, a, saved_version


def _relu_on_sigmoid(x, w1, w2):
    s = torch.sigmoid(x @ w1)  # sigmoid saves its output s
    saved_version = version(s)
    s.relu_()  # values are all positive, so unchanged; the version still moves
    return s @ w2, s, saved_version


def _relu_fixed(x, w1, w2):
    s = torch.sigmoid(x @ w1)
    saved_version = version(s)
    s = torch.relu(s)
    return s @ w2, s, saved_version


def _relu_on_matmul_output(x, w1, w2):
    h = x @ w1  # mm saves x and w1, not h: changing h in place is safe
    h.relu_()  # relu_ saves its result, h at version 1, and h @ w2 saves h at version 1
    return h @ w2, h, version(h)


CASES = [
    (
        "add_ on relu's output, saved by relu and by matmul",
        "a = relu(x @ w1); out = a @ w2; a.add_(1)",
        _add_to_saved,
        _add_fixed,
    ),
    (
        "relu_ on sigmoid's output (values unchanged)",
        "s = sigmoid(x @ w1); s.relu_(); out = s @ w2",
        _relu_on_sigmoid,
        _relu_fixed,
    ),
    (
        "relu_ on a matmul output nothing saved",
        "h = x @ w1; h.relu_(); out = h @ w2",
        _relu_on_matmul_output,
        _relu_on_matmul_output,
    ),
]


def _grads(fn, x, w1, w2):
    w1 = w1.detach().requires_grad_(True)
    w2 = w2.detach().requires_grad_(True)
    out, _, _ = fn(x, w1, w2)
    return torch.autograd.grad(out.sum(), (w1, w2))


def run_inplace(device="auto", preset: str = "auto", *, progress_bar: bool = False) -> InplaceResult:
    """Run each case's backward, record the error (if any), then check the fix against float64."""
    device = experiment_device(device)
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(6, 5, device=device, generator=gen)
    w1 = torch.randn(5, 4, device=device, generator=gen)
    w2 = torch.randn(4, 3, device=device, generator=gen)
    result = InplaceResult(device.type)
    for name, code, broken, fixed in CASES:
        a1 = w1.clone().requires_grad_(True)
        a2 = w2.clone().requires_grad_(True)
        out, changed, saved_version = broken(x, a1, a2)
        case = {
            "name": name,
            "code": code,
            "version_when_saved": int(saved_version),
            "version_at_backward": int(version(changed)),
            "raised": False,
            "error_type": None,
            "message": None,
        }
        try:
            out.sum().backward()
        except RuntimeError as exc:
            first = str(exc).split("\n")[0]
            case.update(raised=True, error_type=type(exc).__name__, message=first)
        fix = _grads(fixed, x, w1, w2)
        ref = _grads(fixed, x.double(), w1.double(), w2.double())
        case["fix_matches_float64"] = all(torch.allclose(a.double(), b, rtol=1e-5, atol=1e-6) for a, b in zip(fix, ref))
        result.cases.append(case)
    return result
