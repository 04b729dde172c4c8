"""The manager's own pauses are no silence of its agents (manager/pauses.py): what the ticker
oversleeps beyond its tolerance is a stall of the event loop, and an agent's silence is reduced
by the stalls' overlap with the time since its last heartbeat, no more."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from troupe.manager.pauses import TICK, TOLERANCE, PauseClock

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def ticks(p: PauseClock, start: float, end: float) -> None:
    """The ticker on time from ``start`` to ``end``."""
    t = start
    while t < end:
        p.sleeping(at(t), TICK)
        t += TICK
        p.woke(at(t))


def test_regular_ticks_pause_nothing() -> None:
    p = PauseClock(keep=10)
    ticks(p, 0, 3)
    assert p.paused(at(0), at(3)) == 0 and len(p) == 0


def test_a_stall_counts_for_the_agents_heard_before_it() -> None:
    p = PauseClock(keep=10)
    p.sleeping(at(0), TICK)
    # the loop stands still for 2 s: a check that runs before the ticker counts it too
    assert p.paused(at(-1), at(2.0)) == pytest.approx(2.0 - TICK - TOLERANCE)
    p.woke(at(2.0))
    assert p.paused(at(-1), at(3.0)) == pytest.approx(2.0 - TICK - TOLERANCE)
    assert p.paused(at(1.0), at(3.0)) == pytest.approx(1.0)  # heard in the middle of it


def test_a_heartbeat_right_after_a_stall_gets_no_credit_for_it() -> None:
    p = PauseClock(keep=10)
    p.sleeping(at(0), TICK)
    heard = at(2.0)  # taken after the stall, before the ticker woke
    p.woke(at(2.0))
    ticks(p, 2.0, 3.0)
    assert p.paused(heard, at(3.0)) == 0
    # a second stall counts once, the first not at all
    p.sleeping(at(3.0), TICK)
    p.woke(at(4.0))
    assert p.paused(heard, at(4.5)) == pytest.approx(1.0 - TICK - TOLERANCE)


def test_a_long_await_is_no_stall() -> None:
    """The ticker ran on while a call hung (the loop was not stopped): nothing is forgiven."""
    p = PauseClock(keep=10)
    ticks(p, 0, 30)
    assert p.paused(at(0), at(30)) == 0


def test_the_stalls_kept_are_bounded() -> None:
    p = PauseClock(keep=5)
    for i in range(1000):  # a stall each second
        p.sleeping(at(i), TICK)
        p.woke(at(i + 0.5))
    assert len(p) <= 6
    # those within the last 5 s are all still there
    assert p.paused(at(995), at(999.5)) == pytest.approx(5 * (0.5 - TICK - TOLERANCE))


async def test_the_ticker_stops_cleanly() -> None:
    p = PauseClock(keep=5)
    task = asyncio.create_task(p.run())
    await asyncio.sleep(3 * TICK)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # stopped, it is late for nothing
    now = datetime.now(UTC)
    assert p.paused(now - timedelta(seconds=60), now + timedelta(seconds=60)) == 0
