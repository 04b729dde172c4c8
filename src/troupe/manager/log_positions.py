"""Where a reader is in a session's logs: one position per kernel, carried in each server-sent
event's id so a reconnect resumes exactly (finding N7, docs/reliability.md).

A kernel's position is ``(at, run)``: ``at`` the engine timestamp of the last line it
delivered (nanoseconds since the epoch; a line without a timestamp takes its predecessor's,
``0`` before the first) and ``run`` how many lines of that kernel in a row had that ``at``.
Resuming skips each kernel's lines up to and including the first line at that position (or
up to the first line later than it, if that one is gone), so lines that arrived out of
timestamp order across kernels, or share a timestamp, are neither lost nor repeated. (Were a
kernel's own timestamps ever to go backwards, a resume could repeat some of its lines; it
never skips one it did not send.) ``run == 0`` means "everything at ``at`` or before" (what
``?since=`` asks).

An id is ``k:<base>:<e0>,<e1>,...`` with one entry per kernel of the view, in the session's
kernel order: empty (nothing delivered yet), or ``at - base`` in base 36 (signed) followed by
``*<run>`` unless ``run`` is 1; ``base`` is a time in the stream, in base 36. Ids are at most
:data:`MAX_ID` characters (a 64-kernel session needs about 64 x 10). Clients treat them as
opaque.
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from troupe.api.errors import Invalid

#: Longest event id accepted in ``Last-Event-ID`` (longer: 422).
MAX_ID = 4096
_ID = re.compile(r"k:([0-9a-z]{1,14}):([0-9a-z*,-]*)\Z")
_ENTRY = re.compile(r"(-?[0-9a-z]{1,14})(?:\*([0-9a-z]{1,14}))?\Z")
#: Docker's RFC 3339 timestamps in UTC (trailing zeros of the fraction are trimmed).
TIMESTAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)


class Position(NamedTuple):
    at: int
    run: int


Positions = list[Position | None]


@functools.lru_cache(maxsize=1024)
def _epoch_seconds(prefix: str) -> int | None:
    try:
        t = datetime.fromisoformat(prefix).replace(tzinfo=UTC)
    except ValueError:
        return None
    return (t - _EPOCH) // _SECOND


def nanos(ts: str) -> int | None:
    """``2026-11-27T10:00:00.5Z`` -> nanoseconds since the epoch; None if not such a stamp.
    (Compared as strings, ``...:00Z`` would sort after ``...:00.5Z``.)"""
    m = TIMESTAMP.fullmatch(ts)
    if m is None:
        return None
    seconds = _epoch_seconds(m.group(1))
    if seconds is None or seconds < 0:
        return None
    return seconds * 1_000_000_000 + int((m.group(2) or "").ljust(9, "0"))


def _b36(n: int) -> str:
    if n < 0:
        return "-" + _b36(-n)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if not n:
            return out


def entry(base: int, p: Position | None) -> str:
    """One kernel's part of an id."""
    if p is None:
        return ""
    return _b36(p.at - base) + ("" if p.run == 1 else "*" + _b36(p.run))


def decode(value: str, kernels: int) -> tuple[int, Positions]:
    """The base and positions of an id made by :class:`Cursor` for a view of ``kernels``
    kernels; :class:`Invalid` (``Last-Event-ID``) for anything else."""
    m = _ID.match(value) if len(value) <= MAX_ID else None
    entries = m.group(2).split(",") if m else []
    if m is None or len(entries) != kernels:
        raise Invalid.field_rule(
            "Last-Event-ID",
            f"not an event id of this view of the logs ({kernels} kernel(s)); reconnect"
            " without it to read from the start",
        )
    base = int(m.group(1), 36)
    out: Positions = []
    for text in entries:
        e = _ENTRY.match(text)
        if not text:
            out.append(None)
        elif e is None or base + int(e.group(1), 36) < 0:
            raise Invalid.field_rule("Last-Event-ID", f"malformed kernel position {text!r}")
        else:
            run = int(e.group(2), 36) if e.group(2) else 1
            out.append(Position(base + int(e.group(1), 36), run))
    return base, out


def start(last_event_id: str, since: str, kernels: int) -> Cursor:
    """Where a request starts: after ``Last-Event-ID`` if given (a bare timestamp, as ids of
    earlier servers were, counts as ``since``), else after the timestamp ``since``: only
    lines strictly later than it, in every kernel. :class:`Invalid` (422) for a malformed
    or oversized id or timestamp: a silent restart from the top would repeat lines."""
    field = "since"
    if last_event_id and not last_event_id.startswith("k:"):
        since, last_event_id, field = last_event_id[: MAX_ID + 1], "", "Last-Event-ID"
    if last_event_id:
        return Cursor(*decode(last_event_id, kernels))
    if not since:
        return Cursor(None, [None] * kernels)
    at = nanos(since)
    if at is None:
        raise Invalid.field_rule(
            field, "an RFC 3339 timestamp in UTC, e.g. 2026-11-27T10:00:00.123456789Z"
        )
    return Cursor(at, [Position(at, 0)] * kernels)


class Cursor:
    """The positions of a stream as its lines go out, and the id each event carries. The
    base is fixed for a stream (its first line's time, or the resumed id's), so a kernel's
    part of the id is re-encoded only when that kernel moves."""

    def __init__(self, base: int | None, positions: Positions) -> None:
        self.base = base
        self.positions = list(positions)
        self._entries = [entry(base or 0, p) for p in positions]

    def advance(self, kernel: int, at: int, run: int) -> str:
        """Records a line of ``kernel`` as delivered; returns the id to send with it."""
        if self.base is None:
            self.base = at
        p = self.positions[kernel] = Position(at, run)
        self._entries[kernel] = entry(self.base, p)
        return f"k:{_b36(self.base)}:{','.join(self._entries)}"
