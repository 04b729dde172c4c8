"""Re-placement: a RUNNING session that lost a kernel's agent (LOST: no heartbeat), with
restarts left, is placed again instead of failing (docs/policies.md).

RUNNING -> RESTARTING (the lost agent's first kernel in the restart history, a ``restart``
event), then what is left of the failed attempt is removed (the kernels on the agents still
there, their logs saved as that attempt's, and the network), and RESTARTING -> PENDING with
every kernel PENDING and unplaced: from there the session goes the way of a new one, through
the scheduler (its why-pending report while nothing fits, ``max_pending_seconds`` counted
from this PENDING), SCHEDULED and PREPARING (a new network, every kernel made anew) to
RUNNING, with ``TROUPE_RESTART_COUNT`` the session's ``restarts``. The lost agent's containers
are removed once it is back (:meth:`troupe.manager.fleet.Fleet.sweep_orphans`).
"""

from __future__ import annotations

import asyncio

from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.lifecycle import KernelStatus, SessionStatus, transition
from troupe.manager.life.context import Life, load
from troupe.manager.life.judging import RESTART_ACTOR, restarting
from troupe.manager.session_events import record_event
from troupe.manager.store.unit import changes_of

S, K = SessionStatus, KernelStatus


async def begin(life: Life, session_id: str, agent_id: str, host: str, message: str) -> bool:
    """RUNNING -> RESTARTING for a session whose kernel ``host`` was on the lost agent, when
    it has restarts left; False (nothing changed) otherwise: it fails as before."""

    async def step(db: AsyncSession) -> bool:
        s = await load(db, session_id)
        if s.status != S.RUNNING or s.restarts >= s.max_restarts:
            return False
        reason = f"agent {agent_id} lost" + (f": {message}" if message else "")
        failure = {"kernel": host, "reason": reason, "exit_code": None, "oom_killed": False}
        restarting(s, failure, f"lost with agent {agent_id}", changes_of(db))
        text = f"restart {s.restarts} of {s.max_restarts}: {host} lost with agent {agent_id}"
        await record_event(db, s.id, "restart", text, RESTART_ACTOR, kernel=host)
        return True

    return await life.store.write(step)


async def place_again(life: Life, session_id: str) -> None:
    """What is left of the failed attempt removed; RESTARTING -> PENDING, every kernel
    unplaced (nothing, if the session left RESTARTING meanwhile: a destroy)."""
    s = await life.session(session_id)
    if s.status != S.RESTARTING:
        return
    agents = {k.agent_id for k in s.kernels if k.agent_id}
    saved = await life.fleet.remove_session(session_id, agents)  # (the LOST one is skipped)
    if saved:
        limit = life.config.saved_log_bytes
        await asyncio.to_thread(life.logs.save, session_id, saved, limit, s.restarts - 1)

    async def step(db: AsyncSession) -> None:
        s = await load(db, session_id)
        if s.status != S.RESTARTING:
            return
        changes = changes_of(db)
        for k in s.kernels:
            k.agent_id, k.container_id, k.ip, k.gpus = None, None, None, []
            k.exit_code, k.oom_killed = None, False
            transition(k, K.PENDING, changes)
        s.network, s.subnet, s.status_info = None, None, {}
        reason = "placed again: a kernel's agent was lost"
        transition(s, S.PENDING, changes, reason=reason, actor=RESTART_ACTOR)

    await life.store.write(step)
