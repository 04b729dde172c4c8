"""Wire models of a session's event list (``GET /v1/sessions/{ref}/events``) and of the
audit list of changes to users and keys (``GET /v1/audit``); docs/events.md.

An actor is ``user NAME`` (the owner), ``admin NAME`` (an admin acting on another user's
session), ``scheduler``, ``policy NAME`` (a rule of the server) or ``system`` (the manager
itself: lost agents, kernel exits, a restart of the manager).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class SessionEvent(BaseModel):
    """One entry of a session's event list, oldest first; ``id`` grows."""

    id: int = Field(description="ascending; follow a list with ?after= the last one seen")
    at: datetime
    kind: str = Field(description="status, kernel-exit, oom, restart, app-open, idle-warning, ...")
    status: str | None = Field(None, description="the status reached (status events)")
    kernel: str | None = Field(None, description="the kernel concerned (hostname)")
    message: str = Field("", description="why, or what happened, in words")
    actor: str = Field(description="user NAME, admin NAME, scheduler, policy NAME or system")


class AuditEntry(BaseModel):
    """A change of users or keys: who did what to whom, when."""

    id: int
    at: datetime
    actor: str = Field(description="the user who acted (their name then)")
    action: str = Field(description="user-create, user-delete, key-revoke, key-rotate, limits-set")
    target: str = Field(description="the user acted on (their name then)")
    details: dict[str, Any] = Field(default_factory=dict)
