"""Who waits on status changes: ``/wait`` long-polls, the scheduler, live views.

Changes are published only after the transaction that made them commits (see
:mod:`troupe.manager.store.unit`), so a waiter that re-reads the database sees them. Subscribe
before reading the state a waiter starts from, so that no change is missed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence

from troupe.api.lifecycle import Change


class ChangeBus:
    def __init__(self) -> None:
        self._queues: set[asyncio.Queue[Change]] = set()

    def publish(self, changes: Sequence[Change]) -> None:
        if not changes:
            return
        for q in self._queues:
            for c in changes:
                q.put_nowait(c)

    @contextlib.contextmanager
    def subscribe(self) -> Iterator[asyncio.Queue[Change]]:
        """A queue of every change published while the block runs."""
        q: asyncio.Queue[Change] = asyncio.Queue()
        self._queues.add(q)
        try:
            yield q
        finally:
            self._queues.discard(q)
