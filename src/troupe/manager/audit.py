"""The audit list: changes of users and keys, who made them and when (docs/events.md).

:func:`record` adds an entry in the caller's transaction, so an entry exists exactly when
the change was committed. Entries are kept (they are few: one per admin action); admins read
them through :mod:`troupe.manager.reads.events`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.lifecycle import utcnow
from troupe.manager.store.models import AuditEvent

#: The actions recorded.
ACTIONS = ("user-create", "user-delete", "key-revoke", "key-rotate", "limits-set")


def record(
    db: AsyncSession, actor: str, action: str, target: str, details: dict[str, Any] | None = None
) -> None:
    """Adds an entry to ``db``'s transaction: ``actor`` (a user's name) did ``action`` (one
    of :data:`ACTIONS`) to the user named ``target``; kept when the caller commits."""
    db.add(
        AuditEvent(at=utcnow(), actor=actor, action=action, target=target, details=details or {})
    )
