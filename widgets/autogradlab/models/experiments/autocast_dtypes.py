"""autocast: the dtype each common op returns under ``torch.autocast``, per device.

Autocast keeps one list of ops per device: ops that run in the 16-bit dtype
(matmuls, ``linear``, convolutions) and ops that run in fp32. The lists differ:
on CUDA softmax, layer_norm, exp and ``sum`` run in fp32, on the CPU they stay
in 16 bits and only losses and a few others go to fp32. Each op here is applied
to ``h = linear(x, w)``, the 16-bit output of a matmul, as in a model.

>>> from autogradlab.models.experiments.autocast_dtypes import run_autocast
>>> rows = {r["op"]: r for r in run_autocast("cpu").rows}
>>> rows["linear"]["bf16"], rows["cross_entropy"]["bf16"]
('torch.bfloat16', 'torch.float32')
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from autogradlab.models.experiments.common import as_record, experiment_device, markdown_table

# op name -> what it computes from (h, target class indices); h is linear(x, w) under autocast
OPS = {
    "linear": lambda h, t, x, w: F.linear(x, w),
    "conv1d": lambda h, t, x, w: F.conv1d(x.T.unsqueeze(0), w.unsqueeze(-1)),  # x as 16 channels of length 8
    "softmax": lambda h, t, x, w: torch.softmax(h, dim=-1),
    "log_softmax": lambda h, t, x, w: F.log_softmax(h, dim=-1),
    "layer_norm": lambda h, t, x, w: F.layer_norm(h, h.shape[-1:]),
    "exp": lambda h, t, x, w: h.exp(),
    "sum": lambda h, t, x, w: h.sum(),
    "mean": lambda h, t, x, w: h.mean(),
    "cross_entropy": lambda h, t, x, w: F.cross_entropy(h, t),
    "mse_loss": lambda h, t, x, w: F.mse_loss(h, torch.zeros_like(h)),
}


@dataclass
class AutocastResult:
    """Per op: the output dtype under bf16 and under fp16 autocast on ``device``."""

    device: str
    rows: list[dict] = field(default_factory=list)

    def table(self) -> str:
        return autocast_table(self)


def autocast_table(result) -> str:
    """Markdown table of an autocast result (live or loaded from JSON)."""
    rec = as_record(result)
    strip = lambda s: s.replace("torch.", "")  # noqa: E731
    rows = [[r["op"], strip(r["bf16"]), strip(r["fp16"])] for r in rec["rows"]]
    return markdown_table(["op", f"bf16 autocast on {rec['device']}", f"fp16 autocast on {rec['device']}"], rows)


def run_autocast(device="auto", preset: str = "auto", *, progress_bar: bool = False) -> AutocastResult:
    """Run every op of :data:`OPS` under bf16 and fp16 autocast on ``device``; record the output dtypes."""
    device = experiment_device(device)
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(8, 16, device=device, generator=gen)
    w = torch.randn(4, 16, device=device, generator=gen)
    target = torch.randint(0, 4, (8,), device=device, generator=gen)
    result = AutocastResult(device.type)
    for name, op in OPS.items():
        row = {"op": name}
        for label, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
            with torch.autocast(device_type=device.type, dtype=dtype):
                h = F.linear(x, w)
                row[label] = str(op(h, target, x, w).dtype)
        result.rows.append(row)
    return result
