"""The manager's own pauses are no silence of its agents (manager/pauses.py): the time between
two heartbeat checks beyond their longest regular gap counts for every agent heard before it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from troupe.manager.pauses import PauseClock

T0 = datetime(2026, 1, 1, tzinfo=UTC)
GAP = 1 / 3  # the longest regular gap between two checks (agent time-out 1 s)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_regular_checks_pause_nothing() -> None:
    p = PauseClock()
    p.heard("a")
    for i in range(10):
        p.check(at(i * 0.3), GAP)
    assert p.since_heard("a") == 0


def test_a_stall_counts_for_the_agents_heard_before_it() -> None:
    p = PauseClock()
    p.check(at(0), GAP)
    p.heard("a")
    p.check(at(2.0), GAP)  # the loop stood still for about 2 s
    assert p.since_heard("a") == pytest.approx(2.0 - GAP)
    p.heard("b")  # heard after it: nothing for b
    p.check(at(2.3), GAP)
    assert p.since_heard("b") == 0 and p.since_heard("a") == pytest.approx(2.0 - GAP)
    assert p.since_heard("never-heard-here") == 0
    p.heard("a")
    assert p.since_heard("a") == 0
