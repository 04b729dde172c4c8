"""Exits: a kernel stopped on its own. Fail-fast for the session, or the end of a batch.

Exits of sessions still being prepared go to their preparer (see preparing.py); this module
handles those of RUNNING sessions and records exit codes. Only the agent that holds a kernel
may report its exit.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.agent import KernelExit
from troupe.api.lifecycle import KernelStatus, SessionStatus, transition, utcnow
from troupe.api.models import SessionType, format_size
from troupe.manager.life import times
from troupe.manager.life.context import Life
from troupe.manager.session_events import record_event
from troupe.manager.store.models import Kernel, Session
from troupe.manager.store.unit import changes_of

log = logging.getLogger(__name__)
S = SessionStatus


@dataclass(frozen=True)
class Outcome:
    """How the session ends because of the exit."""

    ending: SessionStatus
    info: dict[str, Any]
    exit_code: int | None = None


#: At most this much of a log line becomes a failure's message.
MESSAGE_CHARS = 500


def exit_info(ev: KernelExit, hostname: str, preparing: bool) -> dict[str, Any]:
    """The session's status_info after a kernel's exit: which kernel, how, its last logs."""
    reason = "kernel ran out of memory" if ev.oom_killed else "kernel exited"
    if preparing:
        reason += " while the session was being prepared"
    info: dict[str, Any] = {
        "reason": reason,
        "kernel": hostname,
        "exit_code": ev.exit_code,
        "oom_killed": ev.oom_killed,
    }
    # The engine's error; while preparing, else the kernel's last words: a command that could
    # not run at all fails in Docker's init, after the container started, and says why only
    # in its output (which one of the start's own checks may or may not have seen first).
    said = [line.strip() for line in ev.last_logs if line.strip()] if preparing else []
    message = ev.error or (said[-1][:MESSAGE_CHARS] if said else "")
    if message:
        info["message"] = message
    info["last_logs"] = ev.last_logs
    return info


def batch_info(ev: KernelExit, hostname: str, mem: int) -> dict[str, Any]:
    """The session's status_info when its batch command (main1) ended: its exit code, and
    whether the kernel was killed for memory (the exit code alone, 137, does not say)."""
    if not ev.oom_killed:
        return {"reason": "batch command finished", "exit_code": ev.exit_code}
    return {
        "reason": f"{hostname} killed: out of memory (limit {format_size(mem)})",
        "kernel": hostname,
        "exit_code": ev.exit_code,
        "oom_killed": True,
    }


def exit_message(ev: KernelExit) -> str:
    """The event of an exit, in words."""
    if ev.oom_killed:
        return f"killed: out of memory (exit code {ev.exit_code})"
    return f"exited with code {ev.exit_code}"


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
            return None if end is None else Outcome(S.TERMINATED, *end)
        if s.type == SessionType.BATCH and k.role == "main":
            return Outcome(
                SessionStatus.TERMINATED, batch_info(ev, k.hostname, s.mem), ev.exit_code
            )
        return Outcome(SessionStatus.ERROR, exit_info(ev, k.hostname, preparing=False))

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
