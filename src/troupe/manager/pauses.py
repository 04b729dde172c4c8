"""The manager's own pauses, which are no silence of its agents.

When the manager's event loop is starved or stopped (heavy load, a suspended machine), the
agents' heartbeats cannot be taken meanwhile, and would all be found late at once: every agent
LOST, every session on them restarted or failed. So a ticker task measures the event loop's own
lateness: it sleeps :data:`TICK` seconds, and what it oversleeps beyond :data:`TOLERANCE` was a
stall, when no heartbeat could be handled. An await that waits long (a hung call to a silent
agent) is no stall: the loop runs on, and the ticker with it. An agent's silence is the time
since its last heartbeat less the stalls' overlap with that time, so a heartbeat taken after a
stall gets no credit for it; the stall still under way counts up to now.
"""

from __future__ import annotations

import asyncio
from collections import deque
from datetime import datetime, timedelta

from troupe.api.lifecycle import utcnow

#: Seconds the ticker sleeps.
TICK = 0.1
#: Seconds it may oversleep before that counts as a stall (a busy loop, not a stopped one).
TOLERANCE = 0.1


class PauseClock:
    def __init__(self, keep: float) -> None:
        #: stalls older than this are forgotten (no ALIVE agent's silence reaches that far)
        self._keep = timedelta(seconds=keep)
        #: the stalls, (start, end), oldest first
        self._stalls: deque[tuple[datetime, datetime]] = deque()
        #: when the ticker's sleep is over at the latest (None: it is not running)
        self._due: datetime | None = None

    def __len__(self) -> int:
        """The stalls remembered."""
        return len(self._stalls)

    def sleeping(self, now: datetime, seconds: float) -> None:
        """The ticker sleeps ``seconds`` from ``now``."""
        self._due = now + timedelta(seconds=seconds + TOLERANCE)

    def woke(self, now: datetime) -> None:
        """The ticker woke at ``now``: since it was due, the loop stood still."""
        if self._due is not None and now > self._due:
            self._stalls.append((self._due, now))
        self._due = None
        while self._stalls and self._stalls[0][1] < now - self._keep:
            self._stalls.popleft()

    def paused(self, since: datetime, now: datetime) -> float:
        """Seconds the loop stood still between ``since`` (an agent's last heartbeat) and
        ``now``, the stall under way (the ticker is late) included."""
        stalls = list(self._stalls)
        if self._due is not None and now > self._due:
            stalls.append((self._due, now))
        return sum(
            max(0.0, (min(end, now) - max(start, since)).total_seconds()) for start, end in stalls
        )

    async def run(self) -> None:
        """The ticker, until cancelled."""
        try:
            while True:
                self.sleeping(utcnow(), TICK)
                await asyncio.sleep(TICK)
                self.woke(utcnow())
        finally:
            self._due = None
