"""The manager's own pauses, which are no silence of its agents.

When the manager's event loop is starved or stopped (heavy load, a suspended machine), the
agents' heartbeats cannot be taken meanwhile, and would all be found late at once: every agent
LOST, every session on them restarted or failed. So the time between two heartbeat checks
beyond their longest regular gap counts as paused, and an agent's silence is the time since its
last heartbeat less the pauses since then: after a pause, every agent still has what was left
of its time-out to be heard.
"""

from __future__ import annotations

from datetime import datetime


class PauseClock:
    def __init__(self) -> None:
        self._checked: datetime | None = None
        #: seconds paused in all
        self._total = 0.0
        #: agent -> ``_total`` when it was last heard here
        self._heard: dict[str, float] = {}

    def check(self, now: datetime, regular_gap: float) -> None:
        """A check at ``now``: the time since the last one beyond ``regular_gap`` was a pause."""
        if self._checked is not None:
            self._total += max(0.0, (now - self._checked).total_seconds() - regular_gap)
        self._checked = now

    def heard(self, agent_id: str) -> None:
        """The agent's heartbeat (or registration) was taken now."""
        self._heard[agent_id] = self._total

    def since_heard(self, agent_id: str) -> float:
        """Seconds paused since the agent was last heard here (none if it was not)."""
        return self._total - self._heard.get(agent_id, self._total)
