"""/v1/sessions/{ref}/events and /v1/audit: what happened to a session, and the changes of
users and keys (docs/events.md).

A session is looked up as everywhere (own sessions; all for admins; another user's is not
found); the audit list is for admins. ``since`` is epoch seconds or an RFC 3339 time (a
malformed one or one in the future is refused naming ``since``); ``after`` is the id of the
last entry seen: a client follows a list by asking again with it.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from troupe.api.events import AuditEntry, SessionEvent
from troupe.api.metrics import parse_since
from troupe.manager.deps import DB, AdminUser, CurrentUser
from troupe.manager.reads.events import LIMIT, MAX, audit_entries, session_events
from troupe.manager.reads.sessions import lookup

router = APIRouter(tags=["events"])

Since = Annotated[
    str | None,
    Query(description="only entries after this time: epoch seconds or RFC 3339"),
]
After = Annotated[
    int | None, Query(ge=0, description="only entries with a greater id (the last one seen)")
]
Limit = Annotated[int, Query(ge=1, le=MAX, description="entries in one answer")]


@router.get("/sessions/{ref}/events", response_model=list[SessionEvent])
async def list_session_events(
    ref: str,
    request: Request,
    db: DB,
    user: CurrentUser,
    since: Since = None,
    after: After = None,
    limit: Limit = LIMIT,
) -> list[SessionEvent]:
    """The session's events, oldest first: status changes with their reason and actor,
    kernel exits, OOM kills, restarts, app opens, idle warnings. Without ``after``: the
    newest ``limit``; with it: the oldest ``limit`` after that id."""
    t = parse_since(since)
    s = await lookup(request, user, ref)
    return await session_events(db, s.id, after, t, limit)


@router.get("/audit", response_model=list[AuditEntry])
async def list_audit(
    db: DB, _: AdminUser, since: Since = None, after: After = None, limit: Limit = LIMIT
) -> list[AuditEntry]:
    """Changes of users and keys (admins only), oldest first, paged as the events are."""
    return await audit_entries(db, after, parse_since(since), limit)
