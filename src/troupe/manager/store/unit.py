"""Units of work: short transactions, published changes, retries on concurrent writes.

Every status change is a :func:`troupe.api.lifecycle.transition` appended to
:func:`changes_of` the database session; the changes reach the :class:`ChangeBus` once the
transaction commits and are dropped if it rolls back (sessions' changes also go to their event
lists in the transaction itself: :mod:`troupe.manager.session_events`). Rows carry a version
(see models.py): a write that lost a race raises StaleDataError and :meth:`Store.write` runs
the step again on fresh rows. No agent call happens inside a unit: read, call agents, then write.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from sqlalchemy import event
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.orm import Session as SyncSession
from sqlalchemy.orm.exc import StaleDataError

from troupe.api.lifecycle import Change
from troupe.manager.changes import ChangeBus

log = logging.getLogger(__name__)
T = TypeVar("T")
_CHANGES, _BUS = "troupe.changes", "troupe.bus"


def changes_of(db: AsyncSession) -> list[Change]:
    """The list a step hands to ``transition``; published when ``db`` commits."""
    changes: list[Change] = db.sync_session.info.setdefault(_CHANGES, [])
    return changes


def changes_in(session: SyncSession) -> list[Change]:
    """The changes of ``session``'s transaction so far (for listeners of its events)."""
    changes: list[Change] = session.info.get(_CHANGES) or []
    return changes


@event.listens_for(SyncSession, "after_commit")
def _publish(session: SyncSession) -> None:
    changes = session.info.pop(_CHANGES, None)
    bus = session.info.get(_BUS)
    if changes and isinstance(bus, ChangeBus):
        bus.publish(changes)


@event.listens_for(SyncSession, "after_soft_rollback")
def _drop(session: SyncSession, previous_transaction: Any) -> None:
    session.info.pop(_CHANGES, None)


class Store:
    def __init__(
        self, engine: AsyncEngine, bus: ChangeBus, info: Mapping[str, Any] | None = None
    ) -> None:
        """``info``: more for every database session's ``info`` (listeners of its events)."""
        self.engine = engine
        self.bus = bus
        self._maker = async_sessionmaker(
            engine, expire_on_commit=False, info={**(info or {}), _BUS: bus}
        )

    def __call__(self) -> AsyncSession:
        """A database session (use ``async with``); commit to publish its changes."""
        return self._maker()

    async def write(self, step: Callable[[AsyncSession], Awaitable[T]], attempts: int = 8) -> T:
        """Runs ``step`` in a transaction and commits; again on fresh rows if a concurrent
        write changed one of them (IntegrityError is the caller's to handle)."""
        for attempt in range(attempts):
            async with self() as db:
                try:
                    result = await step(db)
                    await db.commit()
                    return result
                except StaleDataError:
                    await db.rollback()
                    if attempt == attempts - 1:
                        raise
                    log.debug("concurrent write; running the step again")
        raise AssertionError("unreachable")


__all__ = ["IntegrityError", "Store", "changes_in", "changes_of"]
