"""Event lists as the API and the web pages read them: a session's (looked up as every
session read is, by the caller) and the audit list (admins)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TypeVar

from sqlalchemy import Select, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from troupe.api.events import AuditEntry, SessionEvent
from troupe.manager.store.models import AuditEvent
from troupe.manager.store.models import SessionEvent as EventRow

T = TypeVar("T")
#: Entries in one answer unless ``limit`` says, and the most it may.
LIMIT, MAX = 500, 1000


def _since(since: float | None) -> datetime | None:
    return None if since is None else datetime.fromtimestamp(since, UTC)


async def _page(
    db: AsyncSession,
    q: Select[T],
    id_: InstrumentedAttribute[int],
    after: int | None,
    limit: int,
) -> list[T]:
    if after is not None:
        return list((await db.execute(q.order_by(id_).limit(limit))).scalars())
    return list((await db.execute(q.order_by(id_.desc()).limit(limit))).scalars())[::-1]


async def session_events(
    db: AsyncSession,
    session_id: str,
    after: int | None = None,
    since: float | None = None,
    limit: int = LIMIT,
) -> list[SessionEvent]:
    """The session's events after ``since`` (epoch seconds), oldest first: the newest
    ``limit`` of them, or with ``after`` (an id) the oldest ``limit`` after it (to follow)."""
    q = select(EventRow).where(EventRow.session_id == session_id)
    if after is not None:
        q = q.where(EventRow.id > after)
    if (t := _since(since)) is not None:
        q = q.where(EventRow.at > t)
    rows = await _page(db, q, EventRow.id, after, limit)
    return [
        SessionEvent(
            id=r.id,
            at=r.at,
            kind=r.kind,
            status=r.status,
            kernel=r.kernel,
            message=r.message,
            actor=r.actor,
        )
        for r in rows
    ]


async def audit_entries(
    db: AsyncSession, after: int | None = None, since: float | None = None, limit: int = LIMIT
) -> list[AuditEntry]:
    """The audit entries after ``since``, oldest first, paged as :func:`session_events`."""
    q = select(AuditEvent)
    if after is not None:
        q = q.where(AuditEvent.id > after)
    if (t := _since(since)) is not None:
        q = q.where(AuditEvent.at > t)
    rows = await _page(db, q, AuditEvent.id, after, limit)
    return [
        AuditEntry(
            id=r.id, at=r.at, actor=r.actor, action=r.action, target=r.target, details=r.details
        )
        for r in rows
    ]
