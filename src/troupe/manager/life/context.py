"""What every step of a session's life works with."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import raiseload

from troupe.api.errors import NotFound
from troupe.api.lifecycle import SessionStatus
from troupe.manager.config import ServerConfig
from troupe.manager.fleet import Fleet
from troupe.manager.logs import LogStore
from troupe.manager.store.models import Session
from troupe.manager.store.unit import Store


@dataclass
class Life:
    config: ServerConfig
    store: Store
    fleet: Fleet
    logs: LogStore

    async def session(self, session_id: str) -> Session:
        """The session with its kernels and owner (what the API's answers show)."""
        async with self.store() as db:
            return await load(db, session_id, owner=True)

    async def status(self, session_id: str) -> SessionStatus:
        """The session's status alone (a fraction of the cost of :meth:`session`)."""
        async with self.store() as db:
            row = await db.execute(select(Session.status).where(Session.id == session_id))
            status = row.scalar_one_or_none()
        if status is None:
            raise NotFound.of("session", session_id)
        return status


async def load(db: AsyncSession, session_id: str, *, owner: bool = False) -> Session:
    """The session with its kernels; its owner too with ``owner`` (a query the lifecycle's
    steps, which load the session in each of their transactions, do not need)."""
    options = [] if owner else [raiseload(Session.owner)]
    s = await db.get(Session, session_id, populate_existing=True, options=options)
    if s is None:
        raise NotFound.of("session", session_id)
    return s
