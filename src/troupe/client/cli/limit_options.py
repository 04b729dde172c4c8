"""A session's clocks in the CLI (docs/policies.md): ``--time-limit``, ``--stop-grace`` and
``--idle-timeout`` of ``troupe session create``, ``troupe session set`` to change them, and
the lines ``troupe session info`` shows of them. Durations are passed on as typed (``90s``,
``2h``, ``1d``): the API's own rules check them, once.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from troupe.client.cli.output import App, JsonOpt, client, console, fail, print_json
from troupe.client.cli.session_exec import NameArg
from troupe.client.cli.table import fmt_time

if TYPE_CHECKING:
    from troupe.api.models import SessionInfo

app = App()

TimeLimitOpt = Annotated[
    str | None,
    typer.Option(
        "--time-limit",
        help="run at most this long from RUNNING, e.g. 90s, 2h, 1d; then SIGTERM to every"
        " kernel and, after --stop-grace, the end (default: the server's)",
        show_default=False,
    ),
]
StopGraceOpt = Annotated[
    str | None,
    typer.Option(
        "--stop-grace",
        help="time from the SIGTERM at the time limit to the end (default 10s)",
        show_default=False,
    ),
]
IdleTimeoutOpt = Annotated[
    str | None,
    typer.Option(
        "--idle-timeout",
        help="interactive: destroy after this long with nobody connected and the kernels"
        " quiet, e.g. 30m, 2h (default: the server's)",
        show_default=False,
    ),
]
_FIELDS = ("time_limit", "stop_grace", "idle_timeout")


def given(
    time_limit: str | None, stop_grace: str | None, idle_timeout: str | None
) -> dict[str, Any]:
    """The options given, by their API fields."""
    values = dict(zip(_FIELDS, (time_limit, stop_grace, idle_timeout), strict=True))
    return {k: v.strip() for k, v in values.items() if v is not None}


def info_fields(s: SessionInfo, now: datetime | None = None) -> list[tuple[str, Any]]:
    """``time limit`` and ``idle reclaim`` lines of ``troupe session info`` (none without)."""
    from troupe.api.models import SessionStatus
    from troupe.api.session_times import describe

    running = s.status == SessionStatus.RUNNING
    return list(describe(s, running, now or datetime.now(UTC), fmt_time))


@app.command("set")
def set_(
    name: NameArg,
    time_limit: TimeLimitOpt = None,
    stop_grace: StopGraceOpt = None,
    idle_timeout: IdleTimeoutOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Change a session's time limit, stop grace or idle timeout ('none': no limit)."""
    from rich.text import Text

    changes: dict[str, Any] = given(time_limit, stop_grace, idle_timeout)
    if not changes:
        fail("give --time-limit, --stop-grace or --idle-timeout", 2)
    changes = {k: None if v.lower() == "none" else v for k, v in changes.items()}
    with client() as c:
        s = c.set_session(name, changes)
    if json_:
        print_json(s)
        return
    console.print(Text(f"session {s.name} ({s.id}): {s.status.value}"))
    for key, value in info_fields(s) or [("clocks", "none")]:
        console.print(Text(f"{key}: {value}"))
