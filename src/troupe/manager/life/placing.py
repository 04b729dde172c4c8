"""Placing: a pass of the scheduler over the PENDING sessions, written in one transaction.

The decision is the pure :class:`troupe.manager.scheduler_backlog.Backlog`'s. The manager
keeps one backlog between passes (:class:`Placer`): it is built from the database once, then
each pass feeds it only what changed since the last one, as the change bus told (sessions
that entered or left PENDING, agents whose capacity or use changed), cancels sessions pending
too long, records the placements (SCHEDULED) and writes the why-pending reports that changed.
Any failure drops the backlog: the next pass builds it again from the database, so it never
believes a placement that did not commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from dataclasses import dataclass, field
from datetime import datetime
from typing import cast

from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import raiseload

from troupe.api.lifecycle import Change, KernelStatus, SessionStatus, transition, utcnow
from troupe.manager.life.admission import lost_states
from troupe.manager.life.context import Life
from troupe.manager.life.pending_feed import Waiting, chunks, holders, load_waiting
from troupe.manager.life.pending_reports import Reports
from troupe.manager.life.teardown import wipe_keys
from troupe.manager.scheduler import AgentState, assign_gpus
from troupe.manager.scheduler_backlog import Backlog
from troupe.manager.session_events import SCHEDULER
from troupe.manager.store.models import Session
from troupe.manager.store.unit import changes_of

S = SessionStatus
_TABLE = cast(Table, Session.__table__)


@dataclass
class Pass:
    placed: list[str] = field(default_factory=list)
    #: seconds until a pending session's max_pending_seconds runs out (next pass due)
    next_due: float | None = None


@dataclass
class _Outcome:
    """What one pass decided, for its write."""

    expired: list[str]
    placements: dict[str, list[str]]
    reports: dict[str, list[str]]
    gpu_ids: dict[str, list[str]]


async def place_pending(life: Life) -> Pass:
    """One pass over a backlog built from the database (no backlog kept)."""
    return await Placer(life).place()


class Placer:
    """The backlog kept between the manager's placing passes (passes run one at a time: the
    registry's scheduler loop is their only caller). Without :meth:`listen` each pass builds
    the backlog afresh."""

    def __init__(self, life: Life) -> None:
        self.life = life
        self.backlog: Backlog | None = None
        self.waiting: dict[str, Waiting] = {}
        self.reports = Reports()
        #: placed session -> the agents its kernels hold
        self.held_by: dict[str, set[str]] = {}
        #: ALIVE agent -> (its group, its free GPUs' UUIDs)
        self.agents: dict[str, tuple[str, tuple[str, ...]]] = {}
        self._dues: list[tuple[datetime, str]] = []
        self._lost: frozenset[str] | None = None
        self._changes: asyncio.Queue[Change] | None = None
        self._stack = contextlib.ExitStack()
        self._sessions: set[str] = set()
        self._touched: set[str] = set()

    # -- what changed ----------------------------------------------------------------------
    def listen(self) -> None:
        """Keeps the backlog from here on: changes committed from now are fed to it."""
        if self._changes is None:
            self._changes = self._stack.enter_context(self.life.store.bus.subscribe())

    def close(self) -> None:
        self._stack.close()
        self._changes = None

    def touch_agent(self, agent_id: str) -> None:
        """The agent's capacity may have changed without a status change (it registered
        again): the next pass reads it again."""
        self._touched.add(agent_id)

    def _drain(self) -> None:
        if self._changes is None:
            self.backlog = None
            return
        while not self._changes.empty():
            c = self._changes.get_nowait()
            if c.kind == "session":
                self._sessions.add(c.id)
            elif c.kind == "agent":
                self._touched.add(c.id)

    # -- the pass --------------------------------------------------------------------------
    async def place(self) -> Pass:
        try:
            return await self._place()
        except BaseException:
            self.backlog = None  # it may be ahead of the database: built again next pass
            raise

    async def _place(self) -> Pass:
        self._drain()
        groups: set[str] = set()
        async with self.life.store() as db:
            if self.backlog is None:
                await self._rebuild(db)
            else:
                await self._refresh(db, groups)
        backlog = self.backlog
        assert backlog is not None
        result = Pass()
        if not self.waiting:
            return result
        now = utcnow()
        expired = self._expired(now)
        decision = backlog.run(report=False)
        for agent_ids in decision.placements.values():
            groups.update(self.agents[a][0] for a in agent_ids)
        reports = self.reports.due(backlog, groups, decision.placements)
        gpu_ids = {a: list(self.agents[a][1]) for p in decision.placements.values() for a in p}
        outcome = _Outcome(expired, decision.placements, reports, gpu_ids)
        skipped = await self.life.store.write(lambda db: _write(db, self.waiting, outcome, now))
        for sid in decision.placements:
            self._forget(sid)
            if sid in skipped:  # left PENDING meanwhile: what the backlog holds for it is not
                self._touched.update(decision.placements[sid])
            else:  # (its end may come before the next pass: its agents are known now)
                self.held_by[sid] = set(decision.placements[sid])
                result.placed.append(sid)
        result.next_due = self._next_due(now)
        return result

    async def _rebuild(self, db: AsyncSession) -> None:
        self._sessions, self._touched = set(), set()
        self._lost = frozenset(self.life.fleet.lost)
        states = await self.life.fleet.states(db)
        self.backlog = Backlog(states, await lost_states(self.life, db))
        self.agents = {a.id: (a.group, a.gpu_free_ids) for a in states}
        self.waiting = await load_waiting(db)
        self.reports = Reports()
        self._dues = []
        self.backlog.add_all(w.request for w in self.waiting.values())
        for sid, w in self.waiting.items():
            self._index(sid, w)
        self.held_by = await holders(db)

    async def _refresh(self, db: AsyncSession, groups: set[str]) -> None:
        """Feeds the backlog what changed; adds to ``groups`` those whose agents changed."""
        backlog = self.backlog
        assert backlog is not None
        sessions, self._sessions = self._sessions, set()
        touched, self._touched = self._touched, set()
        if sessions:
            fresh = await load_waiting(db, sessions)
            held = await holders(db, sessions)
            for sid in sessions:
                touched |= self.held_by.pop(sid, set()) | held.get(sid, set())
                if sid in held:
                    self.held_by[sid] = held[sid]
                w = fresh.get(sid)
                if w is None:
                    self._forget(sid)
                    backlog.remove(sid)
                elif sid not in self.waiting:
                    self._index(sid, w)
                    backlog.add(w.request)
        if touched:
            states = {a.id: a for a in await self.life.fleet.states(db, touched)}
            for agent_id in touched:
                self._set_agent(backlog, agent_id, states.get(agent_id), groups)
        lost = frozenset(self.life.fleet.lost)
        if touched or lost != self._lost:
            self._lost = lost
            was = backlog.lost
            backlog.lost = await lost_states(self.life, db)
            if list(was) != list(backlog.lost):
                groups.update(a.group for a in [*was, *backlog.lost])

    def _set_agent(
        self, backlog: Backlog, agent_id: str, state: AgentState | None, groups: set[str]
    ) -> None:
        old = self.agents.pop(agent_id, None)
        if old is not None:
            groups.add(old[0])
        if state is None:  # not ALIVE (LOST), or gone
            backlog.remove_agent(agent_id)
            return
        backlog.set_agent(state)
        self.agents[agent_id] = (state.group, state.gpu_free_ids)
        groups.add(state.group)

    def _index(self, sid: str, w: Waiting) -> None:
        self.waiting[sid] = w
        self.reports.add(sid, w)
        if w.due is not None:
            heapq.heappush(self._dues, (w.due, sid))

    def _forget(self, sid: str) -> None:
        w = self.waiting.pop(sid, None)
        if w is not None:
            self.reports.remove(sid, w)

    def _expired(self, now: datetime) -> list[str]:
        """The sessions whose max_pending_seconds ran out, out of the backlog."""
        out = []
        while self._dues and self._dues[0][0] <= now:
            due, sid = heapq.heappop(self._dues)
            w = self.waiting.get(sid)
            if w is not None and w.due == due:
                out.append(sid)
                self._forget(sid)
                assert self.backlog is not None
                self.backlog.remove(sid)
        return out

    def _next_due(self, now: datetime) -> float | None:
        while self._dues:
            due, sid = self._dues[0]
            w = self.waiting.get(sid)
            if w is not None and w.due == due:
                return (due - now).total_seconds() + 0.05
            heapq.heappop(self._dues)
        return None


async def _write(
    db: AsyncSession, waiting: dict[str, Waiting], outcome: _Outcome, now: datetime
) -> set[str]:
    """Records the pass; the placed sessions that were no longer PENDING (skipped)."""
    changes = changes_of(db)
    for s in await _pending(db, outcome.expired):
        limit = f"max_pending_seconds ({s.max_pending_seconds:g} s)"
        reason = f"pending longer than {limit}"
        s.status_info = {**s.status_info, "reason": reason}
        transition(s, S.CANCELLED, changes, now, reason=reason, actor=SCHEDULER)
        for k in s.kernels:
            transition(k, KernelStatus.TERMINATED, changes, now)
        wipe_keys(s)
    free_gpus = {a: list(ids) for a, ids in outcome.gpu_ids.items()}
    placed = {s.id: s for s in await _pending(db, list(outcome.placements))}
    for sid, agent_ids in outcome.placements.items():
        row = placed.get(sid)
        if row is None:
            continue
        gpus = assign_gpus(free_gpus, agent_ids, [k.gpu for k in row.kernels])
        for k, agent_id, devices in zip(row.kernels, agent_ids, gpus, strict=True):
            k.agent_id, k.gpus = agent_id, devices
        row.status_info = {}
        where = ", ".join(sorted(set(agent_ids)))
        transition(row, S.SCHEDULED, changes, now, reason=f"placed on {where}", actor=SCHEDULER)
    if outcome.reports:
        # a plain UPDATE (no row loaded); the version moves as an ORM write's would
        stmt = (
            update(_TABLE)
            .where(_TABLE.c.id == bindparam("sid"), _TABLE.c.status == S.PENDING)
            .values(status_info=bindparam("info"), version=_TABLE.c.version + 1)
        )
        await db.execute(
            stmt,
            [
                {"sid": sid, "info": {"pending": waiting[sid].report(lines)}}
                for sid, lines in outcome.reports.items()
            ],
        )
    return set(outcome.placements) - set(placed)


async def _pending(db: AsyncSession, ids: list[str]) -> list[Session]:
    """The sessions of ``ids`` that are still PENDING, with their kernels."""
    out: list[Session] = []
    for chunk in chunks(ids):
        rows = await db.execute(
            select(Session)
            .where(Session.id.in_(chunk), Session.status == S.PENDING)
            .options(raiseload(Session.owner))
        )
        out.extend(rows.scalars())
    return out
