"""A lost agent: every session with a kernel on it fails, naming its first such kernel."""

from __future__ import annotations

from sqlalchemy import select

from troupe.api.lifecycle import SESSION_ALLOCATED
from troupe.manager.life.context import Life
from troupe.manager.store.models import Kernel, Session


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
