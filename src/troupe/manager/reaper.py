"""The reaper: ends sessions whose clocks ran out (docs/policies.md).

One task of the manager. Every ``reap_interval`` seconds at most (sooner when a deadline is
due) it reads the RUNNING sessions that have a time limit or an idle timeout and:

- at a session's time limit tells every kernel's processes to stop (SIGTERM), and after its
  ``stop_grace`` ends it ("time limit reached"; the exits step ends it sooner once every
  kernel stopped);
- keeps its ``idle_since`` (stored, so a restarted manager keeps the clock): None while
  someone is connected (:mod:`troupe.manager.presence`) or a kernel was busy lately, else
  since when neither; once idle for its ``idle_timeout`` the session is destroyed
  ("idle for 30 min").

Deadlines derive from stored times, so a restart loses none; a kernel told to stop before a
restart is told again. Ends go through the registry's teardown with the reason recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from sqlalchemy import or_, select, update

from troupe.api.durations import format_duration
from troupe.api.errors import TroupeError
from troupe.api.lifecycle import KernelStatus, SessionStatus
from troupe.api.session_times import deadline
from troupe.manager import kernel_io
from troupe.manager.life import times
from troupe.manager.metrics import KERNEL_COLUMNS, KernelSeries
from troupe.manager.metrics_feed import Feed
from troupe.manager.presence import Presence
from troupe.manager.registry import Registry
from troupe.manager.session_events import policy, record_event
from troupe.manager.store.models import Session

if TYPE_CHECKING:
    from sqlalchemy.engine import CursorResult

log = logging.getLogger(__name__)
S = SessionStatus

#: What a kernel's processes are told at the time limit: all of them (``kill -1`` reaches
#: every process but the container's init, which exits once its child does).
STOP_COMMAND = ["sh", "-c", "kill -TERM -1"]
#: A busy sample this recent keeps a session in use (a few of the agents' intervals and the
#: manager's polls: samples arrive in rounds).
ACTIVE_SECONDS = 15.0

_COLUMNS = (
    Session.id,
    Session.started_at,
    Session.time_limit,
    Session.stop_grace,
    Session.idle_timeout,
    Session.idle_since,
)


class Row(NamedTuple):
    """What the reaper reads of a session (:data:`_COLUMNS`)."""

    id: str
    started_at: datetime | None
    time_limit: int | None
    stop_grace: int
    idle_timeout: int | None
    idle_since: datetime | None


def _epoch(t: datetime | None) -> float | None:
    return None if t is None else t.timestamp()


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def last_busy(series: Iterable[KernelSeries], since: float, cpu: float, gpu: float) -> float | None:
    """The time of the newest sample after ``since`` in which some kernel used at least
    ``cpu`` cores or one of its GPUs at least ``gpu`` percent (None: none did)."""
    newest: float | None = None
    for k in series:
        for t, row in k.series.rows(since):
            utils = row[KERNEL_COLUMNS : KERNEL_COLUMNS + 2 * len(k.gpus) : 2]
            if row[0] >= cpu or any(not math.isnan(u) and u >= gpu for u in utils):
                newest = t if newest is None else max(newest, t)
    return newest


class Reaper:
    def __init__(
        self,
        registry: Registry,
        feed: Feed,
        presence: Presence,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.registry, self.feed, self.presence, self.clock = registry, feed, presence, clock
        self.config = registry.config
        #: before this, nothing is known of connections and samples (a restart, say)
        self.since = clock()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._busy: set[str] = set()  # sessions being stopped or ended
        self._signalled: dict[str, datetime] = {}  # session -> the deadline it was told at
        self._jobs: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="reaper")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._jobs) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    def wake(self) -> None:
        """Check now (a clock changed)."""
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            try:
                due = await self.tick()
            except Exception:
                log.exception("reaping failed")
                due = self.config.reap_interval
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.05, min(due, self.config.reap_interval))):
                    await self._wake.wait()
            self._wake.clear()

    async def tick(self) -> float:
        """One round; the seconds until the next deadline it knows of."""
        now = self.clock()
        async with self.registry.store() as db:
            found = (
                await db.execute(
                    select(*_COLUMNS).where(
                        Session.status == S.RUNNING,
                        or_(Session.time_limit.is_not(None), Session.idle_timeout.is_not(None)),
                    )
                )
            ).all()
            rows = [Row(*r) for r in found]
        by_session: defaultdict[str, list[KernelSeries]] = defaultdict(list)
        for (sid, _), k in self.feed.history.kernels.items():
            by_session[sid].append(k)
        due = math.inf
        for r in rows:
            if r.id in self._busy:
                continue
            if r.time_limit is not None:
                due = min(due, self._time_limit(r, now))
            if r.idle_timeout is not None and r.id not in self._busy:  # (not ending now)
                due = min(due, await self._idle(r, r.idle_timeout, now, by_session[r.id]))
        running = {r.id for r in rows}
        for sid in [s for s in self._signalled if s not in running]:
            del self._signalled[sid]
        self.presence.forget(running)
        return due - now if due != math.inf else math.inf

    # -- the time limit ------------------------------------------------------------------
    def _time_limit(self, r: Row, now: float) -> float:
        """Stops or ends the session when due; when the next step is due."""
        at = deadline(r.started_at, r.time_limit)
        if at is None:
            return math.inf
        stop, end = at.timestamp(), at.timestamp() + r.stop_grace
        if now >= end:
            self._job(r.id, self._end_time_limit(r.id), "time-limit-end")
            return math.inf
        if now >= stop:
            if self._signalled.get(r.id) != at:  # (a later deadline, after a change: again)
                self._signalled[r.id] = at
                self._job(r.id, self._stop(r.id), "time-limit-stop", hold=False)
            return end
        return stop

    async def _stop(self, session_id: str) -> None:
        """SIGTERM to every process of every running kernel."""
        s = await self.registry.get(session_id)
        fleet = self.registry.fleet

        async def one(k: Any) -> None:
            try:
                agent = kernel_io.agent_of(fleet, k)
                async for _ in agent.exec_stream(k.container_id, STOP_COMMAND, user="root"):
                    pass
            except TroupeError as e:
                log.info("telling %s of session %s to stop failed: %s", k.hostname, s.id, e)

        running = [k for k in s.kernels if k.status == KernelStatus.RUNNING and k.container_id]
        log.info("session %s reached its time limit: stopping %d kernel(s)", s.id, len(running))
        async with self.registry.store() as db:
            message = f"time limit reached: SIGTERM to every kernel, ends within {s.stop_grace} s"
            await record_event(db, s.id, "time-limit", message, policy("time_limit"))
            await db.commit()
        await asyncio.gather(*(one(k) for k in running))

    async def _end_time_limit(self, session_id: str) -> None:
        s = await self.registry.get(session_id)
        if s.status != S.RUNNING:
            return
        info, code = times.time_limit_end(s)
        await self.registry.end(session_id, S.TERMINATED, info, code, actor=policy("time_limit"))

    # -- idle reclaim --------------------------------------------------------------------
    def _quiet_since(
        self, r: Row, now: float, series: list[KernelSeries], stored: float | None
    ) -> float | None:
        """Since when the session is idle (None: in use now)."""
        if self.presence.connected(r.id):
            return None
        window = stored if stored is not None else now - (r.idle_timeout or 0) - ACTIVE_SECONDS
        busy = last_busy(series, window, self.config.idle_cpu, self.config.idle_gpu)
        if busy is not None and busy >= now - ACTIVE_SECONDS:
            return None
        marks = [_epoch(r.started_at) or now, busy, self.presence.last_seen(r.id)]
        # with no stored mark, nothing before this manager's start is known of the session
        marks.append(stored if stored is not None else self.since)
        return max(m for m in marks if m is not None)

    async def _idle(
        self, r: Row, idle_timeout: int, now: float, series: list[KernelSeries]
    ) -> float:
        stored = _epoch(r.idle_since)
        quiet = self._quiet_since(r, now, series, stored)
        same = quiet == stored or (quiet and stored and abs(quiet - stored) < 0.5)
        if not same:
            since = None if quiet is None else _utc(quiet)
            warn = stored is None and since is not None  # a new idle spell: say when it ends
            await self._store_idle(r.id, since, idle_timeout if warn else None)
        if quiet is None:
            return now + ACTIVE_SECONDS
        end = quiet + idle_timeout
        if now < end:
            return end
        self._job(r.id, self._end_idle(r.id, idle_timeout), "idle-end")
        return math.inf

    async def _store_idle(
        self, session_id: str, since: datetime | None, warn: int | None = None
    ) -> None:
        """Stores the idle clock; with ``warn`` (the idle timeout), the session's event list
        gets an ``idle-warning`` saying when it will be reclaimed unless used."""
        # A plain UPDATE, not a versioned ORM write: only the reaper writes idle_since, and a
        # version bump would make every other writer of the session retry.
        async with self.registry.store() as db:
            done = await db.execute(
                update(Session)
                .where(Session.id == session_id, Session.status == S.RUNNING)
                .values(idle_since=since)
                .execution_options(synchronize_session=False)
            )
            if warn is not None and since is not None and cast("CursorResult[Any]", done).rowcount:
                ends = since.timestamp() + warn
                message = (
                    f"idle since {since:%H:%M:%S} UTC: reclaimed at"
                    f" {_utc(ends):%H:%M:%S} UTC unless used (idle_timeout"
                    f" {format_duration(warn)})"
                )
                await record_event(db, session_id, "idle-warning", message, policy("idle_timeout"))
            await db.commit()

    async def _end_idle(self, session_id: str, idle_timeout: int) -> None:
        """Destroys the session unless the agents' latest samples show it busy after all."""
        await self.feed.refresh(self.registry.fleet.reachable())
        now = self.clock()
        async with self.registry.store() as db:
            r = Row(*(await db.execute(select(*_COLUMNS).where(Session.id == session_id))).one())
        series = [k for (sid, _), k in self.feed.history.kernels.items() if sid == session_id]
        quiet = self._quiet_since(r, now, series, _epoch(r.idle_since))
        if quiet is None or now < quiet + idle_timeout:
            if quiet is None:
                await self._store_idle(session_id, None)
            return
        log.info("session %s idle since %s: destroying it", session_id, _utc(quiet))
        await self.registry.end(
            session_id,
            S.TERMINATED,
            times.idle_end(idle_timeout, _utc(quiet)),
            actor=policy("idle_timeout"),
        )

    # -- jobs ------------------------------------------------------------------------------
    def _job(self, session_id: str, coro: Any, name: str, hold: bool = True) -> None:
        """Runs ``coro`` as a task; with ``hold``, the session is left alone until it ends."""
        if hold:
            self._busy.add(session_id)

        async def run() -> None:
            try:
                await coro
            except Exception:
                log.exception("%s of session %s failed", name, session_id)
            finally:
                if hold:
                    self._busy.discard(session_id)

        task = asyncio.create_task(run(), name=f"{name}-{session_id}")
        self._jobs.add(task)
        task.add_done_callback(self._jobs.discard)
