"""A session's clocks (docs/policies.md): what it gets when created or changed, bounded by its
owner's maxima, and how it ends when one runs out. Pure but for :func:`change` (the write of
``PATCH /v1/sessions/{ref}``): the reaper (:mod:`troupe.manager.reaper`) and the exits step
call these with stored values.

Every deadline derives from stored times (``started_at``, ``idle_since``) and durations, so a
restarted manager finds the same deadlines.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.attributes import flag_modified

from troupe.api.durations import format_duration
from troupe.api.errors import Invalid, NotRunning, QuotaExceeded
from troupe.api.lifecycle import KernelStatus, SessionStatus
from troupe.api.models import SessionType
from troupe.api.session_times import STOP_GRACE, deadline
from troupe.api.users import Limits
from troupe.manager.config import ServerConfig
from troupe.manager.life.context import Life, load
from troupe.manager.store.models import Session

#: The reason of a session ended by its time limit, and a batch session's exit code then
#: (GNU timeout's).
TIME_LIMIT_REASON = "time limit reached"
TIME_LIMIT_EXIT_CODE = 124


@dataclass(frozen=True)
class Times:
    time_limit: int | None
    stop_grace: int
    idle_timeout: int | None


def _bounded(field: str, given: int | None, default: int | None, most: int | None) -> int | None:
    """``given`` if within ``most`` (else refused, naming the field); without one, the
    server's default, cut to ``most``."""
    if given is not None:
        if most is not None and given > most:
            raise QuotaExceeded(
                f"{field}: {format_duration(given)} is over your limit of"
                f" {format_duration(most)} (max_{field})",
                field=field,
            )
        return given
    if most is not None and (default is None or default > most):
        return most
    return default


def for_new(
    config: ServerConfig,
    limits: Limits,
    kind: SessionType,
    time_limit: int | None,
    stop_grace: int | None,
    idle_timeout: int | None,
) -> Times:
    """The clocks of a new session: what it asks for, else the server's defaults; bounded by
    its owner's maxima. Batch sessions are never idle-reclaimed."""
    interactive = kind == SessionType.INTERACTIVE
    return Times(
        _bounded("time_limit", time_limit, config.default_time_limit, limits.max_time_limit),
        STOP_GRACE if stop_grace is None else stop_grace,
        _bounded("idle_timeout", idle_timeout, config.default_idle_timeout, limits.max_idle_timeout)
        if interactive
        else None,
    )


def check_change(limits: Limits, field: str, value: int | None) -> None:
    """A new value of a running session's clock: within the maxima (None: no limit, which
    is over any maximum)."""
    most = limits.max_time_limit if field == "time_limit" else limits.max_idle_timeout
    if field == "stop_grace" or most is None:
        return
    if value is None:
        raise QuotaExceeded(
            f"{field}: your sessions must have one, at most {format_duration(most)} (max_{field})",
            field=field,
        )
    _bounded(field, value, None, most)


def over_time(s: Session, now: datetime) -> bool:
    """The session ran into its time limit (its kernels were or are being told to stop)."""
    at = deadline(s.started_at, s.time_limit)
    return at is not None and now >= at


def time_limit_end(s: Session) -> tuple[dict[str, Any], int | None]:
    """(status_info, exit code) of a session ended by its time limit."""
    assert s.time_limit is not None
    info: dict[str, Any] = {
        "reason": TIME_LIMIT_REASON,
        "time_limit": s.time_limit,
        "message": f"ran for its time limit of {format_duration(s.time_limit)}",
    }
    stopped = {k.hostname: k.exit_code for k in s.kernels if k.status == KernelStatus.EXITED}
    if stopped:
        info["exit_codes"] = stopped
    code = TIME_LIMIT_EXIT_CODE if s.type == SessionType.BATCH else None
    return info, code


def grace_exit(s: Session) -> tuple[dict[str, Any], int | None] | None:
    """A kernel of a session past its time limit stopped (the exits step): the end once none
    runs any more (None: the grace goes on). The session's row is marked written, so that two
    exits recorded at once conflict (row version) and the second sees the first."""
    flag_modified(s, "status_info")
    if any(k.status == KernelStatus.RUNNING for k in s.kernels):
        return None
    return time_limit_end(s)


def idle_reason(idle_timeout: int) -> str:
    """``idle for 30 min``."""
    return f"idle for {format_duration(idle_timeout)}"


def idle_end(idle_timeout: int, idle_since: datetime) -> dict[str, Any]:
    """status_info of a session destroyed for being idle."""
    return {
        "reason": idle_reason(idle_timeout),
        "idle_timeout": idle_timeout,
        "idle_since": idle_since.isoformat(),
    }


async def change(life: Life, session_id: str, limits: Limits, given: dict[str, int | None]) -> None:
    """Sets the clocks ``given`` of an active session, within ``limits`` (the caller's: an
    admin's are none). A shorter time limit may be due at once: the reaper acts at its next
    round. A new idle timeout starts a new idle clock (the route counts the change as use)."""
    for field, value in given.items():
        check_change(limits, field, value)

    async def step(db: AsyncSession) -> None:
        s = await load(db, session_id)
        if s.status.is_final or s.status == SessionStatus.TERMINATING:
            raise NotRunning(f"session {s.name!r} is {s.status}: it has no clocks any more")
        if given.get("idle_timeout") is not None and s.type == SessionType.BATCH:
            raise Invalid.field_rule("idle_timeout", "only interactive sessions have one")
        for field, value in given.items():
            setattr(s, field, value)
        if "idle_timeout" in given:  # (the caller counts the change as use: a new clock)
            s.idle_since = None

    await life.store.write(step)
