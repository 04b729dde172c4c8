"""A session's clocks on the wire: its time limit and its idle reclaim (docs/policies.md).

:class:`TimesCreate` holds the fields of a create request (a base of
:class:`~troupe.api.models.SessionCreate`), :class:`TimesInfo` what a session shows of them
(a base of :class:`~troupe.api.models.SessionInfo`), :class:`SessionUpdate` what
``PATCH /v1/sessions/{ref}`` changes. Durations are seconds, or strings such as ``2h``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from troupe.api.durations import MAX_SECONDS, Duration, format_duration

#: Seconds between the SIGTERM at the time limit and the end, unless a session says.
STOP_GRACE = 10
MAX_STOP_GRACE = 3600
#: The shortest idle timeout: a few of the agents' samples (every 5 s) must fit in it.
MIN_IDLE_TIMEOUT = 10


def _time_limit() -> Any:
    return Field(
        None,
        ge=1,
        le=MAX_SECONDS,
        description="seconds (or 90s, 2h, 1d) the session may run, counted from RUNNING; then"
        " SIGTERM to every kernel's processes and, after stop_grace, the end. None: the"
        " server's default",
    )


def _idle_timeout() -> Any:
    return Field(
        None,
        ge=MIN_IDLE_TIMEOUT,
        le=MAX_SECONDS,
        description="interactive sessions: destroyed after this many seconds (or 30m, 2h)"
        " with nobody connected and every kernel below the server's CPU and GPU thresholds."
        " None: the server's default",
    )


def _stop_grace() -> Any:
    return Field(
        None,
        ge=0,
        le=MAX_STOP_GRACE,
        description=f"seconds from the SIGTERM at the time limit to the end (default {STOP_GRACE})",
    )


def _no_idle_on_batch(kind: object, idle_timeout: int | None) -> None:
    if idle_timeout is not None and kind == "batch":
        raise ValueError("idle_timeout: only interactive sessions have an idle timeout")


class TimesCreate(BaseModel):
    """The clocks a new session asks for (checked against the owner's maxima on admission)."""

    time_limit: Duration | None = _time_limit()
    stop_grace: Duration | None = _stop_grace()
    idle_timeout: Duration | None = _idle_timeout()

    @model_validator(mode="after")
    def _idle_interactive(self) -> TimesCreate:
        _no_idle_on_batch(getattr(self, "type", None), self.idle_timeout)
        return self


class SessionUpdate(BaseModel):
    """``PATCH /v1/sessions/{ref}``: a key given changes it (null: no limit), a key left out
    keeps it. The owner's maxima bound the new values as they bound a new session's."""

    model_config = ConfigDict(extra="forbid")

    time_limit: Duration | None = _time_limit()
    stop_grace: Duration | None = _stop_grace()
    idle_timeout: Duration | None = _idle_timeout()

    @model_validator(mode="after")
    def _something(self) -> SessionUpdate:
        if not self.model_fields_set:
            raise ValueError("give time_limit, stop_grace or idle_timeout")
        if "stop_grace" in self.model_fields_set and self.stop_grace is None:
            raise ValueError("stop_grace: a number of seconds (0 to stop at once)")
        return self


class TimesInfo(BaseModel):
    """What a session shows of its clocks; times are UTC."""

    time_limit: int | None = Field(None, description="seconds it may run from RUNNING")
    stop_grace: int = Field(STOP_GRACE, description="seconds from the SIGTERM to the end")
    idle_timeout: int | None = Field(None, description="idle seconds before it is destroyed")
    deadline: datetime | None = Field(
        None, description="when the time limit is reached (started_at + time_limit)"
    )
    idle_since: datetime | None = Field(
        None, description="since when nobody is connected and its kernels are quiet (None: busy)"
    )
    idle_deadline: datetime | None = Field(
        None, description="when it is destroyed unless it is used (idle_since + idle_timeout)"
    )


def deadline(started_at: datetime | None, time_limit: int | None) -> datetime | None:
    """When the time limit is reached (None: no limit, or not started)."""
    if started_at is None or time_limit is None:
        return None
    return started_at + timedelta(seconds=time_limit)


def idle_deadline(idle_since: datetime | None, idle_timeout: int | None) -> datetime | None:
    """When an idle session is destroyed unless it is used (None: not idle, or no timeout)."""
    if idle_since is None or idle_timeout is None:
        return None
    return idle_since + timedelta(seconds=idle_timeout)


def _in(at: datetime, now: datetime) -> str:
    left = (at - now).total_seconds()
    return f"in {format_duration(left)}" if left > 0 else "now"


def describe(
    t: TimesInfo, running: bool, now: datetime, when: Callable[[datetime], str]
) -> list[tuple[str, str]]:
    """People's lines of a session's clocks (CLI ``session info``, the web UI's session
    page): ``("idle reclaim", "idle for 12 min, ends in 18 min (after 30 min idle)")``;
    ``when`` writes a time. None without clocks."""
    out: list[tuple[str, str]] = []
    if t.time_limit is not None:
        text = f"{format_duration(t.time_limit)} (stop grace {format_duration(t.stop_grace)})"
        if running and t.deadline is not None:
            text += f", reached {when(t.deadline)}, {_in(t.deadline, now)}"
        out.append(("time limit", text))
    if t.idle_timeout is not None:
        text = f"after {format_duration(t.idle_timeout)} idle"
        if running and t.idle_since is not None and t.idle_deadline is not None:
            idle = format_duration((now - t.idle_since).total_seconds())
            text = f"idle for {idle}, ends {_in(t.idle_deadline, now)} ({text})"
        elif running:
            text = f"in use ({text})"
        out.append(("idle reclaim", text))
    return out
