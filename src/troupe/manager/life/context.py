"""What every step of a session's life works with."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.errors import NotFound
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
        async with self.store() as db:
            return await load(db, session_id)


async def load(db: AsyncSession, session_id: str) -> Session:
    s = await db.get(Session, session_id, populate_existing=True)
    if s is None:
        raise NotFound.of("session", session_id)
    return s
