"""Durations of the wire format: ``90s``, ``30m``, ``2h``, ``1d`` (or plain seconds) in, whole
seconds stored and sent, and people's words (``30 min``) out.

The API takes seconds or such a string (like sizes, :mod:`troupe.api.values`); the CLI passes
what the user typed, so both refuse a bad duration with the same message.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator

_PART = re.compile(r"(\d+)\s*([smhd]?)", re.IGNORECASE)
_WHOLE = re.compile(r"^\s*(?:\d+\s*[smhd]?\s*)+$", re.IGNORECASE)
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
RULE = "must be a duration such as 90s, 30m, 2h, 1d or 1h30m (or whole seconds)"

#: The longest duration taken anywhere (a year): more is a typo, not a plan.
MAX_SECONDS = 366 * 86400


def parse_duration(value: object) -> int:
    """Whole seconds from an int or a string such as ``90s``, ``2h``, ``1d``, ``1h30m``;
    :class:`ValueError` otherwise (a bool, a fraction, a negative number, words)."""
    if isinstance(value, bool):
        raise ValueError(RULE)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _WHOLE.match(value):
        total = sum(int(n) * _UNITS[u.lower()] for n, u in _PART.findall(value))
        return min(total, 10 * MAX_SECONDS)  # (10x: still refused by the field's bound)
    raise ValueError(RULE)


def _checked(value: object) -> object:
    return None if value is None else parse_duration(value)


#: Seconds in the API: an int, or a string :func:`parse_duration` takes.
Duration = Annotated[int, BeforeValidator(_checked)]


def format_duration(seconds: float) -> str:
    """``45 s``, ``30 min``, ``2 h``, ``1 h 30 min``, ``3 d 4 h``: the two largest units,
    rounded down (what "idle for 12 min" and the end reasons show)."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h} h" + (f" {m} min" if m else "")
    d, h = divmod(s // 3600, 24)
    return f"{d} d" + (f" {h} h" if h else "")
