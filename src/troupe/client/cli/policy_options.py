"""``--max-restarts``, ``--no-restart-exit-codes`` and ``--success`` of ``troupe session
create`` (docs/policies.md), and what ``session info`` shows of a session's restarts. The
API's own rules (ranges, exit codes, what fits the session's type) are checked once, by
:class:`troupe.api.models.SessionCreate`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from troupe.api.models import SessionInfo

MaxRestartsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-restarts",
        help="restart the whole session up to N times when a kernel fails (default 0)",
        show_default=False,
    ),
]
NoRestartOpt = Annotated[
    str | None,
    typer.Option(
        "--no-restart-exit-codes",
        help="exit codes that end the session at once, with no restart, e.g. 1,2",
        show_default=False,
    ),
]
SuccessOpt = Annotated[
    str | None,
    typer.Option(
        "--success",
        help="batch: main (main1's command decides, default) or all (every kernel runs the"
        " command; all must exit 0)",
        show_default=False,
    ),
]


def exit_codes(text: str) -> list[int]:
    """``1,2`` -> ``[1, 2]``; :class:`ValueError` naming what is not a number."""
    codes = []
    for part in text.split(","):
        part = part.strip()
        if not part.lstrip("-").isdigit():
            raise ValueError(f"{part!r} is not an exit code")
        codes.append(int(part))
    return codes


def policy_fields(
    max_restarts: int | None, no_restart: str | None, success: str | None
) -> dict[str, Any]:
    """The request's fields these options give (those left out are not sent)."""
    from troupe.client.cli.output import fail

    out: dict[str, Any] = {}
    if max_restarts is not None:
        out["max_restarts"] = max_restarts
    if no_restart is not None:
        try:
            out["no_restart_exit_codes"] = exit_codes(no_restart)
        except ValueError as e:
            fail(f"no_restart_exit_codes: {e}", 2)
    if success is not None:
        out["success_policy"] = success
    return out


def restart_lines(s: SessionInfo) -> list[str]:
    """``session info``'s lines on restarts: the rules, then one line per restart (and the
    failed kernel's last log lines)."""
    if not s.max_restarts and not s.restarts and not s.no_restart_exit_codes:
        return []
    rules = f"restarts: {s.restarts} of at most {s.max_restarts}"
    if s.no_restart_exit_codes:
        rules += ", none after exit code " + ",".join(map(str, s.no_restart_exit_codes))
    lines = [rules]
    for r in s.restart_history:
        how = "out of memory" if r.oom_killed else f"exit code {r.exit_code}"
        lines.append(f"  attempt {r.attempt}: {r.kernel} failed ({how}) at {r.at}")
        lines += [f"    | {line.rstrip()}" for line in r.last_logs[-5:]]
    return lines
