"""After a manager restart: finish what was interrupted, fail what was lost.

Sessions caught while being created or restarted in place fail (their leftovers are
removed by teardown); those caught on their way to be placed again after a lost agent
(RESTARTING, the last restart naming the agent) go on (:mod:`.replacing`); TERMINATING ones
finish as begun; RUNNING ones whose kernels are gone fail. Agents that cannot
be asked now are left to their heartbeat time-out. The GPUs of running kernels are read back
from their containers (what the engine was asked for is what they hold).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.lifecycle import SESSION_ALLOCATED, SessionStatus
from troupe.manager.life.context import Life
from troupe.manager.life.replacing import lost_agent
from troupe.manager.store.models import Kernel, Session

S = SessionStatus
Teardown = Callable[[str, SessionStatus, dict[str, Any]], Awaitable[None]]


async def reconcile(life: Life, teardown: Teardown, replace: Callable[[str], None]) -> None:
    """``replace`` goes on placing a session again (see :func:`.replacing.place_again`)."""
    async with life.store() as db:
        rows = await db.execute(select(Session).where(Session.status.in_(SESSION_ALLOCATED)))
        sessions = list(rows.scalars())
    held, unreachable = await life.fleet.kernels()
    running: dict[str, set[str]] = {}
    #: kernel id -> UUIDs of the GPUs its container holds
    devices: dict[str, list[str]] = {}
    for kernels in held.values():
        for k in kernels:
            if k.state == "running":
                running.setdefault(k.session_id, set()).add(k.hostname)
            if k.kernel_id:
                devices[k.kernel_id] = k.gpus
    await _record_gpus(life, [s for s in sessions if s.status == S.RUNNING], devices)
    for s in sessions:
        if s.status in (S.SCHEDULED, S.PREPARING):
            await teardown(
                s.id, S.ERROR, {"reason": "manager restarted while the session was being created"}
            )
        elif s.status == S.RESTARTING and lost_agent(s) is not None:
            replace(s.id)
        elif s.status == S.RESTARTING:
            info = {"reason": "manager restarted while the session was restarting"}
            await teardown(s.id, S.ERROR, {**info, "restarts": s.restarts})
        elif s.status == S.TERMINATING:
            await teardown(s.id, s.ending or S.TERMINATED, dict(s.status_info))
        else:
            missing = [
                k.hostname
                for k in s.kernels
                if k.hostname not in running.get(s.id, set()) and k.agent_id not in unreachable
            ]
            if missing:
                await teardown(
                    s.id,
                    S.ERROR,
                    {"reason": "kernel not running after manager restart", "kernel": missing[0]},
                )
    await life.fleet.sweep_orphans()


async def _record_gpus(life: Life, sessions: list[Session], devices: dict[str, list[str]]) -> None:
    """Stores the GPUs the containers of running kernels hold where the database says other."""
    stale = {
        k.id: devices[k.id]
        for s in sessions
        for k in s.kernels
        if k.id in devices and sorted(devices[k.id]) != sorted(k.gpus or [])
    }
    if not stale:
        return

    async def step(db: AsyncSession) -> None:
        for kernel_id, gpus in stale.items():
            k = await db.get(Kernel, kernel_id)
            if k is not None:
                k.gpus = gpus

    await life.store.write(step)
