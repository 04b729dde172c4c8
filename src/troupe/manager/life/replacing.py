"""Re-placement: a session that lost a kernel's agent (LOST: no heartbeat) while it was
SCHEDULED, PREPARING, RUNNING or RESTARTING, with restarts left, is placed again instead of
failing (docs/policies.md).

-> RESTARTING (the lost agent's first kernel in the restart history, with the agent, a
``restart`` event; one restart counted, whatever the phase), then what is left of the failed
attempt is removed (the kernels on the agents still there, their logs saved as that
attempt's, and its network unless the lost host may still hold a container in it), and
RESTARTING -> PENDING with every kernel PENDING and
unplaced: from there the session goes the way of a new one, through the scheduler (its
why-pending report while nothing fits, ``max_pending_seconds`` counted from this PENDING),
SCHEDULED and PREPARING (a new network, every kernel made anew) to RUNNING, with
``TROUPE_RESTART_COUNT`` the session's ``restarts``. The lost agent's containers are removed
once it is back (:meth:`troupe.manager.fleet.Fleet.sweep_orphans`, and here when it comes back
while they are being removed). A manager restarted in between goes on from the database: a
RESTARTING session whose last restart names a lost agent is placed again
(:mod:`.reconcile`).
"""

from __future__ import annotations

import asyncio
from enum import StrEnum
from typing import Any, NamedTuple

from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.lifecycle import KernelStatus, SessionStatus, transition
from troupe.manager.life.context import Life, load
from troupe.manager.life.judging import RESTART_ACTOR, restarting
from troupe.manager.session_events import record_event
from troupe.manager.store.models import Session
from troupe.manager.store.unit import changes_of

S, K = SessionStatus, KernelStatus

#: The phases in which a lost agent's session follows its restart rule (its kernels are
#: placed, made or running on agents).
REPLACEABLE = frozenset({S.SCHEDULED, S.PREPARING, S.RUNNING, S.RESTARTING})


class Verdict(StrEnum):
    """What a lost agent means for one of its sessions."""

    #: a restart counted; the session is placed again
    REPLACE = "replace"
    #: it is being placed again already (after another agent's loss): nothing more to do
    UNDER_WAY = "under way"
    #: no restart left (or not a phase that restarts): it fails with ``agent lost``
    FAIL = "fail"


class Judged(NamedTuple):
    """A verdict with the session's restarts as it was judged (an ``agent lost`` failure
    names them), so that the caller does not load the session again."""

    verdict: Verdict
    restarts: int


def lost_agent(s: Session) -> str | None:
    """The agent whose loss the session's running restart is about (None: a kernel's failure,
    or no restart under way)."""
    last: dict[str, Any] = (s.restart_history or [{}])[-1]
    return str(last["agent"]) if s.status == S.RESTARTING and last.get("agent") else None


def verdict(s: Session) -> Verdict:
    if lost_agent(s) is not None:
        return Verdict.UNDER_WAY
    if s.status in REPLACEABLE and s.restarts < s.max_restarts:
        return Verdict.REPLACE
    return Verdict.FAIL


def judged(s: Session) -> Judged:
    return Judged(verdict(s), s.restarts)


async def judge(life: Life, session_id: str) -> Judged:
    """The verdict on the session as it is now (read only: the caller stops the session's
    preparer, if any, before :func:`begin` writes it)."""
    async with life.store() as db:
        return judged(await load(db, session_id))


async def begin(life: Life, session_id: str, agent_id: str, host: str, message: str) -> Judged:
    """-> RESTARTING for a session whose kernel ``host`` was on the lost agent, when it has
    restarts left (:attr:`Verdict.REPLACE`); nothing changed otherwise. The session is read
    again in this transaction: it may have moved on while its preparer was stopped."""

    async def step(db: AsyncSession) -> Judged:
        s = await load(db, session_id)
        found = judged(s)
        if found.verdict != Verdict.REPLACE:
            return found
        reason = f"agent {agent_id} lost" + (f": {message}" if message else "")
        failure = {
            "kernel": host,
            "reason": reason,
            "exit_code": None,
            "oom_killed": False,
            "agent": agent_id,
        }
        was = s.status
        restarting(s, failure, f"lost with agent {agent_id}", changes_of(db))
        text = f"restart {s.restarts} of {s.max_restarts}: {host} lost with agent {agent_id}"
        if was != S.RUNNING:
            text += f" (while {was})"
        await record_event(db, s.id, "restart", text, RESTART_ACTOR, kernel=host)
        return Judged(Verdict.REPLACE, s.restarts)

    return await life.store.write(step)


async def place_again(life: Life, session_id: str) -> None:
    """What is left of the failed attempt removed; RESTARTING -> PENDING, every kernel
    unplaced (nothing, if the session left RESTARTING meanwhile: a destroy)."""
    s = await life.session(session_id)
    if s.status != S.RESTARTING:
        return
    saved = await _remove_attempt(life, session_id, {k.agent_id for k in s.kernels if k.agent_id})
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


async def _remove_attempt(life: Life, session_id: str, agents: set[str]) -> dict[str, str]:
    """The failed attempt's kernels removed from ``agents``; the LOST ones are skipped, unless
    one is back meanwhile: its part is removed then, before its kernels are unplaced (once
    they are, the scheduler may place them there again, with the same container names).
    Its networks go too once no LOST agent holds a kernel of it: an overlay cannot be removed
    while a container on another host is in it (the engine would refuse for seconds), and
    the next attempt's network has a name of its own; the session's end removes them all.
    Returns the kernels' logs."""
    saved: dict[str, str] = {}
    done: set[str] = set()
    while todo := (agents - done) & set(life.fleet.reachable()):
        saved.update(await life.fleet.remove_session(session_id, todo, networks=False))
        done |= todo
    if done == agents:
        await life.fleet.remove_session(session_id, set())
    return saved
