"""A count with its unit, in words people read (why-pending reports, quota refusals, the web
UI): ``1 core``, ``0.5 cores``, ``2 GPUs``. Pure and import-free: the scheduler's reports
build many of these."""

from __future__ import annotations


def counted(n: float, unit: str) -> str:
    """``n`` (``1``, ``0.5``, ``2048``: no trailing ``.0``; a fraction to six significant
    digits, so amounts below 0.0001 or a fraction over a million show with an exponent) and
    ``unit``, singular where it shows as one (``0.9999999999`` shows as ``1``)."""
    shown = f"{n:g}" if isinstance(n, float) and not n.is_integer() else str(int(n))
    return f"{shown} {unit}" if shown == "1" else f"{shown} {unit}s"
