"""Which device the course runs on, and a one-line banner saying so.

>>> from autogradlab.device import pick_device, banner
>>> pick_device("cpu")
device(type='cpu')
>>> banner().startswith("device: ")
True
"""

from __future__ import annotations

import platform
from functools import cache

import torch

CHOICES = ("auto", "cuda", "mps", "cpu")


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend and backend.is_available())


def available_devices() -> list[str]:
    """Device types usable here, best first, e.g. ``['cuda', 'cpu']``."""
    found = []
    if torch.cuda.is_available():
        found.append("cuda")
    if _mps_available():
        found.append("mps")
    found.append("cpu")
    return found


def pick_device(prefer: str | torch.device | None = "auto") -> torch.device:
    """Return the device to run on: CUDA, then Apple MPS, then the CPU.

    ``prefer`` may name one of ``auto``, ``cuda``, ``mps``, ``cpu``; asking for a
    device that is not here raises a ``ValueError`` that says what is.

    >>> pick_device("cpu").type
    'cpu'
    """
    if isinstance(prefer, torch.device):
        prefer = prefer.type
    choice = (prefer or "auto").lower()
    if choice not in CHOICES:
        raise ValueError(f"unknown device {prefer!r}: choose one of {', '.join(CHOICES)}")
    here = available_devices()
    if choice == "auto":
        return torch.device(here[0])
    if choice not in here:
        raise ValueError(f"device {choice!r} is not available here; available: {', '.join(here)}")
    return torch.device(choice)


def device_name(device: torch.device) -> str:
    """A human name for the device: the GPU model, or the CPU model and thread count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return f"Apple GPU (MPS) on {platform.machine()}"
    threads = torch.get_num_threads()
    return f"{_cpu_model()}, {threads} thread{'s' if threads != 1 else ''}"


@cache
def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


@cache
def bf16_autocast_supported(device_type: str = "cpu") -> bool:
    """Whether bf16 autocast really runs a matmul in bf16 on this device type.

    Measured, not looked up: we run a tiny matmul under autocast and check the
    result's dtype, because the flags differ between CPU, CUDA and MPS builds.
    """
    if device_type == "cuda" and not torch.cuda.is_bf16_supported():
        return False
    try:
        a = torch.ones(4, 4, device=device_type)
        with torch.autocast(device_type=device_type, dtype=torch.bfloat16):
            return (a @ a).dtype == torch.bfloat16
    except (RuntimeError, TypeError, ValueError):
        return False


def banner(device: torch.device | str | None = None) -> str:
    """One line for the top of a notebook: device, torch version, bf16 autocast.

    >>> "torch " + torch.__version__ in banner("cpu")
    True
    """
    dev = pick_device(device)
    bf16 = "yes" if bf16_autocast_supported(dev.type) else "no"
    return f"device: {dev.type} ({device_name(dev)}) · torch {torch.__version__} · bf16 autocast: {bf16}"
