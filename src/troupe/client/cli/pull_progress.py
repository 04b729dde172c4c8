"""The image pulls of a session being prepared, as a Rich progress bar per agent and image.

The manager shows them in ``status_info["pulling"]`` (agent, image, bytes done / total),
rewritten about once a second while PREPARING; :func:`follow_pulls` polls the session until
the pulls are over and returns it with ``--wait``'s deadline moved by the time it took: the
pulls are not counted (a pull has its own limit on the server).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from troupe.client.cli.output import err_console

if TYPE_CHECKING:
    from rich.status import Status

    from troupe.api.models import SessionInfo
    from troupe.client.sdk import Client

POLL_SECONDS = 0.5


def pulling(s: SessionInfo) -> list[dict[str, Any]]:
    """The session's pulls under way ([] when none)."""
    rows = s.status_info.get("pulling")
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def poll_seconds(s: SessionInfo) -> float:
    """How long ``--wait`` long-polls: while PENDING it wakes now and then to show why it
    still waits, while PREPARING to show the pulls once they begin."""
    from troupe.api.models import SessionStatus

    return {SessionStatus.PENDING: 10.0, SessionStatus.PREPARING: 1.0}.get(s.status, 300.0)


def pull_lines(rows: list[dict[str, Any]]) -> list[str]:
    """``IMAGE on AGENT: 12.0 MiB / 40.0 MiB`` per pull."""
    from troupe.client.cli.table import human_size

    return [
        f"{r.get('image')} on {r.get('agent')}: {human_size(int(r.get('done_bytes') or 0))}"
        f" / {human_size(int(r.get('total_bytes') or 0))}"
        for r in rows
    ]


def follow_pulls(
    c: Client, info: SessionInfo, spinner: Status | None, deadline: float
) -> tuple[SessionInfo, float]:
    """Shows the pulls until there are none left (or the session moved on); the spinner is
    paused meanwhile (one live display at a time)."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    from troupe.api.models import SessionStatus

    if spinner:
        spinner.stop()
    t0 = time.monotonic()
    tasks: dict[tuple[str, str], Any] = {}
    with Progress(
        TextColumn("pulling {task.description}"),
        BarColumn(),
        DownloadColumn(),
        console=Console(stderr=True, highlight=False),  # (a real one: Progress enters it)
        transient=not err_console.is_terminal,
    ) as bar:
        while info.status == SessionStatus.PREPARING and (rows := pulling(info)):
            for r in rows:
                key = (str(r.get("agent")), str(r.get("image")))
                if key not in tasks:
                    tasks[key] = bar.add_task(f"{key[1]} on {key[0]}", total=None)
                total = int(r.get("total_bytes") or 0) or None
                bar.update(tasks[key], completed=int(r.get("done_bytes") or 0), total=total)
            time.sleep(POLL_SECONDS)
            info = c.get_session(info.id)
        for task in tasks.values():  # over: each bar full
            t = bar.tasks[task]
            bar.update(task, completed=t.total or t.completed)
    took = time.monotonic() - t0
    if not err_console.is_terminal and tasks:
        err_console.print(f"pulled {len(tasks)} image(s) in {took:.1f} s")
    if spinner:
        spinner.start()
    return info, deadline + took
