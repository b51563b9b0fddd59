"""How the course writes sizes: one byte formatter, binary units (KiB, MiB, GiB), everywhere.

Binary units are what PyTorch's memory tools and ``nvidia-smi`` report, and the
IEC names (KiB = 1,024 B) leave no doubt which convention a number uses.

>>> format_bytes(512), format_bytes(1536), format_bytes(3 * 2**20), format_bytes(5 * 2**30)
('512 B', '1.5 KiB', '3 MiB', '5 GiB')
>>> format_bytes(1010 * 2**20), format_bytes(1023.9 * 2**20), format_bytes(2**40)
('1010 MiB', '1024 MiB', '1024 GiB')
"""

from __future__ import annotations

_UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def format_bytes(n: int | float) -> str:
    """A byte count as a short string with three significant digits, e.g. ``'1.5 KiB'``."""
    n = int(n)
    for unit, size in _UNITS:
        if abs(n) >= size:
            value = n / size
            # three significant digits, but never exponent notation for 1,000-1,023 of a unit
            return f"{value:.0f} {unit}" if abs(value) >= 999.5 else f"{value:.3g} {unit}"
    return f"{n} B"
