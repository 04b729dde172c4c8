"""``troupe session create --wait``: follow a new session until it runs (interactive) or ends
(batch), showing each status change on stderr."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from troupe.client.cli.output import client, err_console, fail

if TYPE_CHECKING:
    from rich.status import Status

    from troupe.api.models import SessionInfo


def _progress(s: SessionInfo) -> None:
    from rich.text import Text

    from troupe.client.cli.status_text import status_text

    err_console.print(Text(f"{time.strftime('%H:%M:%S')} {status_text(s)}"))


def wait_started(info: SessionInfo, timeout: float) -> SessionInfo:
    """Long-polls status changes until the session runs (interactive) or ends (batch)."""
    from troupe.api.models import SessionStatus
    from troupe.api.models import SessionType as Type
    from troupe.client.cli import pull_progress as pulls
    from troupe.client.cli.status_text import status_text

    batch = info.type == Type.BATCH

    def done(s: SessionInfo) -> bool:
        return s.status.is_final or (not batch and s.status == SessionStatus.RUNNING)

    deadline = time.monotonic() + timeout
    spinner: Status | None = None
    if err_console.is_terminal:
        spinner = err_console.status(status_text(info))
        spinner.start()
    _progress(info)
    try:
        with client() as c:
            while not done(info):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if spinner:
                        spinner.stop()
                    fail(
                        f"session {info.name!r} is still {info.status.value} after "
                        f"{timeout:g} s; it keeps going (see `troupe session info "
                        f"{info.name}`, or destroy it)"
                    )
                if pulls.pulling(info):  # (not counted in the time-out: an own limit)
                    info, deadline = pulls.follow_pulls(c, info, spinner, deadline)
                    continue
                new = c.wait_session(
                    info.id,
                    until="change",
                    since=info.status.value,
                    timeout=max(0.1, min(remaining, pulls.poll_seconds(info))),
                )
                if status_text(new) != status_text(info):
                    _progress(new)
                info = new
                if spinner:
                    spinner.update(status_text(info))
    except KeyboardInterrupt:
        if spinner:
            spinner.stop()
        fail(f"interrupted; session {info.name!r} ({info.status.value}) was left as it is", 130)
    finally:
        if spinner:
            spinner.stop()
    return info
