"""A lost agent: the sessions with a kernel on it (each then placed again under its restart
rule or failed, :mod:`.replacing`), and the start that failed because an agent stopped
answering before its heartbeat time-out said it was lost."""

from __future__ import annotations

import asyncio

from sqlalchemy import select

from troupe.api.errors import TroupeError
from troupe.api.lifecycle import SESSION_ALLOCATED, SessionStatus
from troupe.manager.life.context import Life
from troupe.manager.store.models import Kernel, Session

S = SessionStatus
#: How long an agent has to answer the question whether it is still there.
PROBE_SECONDS = 3.0


async def victims_of(life: Life, agent_id: str) -> dict[str, str]:
    """session id -> hostname of its first kernel on ``agent_id`` (sessions holding one)."""
    async with life.store() as db:
        rows = await db.execute(
            select(Kernel.session_id, Kernel.hostname)
            .join(Session, Kernel.session_id == Session.id)
            .where(Kernel.agent_id == agent_id, Session.status.in_(SESSION_ALLOCATED))
            .order_by(Kernel.rank)
        )
        victims: dict[str, str] = {}
        for sid, host in rows:
            victims.setdefault(sid, host)
        return victims


async def awaits_verdict(life: Life, session_id: str) -> tuple[SessionStatus, int] | None:
    """The session's (status, restarts) when its start or restart failed while an agent it
    is placed on is LOST or does not answer, and it has restarts left: the agent's heartbeat
    time-out decides (a lost agent places it again; see :func:`verdict_seconds`). None: the
    failure is its own, the session fails now."""
    s = await life.session(session_id)
    if s.status not in (S.SCHEDULED, S.PREPARING, S.RESTARTING) or s.restarts >= s.max_restarts:
        return None
    agents = {k.agent_id for k in s.kernels if k.agent_id}
    if agents & life.fleet.lost or await _silent(life, agents):
        return S(s.status), s.restarts
    return None


def verdict_seconds(life: Life) -> float:
    """How long to wait for an agent's heartbeat verdict: its time-out, the longest gap
    between two checks and a margin."""
    return life.config.agent_timeout + life.fleet.check_within + 1.0


async def _silent(life: Life, agents: set[str]) -> bool:
    """Whether one of ``agents`` of other hosts does not answer now."""

    async def silent(agent_id: str) -> bool:
        agent = life.fleet.get(agent_id)
        if agent is None or not life.fleet.is_remote(agent_id):
            return agent is None
        try:
            async with asyncio.timeout(PROBE_SECONDS):
                await agent.capacity()
        except (TroupeError, TimeoutError):
            return True
        return False

    return any(await asyncio.gather(*(silent(a) for a in sorted(agents))))
