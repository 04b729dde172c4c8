"""``troupe session events NAME`` (a session's event list, ``--follow`` to keep reading it)
and ``troupe user audit`` (changes of users and keys, admins); docs/events.md.

``--json`` prints one JSON record per line (per event), as the API answers them.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Annotated

import typer

from troupe.api.lifecycle import SESSION_FINAL
from troupe.client.cli.output import client
from troupe.client.cli.table import fmt_time, print_table

if TYPE_CHECKING:
    from troupe.api.events import AuditEntry, SessionEvent

session_app = typer.Typer()
user_app = typer.Typer()

Json = Annotated[bool, typer.Option("--json", help="one JSON record per line")]
Since = Annotated[
    str | None, typer.Option(help="only entries after this time (RFC 3339 or epoch seconds)")
]
#: Seconds between two reads of a followed list.
POLL = 1.0


def what(e: SessionEvent) -> str:
    """The event in words: the status reached and why, or the message."""
    if e.kind == "status":
        return f"{e.status}: {e.message}" if e.message else str(e.status)
    return e.message


def event_row(e: SessionEvent) -> list[object]:
    return [fmt_time(e.at), e.kind, e.kernel or "-", what(e), e.actor]


EVENT_COLUMNS = ["TIME", "KIND", "KERNEL", "WHAT", "BY"]


def _line(e: SessionEvent) -> str:
    time_, kind, kernel, text, actor = event_row(e)
    return f"{time_}  {kind:<12}  {kernel!s:<8}  {text}  (by {actor})"


def _print(events: list[SessionEvent], json_: bool) -> None:
    for e in events:
        sys.stdout.write((e.model_dump_json() if json_ else _line(e)) + "\n")
    sys.stdout.flush()


def ended(events: list[SessionEvent]) -> bool:
    """A final status closes a session's list."""
    return any(e.kind == "status" and e.status in SESSION_FINAL for e in events)


@session_app.command("events")
def session_events(
    name: Annotated[str, typer.Argument(help="session name or id")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="keep printing new events until it ends")
    ] = False,
    json_: Json = False,
    since: Since = None,
) -> None:
    """What happened to a session: status changes with their reason and who caused them,
    kernel exits, OOM kills, restarts, app opens, idle warnings."""
    with client() as c:
        if not follow:
            events = c.session_events(name, since=since)
            if json_:
                _print(events, True)
            else:
                print_table(EVENT_COLUMNS, [event_row(e) for e in events])
            return
        # The session once, first: its id (this session, even if the name is taken again) and
        # whether it is over already (its list, read after, then holds the final status; a list
        # from before the server kept events may lack it). From then on only the list is read,
        # the events after the last id seen: every status change writes its event in the same
        # transaction, so the final status comes in the list.
        info = c.get_session(name)
        events = c.session_events(info.id, since=since)
        _print(events, json_)
        last = events[-1].id if events else 0
        over = info.status.is_final or ended(events)
        try:
            while not over:
                time.sleep(POLL)
                events = c.session_events(info.id, after=last)
                _print(events, json_)
                last = events[-1].id if events else last
                over = ended(events)
        except KeyboardInterrupt:
            pass


def audit_row(a: AuditEntry) -> list[object]:
    details = ", ".join(f"{k}={v}" for k, v in a.details.items())
    return [fmt_time(a.at), a.actor, a.action, a.target, details or "-"]


@user_app.command("audit")
def audit(json_: Json = False, since: Since = None) -> None:
    """Changes of users and keys (admins): who created, deleted, revoked, rotated or limited
    whom, and when (the newest 500)."""
    with client() as c:
        entries = c.audit(since=since)
    if json_:
        for a in entries:
            sys.stdout.write(a.model_dump_json() + "\n")
        sys.stdout.flush()
        return
    print_table(["TIME", "BY", "ACTION", "USER", "DETAILS"], [audit_row(a) for a in entries])
