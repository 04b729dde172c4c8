"""Retention: finished sessions older than ``retention_days`` are forgotten.

A session whose status is final and whose ``terminated_at`` is more than
``ServerConfig.retention_days`` ago is deleted from the database with its kernels, and its
saved logs are deleted from the disk (0 days keeps everything); its event list goes with it
(``ON DELETE CASCADE``), so a finished session's events are kept exactly as long as the
session. The registry runs
:func:`sweep` from its scheduler loop every :data:`INTERVAL` seconds; it is idempotent and
may be called directly.

Saved logs go first, then the rows: a manager stopped in between leaves rows without logs,
which the next sweep deletes, rather than logs nobody can reach.

The sweep also wipes private keys that final sessions still hold (sessions made final
before keys were wiped at teardown, or by a step that does not wipe them), deletes the web
UI's sign-ins that expired or whose user's key changed (:func:`prune_web_sessions`), and keeps
saved logs within ``--saved-logs-total`` (each save does too; the sweep catches a budget lowered
across a restart), oldest sessions' first (:meth:`troupe.manager.logs.LogStore.trim`), and
trims event lists longer than :data:`troupe.manager.session_events.CAP` (status changes do
not trim as they are written).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.lifecycle import SESSION_FINAL, utcnow
from troupe.manager import session_events, websessions
from troupe.manager.life.context import Life
from troupe.manager.store.models import Kernel, Session

log = logging.getLogger(__name__)

#: Seconds between two sweeps run by the registry.
INTERVAL = 300.0
#: Sessions deleted per transaction.
BATCH = 200


async def sweep(life: Life, now: datetime | None = None) -> int:
    """Deletes the finished sessions past retention; returns how many."""
    await _wipe_leftover_keys(life)
    trimmed = await asyncio.to_thread(life.logs.trim)
    if trimmed:
        log.info("saved logs: deleted those of %d session(s) to keep the total", len(trimmed))
    total = await _forget_old_sessions(life, now)
    await prune_web_sessions(life, now)
    await life.store.write(session_events.trim_all)
    return total


async def _forget_old_sessions(life: Life, now: datetime | None) -> int:
    days = life.config.retention_days
    if days <= 0:
        return 0
    cutoff = (now or utcnow()) - timedelta(days=days)
    total = 0
    while True:
        async with life.store() as db:
            rows = await db.execute(
                select(Session.id)
                .where(Session.status.in_(SESSION_FINAL), Session.terminated_at < cutoff)
                .limit(BATCH)
            )
            ids = list(rows.scalars())
        if not ids:
            break
        for sid in ids:
            await asyncio.to_thread(life.logs.remove, sid)

        async def forget(db: AsyncSession, ids: list[str] = ids) -> None:
            await db.execute(delete(Kernel).where(Kernel.session_id.in_(ids)))
            await db.execute(delete(Session).where(Session.id.in_(ids)))

        await life.store.write(forget)
        total += len(ids)
        if len(ids) < BATCH:
            break
    if total:
        log.info("retention: deleted %d finished session(s) older than %g days", total, days)
    return total


async def _wipe_leftover_keys(life: Life) -> None:
    async def wipe(db: AsyncSession) -> None:
        final = select(Session.id).where(Session.status.in_(SESSION_FINAL))
        await db.execute(
            update(Session)
            .where(Session.status.in_(SESSION_FINAL), Session.ssh_private_key != "")
            .values(ssh_private_key="")
            .execution_options(synchronize_session=False)
        )
        await db.execute(
            update(Kernel)
            .where(Kernel.session_id.in_(final), Kernel.host_private_key != "")
            .values(host_private_key="")
            .execution_options(synchronize_session=False)
        )

    await life.store.write(wipe)


async def prune_web_sessions(life: Life, now: datetime | None = None) -> int:
    """Deletes web sessions that can sign no one in any more; returns how many."""

    async def prune(db: AsyncSession) -> int:
        return await websessions.prune(db, now)

    pruned = await life.store.write(prune)
    if pruned:
        log.info("retention: deleted %d ended web session(s)", pruned)
    return pruned
