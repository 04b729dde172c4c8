"""The CLI's tables and the text of their cells: standard library only.

A table is columns padded to their widest cell, three spaces apart, under a header and a rule,
as ``docker ps`` prints them: lines are never cut or folded, whatever the terminal's width, so
a name stays whole on screen and ``grep``/``awk`` see every field. (Rich's tables, used before,
fitted the screen by squeezing columns: on an 80-column terminal ``session list`` showed the
NAME column empty.) Importing nothing heavy also keeps the short commands fast
(:mod:`troupe.client.cli.fastpath`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

#: Between two columns.
GAP = "   "
BOLD, RESET = "\x1b[1m", "\x1b[0m"


def table_lines(columns: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """The header, the rule and one line per row (trailing spaces trimmed)."""
    cells = [[cell_text(v) for v in row] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    header = GAP.join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()
    rule = "─" * (sum(widths) + len(GAP) * (len(widths) - 1))
    body = [GAP.join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return [header, rule, *body]


def print_table(
    columns: Sequence[str], rows: Iterable[Sequence[object]], out: TextIO | None = None
) -> None:
    """The table on stdout (or ``out``); the header in bold on a terminal."""
    out = out or sys.stdout
    header, *rest = table_lines(columns, rows)
    if out.isatty() and os.environ.get("TERM") != "dumb":
        header = BOLD + header + RESET
    out.write("\n".join([header, *rest]) + "\n")
    out.flush()


def cell_text(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return fmt_time(value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def fmt_time(dt: datetime | None) -> str:
    """Local time, seconds precision; naive times from the server are UTC."""
    if dt is None:
        return "-"
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def format_size(n: int) -> str:
    """Bytes as ``256m``, ``2g`` when a whole number of a unit (else the bytes): the same as
    :func:`troupe.api.models.format_size`, here so that tables need no pydantic (a unit test
    holds the two together)."""
    for unit, factor in (("g", 1024**3), ("m", 1024**2), ("k", 1024)):
        if n >= factor and n % factor == 0:
            return f"{n // factor}{unit}"
    return str(n)


def human_size(n: int) -> str:
    """``format_size`` when exact (``256m``), else one decimal (``187.3m``)."""
    exact = format_size(n)
    if not exact.isdigit() or n < 1024:
        return exact
    for unit, factor in (("t", 1024**4), ("g", 1024**3), ("m", 1024**2), ("k", 1024)):
        if n >= factor:
            return f"{n / factor:.1f}{unit}"
    return exact  # pragma: no cover


def fmt_timestamp(value: str) -> str:
    """An image's ``created``: Unix seconds or ISO 8601 text, as local time."""
    if value.isdigit():
        return fmt_time(datetime.fromtimestamp(int(value), UTC))
    try:
        return fmt_time(datetime.fromisoformat(value.replace("Z", "+00:00")[:32]))
    except ValueError:
        return value


def short_id(value: str | None, n: int = 12) -> str:
    """The first ``n`` characters of an id, without a ``sha256:`` prefix."""
    if not value:
        return "-"
    return value.removeprefix("sha256:")[:n]


#: ``troupe session list``: its columns and a row from the server's JSON of a session (the
#: full command and the fast path print the same).
SESSION_COLUMNS = ("NAME", "STATUS", "TYPE", "IMAGE", "SIZE", "MODE", "CPU", "MEM", "CREATED", "ID")


def session_row(s: dict[str, Any]) -> list[object]:
    return [
        s["name"],
        s["status"],
        s["type"],
        s["image"],
        int(s["cluster_size"]),
        s["cluster_mode"],
        float(s["resources"]["cpu"]),
        format_size(int(s["resources"]["mem"])),
        fmt_time(datetime.fromisoformat(s["created_at"])),
        short_id(s["id"], 8),
    ]
