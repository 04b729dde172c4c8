"""Each session's event list: what happened to it, why and who did it (docs/events.md).

Two ways in, both in the transaction of the step that caused the event, so the list never
says what was rolled back:

* status changes: every :func:`troupe.api.lifecycle.transition` of a session (with its
  ``reason`` and ``actor``) becomes a ``status`` event when the database session commits
  (:func:`write_pending`, run before each commit, and by :func:`record_event` first, so
  that the list keeps the order of what happened);
* everything else: :func:`record_event`, called by the step (kernel exits, OOM kills, app
  opens; restarts and idle warnings).

A session keeps at most :data:`CAP` events: :func:`record_event` trims the oldest of the
session's (its kinds are the ones that repeat: restarts, idle warnings, app opens, exits), and
the retention sweep trims any session over the cap (:func:`trim_all`). Status changes add no
statement of their own to a commit (their rows go with its flush): a session's life has a
handful of them, more only through restarts, whose events trim. The events go with their
session when retention deletes it (``ON DELETE CASCADE``).

Importing this module registers its listeners on every database session; the manager imports
it (the registry, admission and exits do), so no status change is committed without its event.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import delete, event, func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session as SyncSession

from troupe.api.lifecycle import Change, utcnow
from troupe.manager.store.models import SessionEvent, User
from troupe.manager.store.unit import changes_in

#: how many of the transaction's changes are in the lists already (a step may commit twice)
_WRITTEN = "troupe.events_written"

#: Events kept per session; older ones are deleted as new ones come.
CAP = 500
#: The known kinds of events (``status`` is written by :func:`write_pending` only).
KINDS = ("status", "kernel-exit", "oom", "restart", "app-open", "idle-warning", "time-limit")

#: Actors besides users and admins (``user NAME``, ``admin NAME``) and ``policy NAME``.
SCHEDULER, SYSTEM = "scheduler", "system"


def actor_of(user: User, owner_id: str | None = None) -> str:
    """``admin NAME`` for an admin acting on another user's session (``owner_id``), else
    ``user NAME`` (without ``owner_id``: their own)."""
    if user.admin and owner_id is not None and user.id != owner_id:
        return f"admin {user.name}"
    return f"user {user.name}"


def policy(name: str) -> str:
    """The actor of a rule of the server (a time limit, idle reclaim, a restart policy)."""
    return f"policy {name}"


async def record_event(
    db: AsyncSession,
    session_id: str,
    kind: str,
    message: str,
    actor: str = SYSTEM,
    *,
    kernel: str | None = None,
) -> None:
    """Adds an event (not a status change: those come from ``transition``) to a session's
    list, in ``db``'s transaction: it is kept when the caller commits, dropped if it rolls
    back. Call it inside a :meth:`~troupe.manager.store.unit.Store.write` step (or before
    a commit of your own) for a session that exists.

    ``kind``: one of :data:`KINDS` (``restart``, ``idle-warning``, ...), at most 32 chars;
    ``message``: one line for people (exit codes, which app, ...); ``actor``: ``user NAME``,
    ``admin NAME`` (:func:`actor_of`), ``scheduler``, ``policy NAME`` (:func:`policy`) or
    ``system``; ``kernel``: the hostname concerned, if any. Trims the session's list to
    :data:`CAP`.
    """
    await db.run_sync(write_pending)  # status changes made before this event come first
    db.add(
        SessionEvent(
            session_id=session_id,
            at=utcnow(),
            kind=kind,
            kernel=kernel,
            message=message,
            actor=actor,
        )
    )
    await db.flush()
    await db.execute(_trim([session_id]))


def _trim(session_ids: Iterable[str]) -> Any:
    """Deletes all but the newest :data:`CAP` events of these sessions."""
    e = SessionEvent.__table__.alias("e")
    keep_from = (
        select(e.c.id)
        .where(e.c.session_id == SessionEvent.session_id)
        .order_by(e.c.id.desc())
        .offset(CAP - 1)
        .limit(1)
        .scalar_subquery()
    )
    return (
        delete(SessionEvent)
        .where(SessionEvent.session_id.in_(list(session_ids)), SessionEvent.id < keep_from)
        .execution_options(synchronize_session=False)
    )


async def trim_all(db: AsyncSession) -> None:
    """Trims every session holding more than :data:`CAP` events (the retention sweep)."""
    over = (
        select(SessionEvent.session_id).group_by(SessionEvent.session_id).having(func.count() > CAP)
    )
    ids = list((await db.execute(over)).scalars())
    for i in range(0, len(ids), 500):
        await db.execute(_trim(ids[i : i + 500]))


def _status_event(c: Change) -> SessionEvent:
    message = c.reason or ("created" if not c.old else "")
    return SessionEvent(
        session_id=c.id,
        at=c.at,
        kind="status",
        status=c.new,
        message=message,
        actor=c.actor or SYSTEM,
    )


def write_pending(session: SyncSession) -> None:
    """Adds the status changes of sessions made in ``session``'s transaction since the last
    call to their lists (kernels' and agents' changes are no events)."""
    changes = changes_in(session)
    done = session.info.get(_WRITTEN, 0)
    fresh = [c for c in changes[done:] if c.kind == "session"]
    session.info[_WRITTEN] = len(changes)
    if not fresh:
        return
    session.add_all([_status_event(c) for c in fresh])  # flushed with the changes' rows


@event.listens_for(SyncSession, "before_commit")
def _before_commit(session: SyncSession) -> None:
    write_pending(session)


@event.listens_for(SyncSession, "after_commit")
def _after_commit(session: SyncSession) -> None:
    session.info.pop(_WRITTEN, None)


@event.listens_for(SyncSession, "after_soft_rollback")
def _after_rollback(session: SyncSession, previous_transaction: Any) -> None:
    session.info.pop(_WRITTEN, None)
