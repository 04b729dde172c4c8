"""Event lists as the API and the web pages read them: a session's (looked up as every
session read is, by the caller) and the audit list (admins)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TypeVar

from sqlalchemy import Select, select
from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.events import AuditEntry, SessionEvent
from troupe.manager.store.models import AuditEvent
from troupe.manager.store.models import SessionEvent as EventRow

T = TypeVar("T")
#: Entries in one answer unless ``limit`` says, and the most it may.
LIMIT, MAX = 500, 1000


async def _page(
    db: AsyncSession,
    model: type[EventRow] | type[AuditEvent],
    q: Select[T],
    after: int | None,
    since: float | None,
    limit: int,
) -> list[T]:
    """``q`` after event id ``after`` and time ``since`` (epoch seconds), oldest first: the
    newest ``limit`` of them, or with ``after`` the oldest ``limit`` after it."""
    if after is not None:
        q = q.where(model.id > after)
    if since is not None:
        q = q.where(model.at > datetime.fromtimestamp(since, UTC))
    if after is not None:
        return list((await db.execute(q.order_by(model.id).limit(limit))).scalars())
    return list((await db.execute(q.order_by(model.id.desc()).limit(limit))).scalars())[::-1]


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
    rows = await _page(db, EventRow, q, after, since, limit)
    return [SessionEvent.model_validate(r, from_attributes=True) for r in rows]


async def audit_entries(
    db: AsyncSession, after: int | None = None, since: float | None = None, limit: int = LIMIT
) -> list[AuditEntry]:
    """The audit entries after ``since``, oldest first, paged as :func:`session_events`."""
    rows = await _page(db, AuditEvent, select(AuditEvent), after, since, limit)
    return [AuditEntry.model_validate(r, from_attributes=True) for r in rows]
