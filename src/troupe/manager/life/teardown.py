"""Teardown: a session moves to its final status, with nothing left behind.

TERMINATING (with the ending it will reach, stored, so a restarted manager finishes it) ->
the preparer, if any, is stopped -> every agent holding kernels removes them, saving their
logs -> every agent removes the session's networks -> kernels TERMINATED, session final.
A PENDING session has nothing on any agent: it is CANCELLED at once.

A final session needs no keys any more: its SSH key and its kernels' host keys are wiped
from the store in the transaction that makes it final (:func:`wipe_keys`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.lifecycle import KernelStatus, SessionStatus, transition
from troupe.manager.life.context import Life, load
from troupe.manager.session_events import SYSTEM
from troupe.manager.store.models import Session
from troupe.manager.store.unit import changes_of

S, K = SessionStatus, KernelStatus


def wipe_keys(s: Session) -> None:
    """Forgets the private keys of a session that reached its final status."""
    s.ssh_private_key = ""
    for k in s.kernels:
        k.host_private_key = ""


async def teardown(
    life: Life,
    session_id: str,
    ending: SessionStatus,
    info: dict[str, Any],
    stop_preparer: Callable[[str], Awaitable[None]],
    exit_code: int | None = None,
    actor: str = SYSTEM,
) -> None:
    """Idempotent: a final session stays as it is; a TERMINATING one is finished as begun.

    ``actor`` (who ended it, see :mod:`troupe.manager.session_events`) and ``info``'s
    ``reason`` go with the status changes to the session's event list."""
    reason = str(info.get("reason", ""))

    async def begin(db: AsyncSession) -> tuple[SessionStatus, set[str]] | None:
        s = await load(db, session_id)
        changes = changes_of(db)
        if s.status.is_final:
            return None
        if s.status == S.PENDING:
            s.status_info = info
            transition(s, S.CANCELLED, changes, reason=reason, actor=actor)
            for k in s.kernels:
                transition(k, K.TERMINATED, changes)
            wipe_keys(s)
            return None
        if s.status != S.TERMINATING:
            s.status_info, s.ending = info, ending
            if exit_code is not None:
                s.exit_code = exit_code
            transition(s, S.TERMINATING, changes, reason=reason, actor=actor)
        return s.ending or ending, {k.agent_id for k in s.kernels if k.agent_id}

    begun = await life.store.write(begin)
    if begun is None:
        return
    final, agent_ids = begun
    await stop_preparer(session_id)
    saved = await life.fleet.remove_session(session_id, agent_ids)
    if saved:
        await asyncio.to_thread(life.logs.save, session_id, saved, life.config.saved_log_bytes)

    async def finish(db: AsyncSession) -> None:
        s = await load(db, session_id)
        changes = changes_of(db)
        for k in s.kernels:
            transition(k, K.TERMINATED, changes)
        transition(s, final, changes, reason=reason, actor=actor)
        wipe_keys(s)

    await life.store.write(finish)
