"""Reading from and running in a session's kernels: logs, exec, terminals.

Logs come from the agent while a kernel exists and from the saved copy once it was removed.
Everything that can be known before an answer starts is checked first (no such kernel: 422,
not running: 409, its agent LOST or gone: 502), so the stream itself only fails for what
happens while it runs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import NamedTuple

from troupe.api.agent import AgentBackend
from troupe.api.errors import AgentFailed, Invalid, NotRunning
from troupe.api.exec import ExecItem
from troupe.api.lifecycle import SessionStatus
from troupe.api.models import ExecRequest
from troupe.manager import log_positions
from troupe.manager.fleet import Fleet
from troupe.manager.log_positions import Cursor
from troupe.manager.logs import LogLine, LogStore, close_stream, fair, merged, resumed, stamped
from troupe.manager.store.models import Kernel, Session


def check_kernel(s: Session, hostname: str | None) -> list[Kernel]:
    kernels = [k for k in s.kernels if hostname in (None, k.hostname)]
    if not kernels:
        raise Invalid.field_rule("container", f"no kernel named {hostname!r} in this session")
    return kernels


def agent_of(fleet: Fleet, k: Kernel, hint: str = "") -> AgentBackend:
    """The agent holding kernel ``k``; :class:`AgentFailed` if it is LOST or gone."""
    agent_id = k.agent_id or ""
    agent = fleet.get(agent_id)
    if agent is None:
        why = f"agent {agent_id!r} of kernel {k.hostname} is gone (removed)"
    elif agent_id in fleet.lost:
        why = f"agent {agent_id!r} of kernel {k.hostname} is LOST (no heartbeat): unreachable"
    else:
        return agent
    raise AgentFailed(why + hint, kernel=k.hostname)


class Logs(NamedTuple):
    """A logs answer's lines, and the cursor that gives each line its event id."""

    lines: AsyncIterator[LogLine]
    cursor: Cursor


def logs(
    fleet: Fleet,
    store: LogStore,
    s: Session,
    container: str | None,
    follow: bool,
    last_event_id: str = "",
    since: str = "",
) -> Logs:
    """The lines of one kernel (``container``) or of all, merged, after the position a client
    resumes from (:func:`troupe.manager.log_positions.start`).

    Checks first, raising before any line is read: no such kernel, a malformed position, or a
    kernel whose logs would have to come from a LOST or gone agent (and have no saved copy).
    Saved copies are read as streams; a session whose saved logs were deleted to keep within
    ``--saved-logs-total`` says so in one line per kernel.
    """
    kernels = check_kernel(s, container)
    cursor = log_positions.start(last_event_id, since, len(kernels))
    streams: list[AsyncIterator[LogLine]] = []
    live, evicted = False, store.evicted(s.id)
    for i, k in enumerate(kernels):
        source: AsyncIterator[str]
        if evicted:
            source = _aiter([EVICTED])
        elif k.container_id and not store.has(s.id, k.hostname):
            others = container is None and len(kernels) > 1
            agent = agent_of(fleet, k, "; logs of one kernel: ?container=NAME" if others else "")
            source, live = agent.logs(k.container_id, follow=follow), True
        else:
            source = store.lines(s.id, k.hostname)
        attempts = [] if evicted else range(s.restarts or 0)
        parts = [stamped(i, _label(k, a), store.lines(s.id, k.hostname, a)) for a in attempts]
        last = stamped(i, _label(k, s.restarts or 0, bool(attempts)), source)
        parts.append(_this_attempt(last, k) if attempts else last)
        streams.append(resumed(_chained(parts), cursor.positions[i]))
    return Logs(fair(merged(streams, follow=follow and live)), cursor)


def _label(k: Kernel, attempt: int, restarted: bool = True) -> str:
    """The name a kernel's lines carry: its hostname, with the attempt (``main1#0``) in a
    session that restarted, so every line's attempt is known (docs/policies.md)."""
    return f"{k.hostname}#{attempt}" if restarted else k.hostname


async def _this_attempt(lines: AsyncIterator[LogLine], k: Kernel) -> AsyncIterator[LogLine]:
    """The lines of the kernel's last start on: a restart in place starts the same container
    again, and the engine's log of it goes on (the earlier attempts' lines are in their saved
    copies)."""
    started = k.timeline.get("started") if isinstance(k.timeline, dict) else None
    since = 0
    if started:
        t = datetime.fromisoformat(started)
        since = int(t.timestamp()) * 1_000_000_000 + t.microsecond * 1000
    try:
        async for line in lines:
            if line.at >= since:
                yield line
    finally:
        await close_stream(lines)


async def _chained(parts: list[AsyncIterator[LogLine]]) -> AsyncIterator[LogLine]:
    """The lines of one kernel's attempts, one after another (each in time order)."""
    try:
        for part in parts:
            async for line in part:
                yield line
    finally:
        for part in parts:
            await close_stream(part)


def kernel_target(fleet: Fleet, s: Session, hostname: str) -> tuple[AgentBackend, str]:
    """The agent and container of a running session's kernel (for exec and shells)."""
    if s.status != SessionStatus.RUNNING:
        raise NotRunning(f"session {s.name!r} is {s.status}, not RUNNING")
    k = next((k for k in s.kernels if k.hostname == hostname), None)
    if k is None or not k.container_id:
        raise Invalid.field_rule("kernel", f"no kernel named {hostname!r} in this session")
    return agent_of(fleet, k), k.container_id


def exec_stream(fleet: Fleet, s: Session, req: ExecRequest) -> AsyncIterator[ExecItem]:
    agent, container_id = kernel_target(fleet, s, req.kernel)
    return agent.exec_stream(container_id, req.command, user=req.user)


#: The one line of a kernel whose saved log was deleted to keep within the budget.
EVICTED = (
    "[troupe: this session's saved logs were deleted to keep all saved logs within the"
    " server's --saved-logs-total]\n"
)


async def _aiter(lines: list[str]) -> AsyncIterator[str]:
    for line in lines:
        yield line
