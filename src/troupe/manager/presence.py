"""Who is connected to which session: the one place that knows (docs/policies.md, "Idle
reclaim").

Shells, execs, tunnels (ssh, forward, cp), terminals and app requests each hold a
:class:`Connection` while open (through their stream slot, :mod:`troupe.manager.streams`, or
the app proxy); the reaper asks :meth:`Presence.connected` and :meth:`Presence.last_seen`.
Counts live in this process only: a manager restart ends every connection anyway.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from starlette.datastructures import State


class Connection:
    """One open connection to a session; :meth:`close` is idempotent."""

    def __init__(self, presence: Presence, session_id: str) -> None:
        self._presence, self.session_id = presence, session_id
        self.closed = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._presence._close(self.session_id)

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Presence:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._open: Counter[str] = Counter()
        #: session -> when its last connection opened or closed (epoch seconds)
        self._seen: dict[str, float] = {}

    def hold(self, session_id: str) -> Connection:
        """A connection to ``session_id``, open until closed: the session is not idle."""
        self._open[session_id] += 1
        self._seen[session_id] = self.clock()
        return Connection(self, session_id)

    def _close(self, session_id: str) -> None:
        self._open[session_id] -= 1
        if self._open[session_id] <= 0:
            del self._open[session_id]
        self._seen[session_id] = self.clock()

    def touch(self, session_id: str) -> None:
        """The session was used just now without a connection (its idle timeout changed)."""
        self._seen[session_id] = self.clock()

    def connected(self, session_id: str) -> bool:
        return self._open[session_id] > 0

    def last_seen(self, session_id: str) -> float | None:
        """When a connection to the session last opened or closed (None: none since start)."""
        return self._seen.get(session_id)

    def forget(self, keep: set[str]) -> None:
        """Drops what it knows of sessions not in ``keep`` without open connections."""
        for sid in [s for s in self._seen if s not in keep and not self._open[s]]:
            del self._seen[sid]


def presence_of(state: State) -> Presence:
    """The app's presence, made on first use."""
    presence: Presence | None = getattr(state, "presence", None)
    if presence is None:
        presence = state.presence = Presence()
    return presence
