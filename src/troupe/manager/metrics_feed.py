"""Feeds the utilisation history from the agents and keeps finished sessions' summaries.

Every :data:`POLL_SECONDS` it asks each reachable agent for the samples it took since the last
answer (:meth:`AgentBackend.metrics`); a request of the API asks the agents it concerns first
(:meth:`Feed.refresh`), so an answer is as fresh as the agents' last round. When a session
reaches a final status its summary is written to ``session_usage`` and its series dropped. An
agent that does not answer (or predates metrics) is skipped until the next poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Iterable

from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.errors import TroupeError
from troupe.api.lifecycle import SessionStatus
from troupe.api.metrics import AgentMetrics, UsageSummary
from troupe.manager.fleet import Fleet
from troupe.manager.metrics import History
from troupe.manager.store.models import SessionUsage
from troupe.manager.store.unit import Store

log = logging.getLogger(__name__)

#: Seconds between two polls of every agent.
POLL_SECONDS = 5.0
#: An agent asked less than this long ago is not asked again for a request.
FRESH_SECONDS = 0.5


class Feed:
    def __init__(self, fleet: Fleet, store: Store, poll: float = POLL_SECONDS) -> None:
        self.fleet, self.store, self.poll = fleet, store, poll
        self.history = History()
        #: agent -> time of the newest sample it sent (asked for what came after)
        self._seen: dict[str, float] = {}
        self._asked: dict[str, float] = {}
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._tasks: list[asyncio.Task[None]] = []
        self._quiet: set[str] = set()

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._poll_loop(), name="metrics-poll"),
            asyncio.create_task(self._ends_loop(), name="metrics-ends"),
        ]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

    async def refresh(self, agent_ids: Iterable[str], force: bool = False) -> None:
        """Takes what the given agents sampled since they were last asked."""
        reachable = self.fleet.reachable()
        await asyncio.gather(*(self._fetch(a, force) for a in set(agent_ids) if a in reachable))

    async def _fetch(self, agent_id: str, force: bool) -> None:
        async with self._locks[agent_id]:
            if not force and time.monotonic() - self._asked.get(agent_id, -1e9) < FRESH_SECONDS:
                return
            agent = self.fleet.get(agent_id)
            if agent is None:
                return
            self._asked[agent_id] = time.monotonic()
            try:
                answer = await agent.metrics(self._seen.get(agent_id))
            except TroupeError as e:
                if agent_id not in self._quiet:  # said once until it answers again
                    self._quiet.add(agent_id)
                    log.info("no metrics from agent %s: %s", agent_id, e)
                return
            self._quiet.discard(agent_id)
            self.ingest(agent_id, answer)

    def ingest(self, agent_id: str, m: AgentMetrics) -> None:
        newest = self._seen.get(agent_id, 0.0)
        for k in m.kernels:
            for s in k.samples:
                self.history.add_kernel(k.session_id, k.hostname, m.interval, s)
                newest = max(newest, s.t)
        for h in m.host:
            self.history.add_host(agent_id, m.interval, h)
            newest = max(newest, h.t)
        if newest:
            self._seen[agent_id] = newest

    async def _poll_loop(self) -> None:
        while True:
            await asyncio.sleep(self.poll)
            try:
                await self.refresh(self.fleet.reachable(), force=True)
                self.history.prune(time.time())
            except Exception:
                log.exception("fetching metrics failed")

    async def _ends_loop(self) -> None:
        with self.store.bus.subscribe() as changes:
            while True:
                c = await changes.get()
                if c.kind == "session" and SessionStatus(c.new).is_final:
                    try:
                        await self.finish(c.id)
                    except Exception:
                        log.exception("keeping the usage of session %s failed", c.id)

    async def finish(self, session_id: str) -> UsageSummary | None:
        """Stores the summary of a session that finished and drops its series (after taking
        the agents' last samples of it)."""
        await self.refresh(self.fleet.reachable())
        summary = self.history.finish(session_id, time.time())
        if summary is None:
            return None
        data = summary.model_dump(mode="json")

        async def step(db: AsyncSession) -> None:
            row = await db.get(SessionUsage, session_id)
            if row is None:
                db.add(SessionUsage(session_id=session_id, summary=data))
            else:
                row.summary = data

        await self.store.write(step)
        return summary
