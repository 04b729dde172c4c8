"""Which why-pending reports a placing pass must write, without looking at every waiting
session: sessions of one group and shape share their report (it names the agents closest to
fitting the shape), and it changes only when the group's agents do (a session ended or was
placed, an agent came, went or changed) or the LOST agents do.

So the reports are kept per shape: the lines last written for it, and the sessions whose
stored report is not those lines (new ones, or read at start); a pass asks the backlog again
for the shapes of the groups that changed and for those with such sessions, and writes only
the sessions whose report is not the one asked.
"""

from __future__ import annotations

from collections.abc import Container, Iterable

from troupe.manager.life.pending_feed import Waiting
from troupe.manager.scheduler_backlog import Backlog, queue_key
from troupe.manager.scheduler_queues import QueueKey


class Reports:
    def __init__(self) -> None:
        self.members: dict[QueueKey, set[str]] = {}
        self.of_group: dict[str, set[QueueKey]] = {}
        #: the lines stored for every session of the shape but those ``behind``
        self.said: dict[QueueKey, list[str]] = {}
        #: shape -> session -> the lines stored for it (None: none) where they may not be
        #: ``said``'s
        self.behind: dict[QueueKey, dict[str, list[str] | None]] = {}

    def add(self, sid: str, w: Waiting) -> None:
        key = queue_key(w.request)
        self.members.setdefault(key, set()).add(sid)
        self.of_group.setdefault(key[0], set()).add(key)
        if w.shown is None or w.shown != self.said.get(key):
            self.behind.setdefault(key, {})[sid] = w.shown

    def remove(self, sid: str, w: Waiting) -> None:
        key = queue_key(w.request)
        members = self.members.get(key)
        if members is not None:
            members.discard(sid)
        self.behind.get(key, {}).pop(sid, None)

    def due(
        self, backlog: Backlog, groups: Iterable[str], placed: Container[str]
    ) -> dict[str, list[str]]:
        """The sessions whose stored report differs from the backlog's (on the agents as
        the pass left them) and their lines; ``groups``: those whose agents changed.
        ``placed``: sessions just placed (still members, no report)."""
        keys = {k for g in groups for k in self.of_group.get(g, ())}
        keys.update(k for k, b in self.behind.items() if b)
        out: dict[str, list[str]] = {}
        for key in keys:
            members = self.members.get(key)
            first = next((s for s in members or () if s not in placed), None)
            if first is None:
                self._drop(key)
                continue
            assert members is not None
            lines = backlog.why(first)
            behind = self.behind.pop(key, {})
            if lines != self.said.get(key):
                for sid in members:
                    if sid not in placed and (sid not in behind or behind[sid] != lines):
                        out[sid] = lines
            else:
                for sid, shown in behind.items():
                    if sid not in placed and shown != lines:
                        out[sid] = lines
            self.said[key] = lines
        return out

    def _drop(self, key: QueueKey) -> None:
        """A shape no waiting session has any more."""
        if not self.members.get(key):
            self.members.pop(key, None)
            self.said.pop(key, None)
            self.behind.pop(key, None)
            keys = self.of_group.get(key[0])
            if keys is not None:
                keys.discard(key)
