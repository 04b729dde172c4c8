"""Exits: a kernel stopped on its own. A restart, fail-fast, or the end of a batch (the rules
are :mod:`.judging`'s).

Exits of sessions still being prepared go to their preparer (see preparing.py); this module
handles those of RUNNING sessions and records exit codes. Only the agent that holds a kernel
may report its exit.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.agent import KernelExit
from troupe.api.lifecycle import KernelStatus, SessionStatus, transition, utcnow
from troupe.manager.life import times
from troupe.manager.life.context import Life
from troupe.manager.life.judging import RESTART_ACTOR, Outcome, exit_message, judge
from troupe.manager.session_events import record_event
from troupe.manager.store.models import Kernel, Session
from troupe.manager.store.unit import changes_of

log = logging.getLogger(__name__)


async def _mark(db: AsyncSession, k: Kernel, ev: KernelExit) -> None:
    if k.status == KernelStatus.RUNNING:
        transition(k, KernelStatus.EXITED, changes_of(db))
        kind = "oom" if ev.oom_killed else "kernel-exit"
        await record_event(db, k.session_id, kind, exit_message(ev), kernel=k.hostname)
    k.exit_code, k.oom_killed = ev.exit_code, ev.oom_killed


async def record_running_exit(life: Life, agent_id: str, ev: KernelExit) -> Outcome | None:
    """Records the exit of a RUNNING session's kernel; None when there is nothing to do."""

    async def step(db: AsyncSession) -> Outcome | None:
        s = await db.get(Session, ev.session_id, populate_existing=True)
        if s is None or s.status != SessionStatus.RUNNING:
            return None
        k = next((k for k in s.kernels if k.id == ev.kernel_id), None)
        if k is None or k.agent_id != agent_id:
            log.warning("agent %s reported an exit of a kernel it does not hold", agent_id)
            return None
        if k.status != KernelStatus.RUNNING:
            return None  # reported already
        await _mark(db, k, ev)
        if times.over_time(s, utcnow()):  # told to stop: the end once every kernel stopped
            end = times.grace_exit(s)
            return None if end is None else Outcome(SessionStatus.TERMINATED, *end)
        outcome = judge(s, k, ev, changes_of(db))
        if outcome is not None and outcome.ending == SessionStatus.RESTARTING:
            message = f"restart {s.restarts} of {s.max_restarts}: {k.hostname} {exit_message(ev)}"
            await record_event(db, s.id, "restart", message, RESTART_ACTOR, kernel=k.hostname)
        return outcome

    return await life.store.write(step)


async def record_exit_codes(life: Life, session_id: str, exits: Sequence[KernelExit]) -> None:
    """Keeps the exit codes of kernels that stopped while their session was prepared."""
    if not exits:
        return

    async def step(db: AsyncSession) -> None:
        s = await db.get(Session, session_id, populate_existing=True)
        if s is None:
            return
        by_id = {k.id: k for k in s.kernels}
        for ev in exits:
            if ev.kernel_id in by_id:
                await _mark(db, by_id[ev.kernel_id], ev)

    await life.store.write(step)
