"""A lost agent's verdict: the wait for it adds the longest gap between two heartbeat checks
the fleet allows (one definition, Fleet.check_within), and the verdict carries the restarts it
was judged with (an ``agent lost`` failure names them without loading the session again)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from troupe.manager.fleet import Fleet
from troupe.manager.life import lost, replacing


@pytest.mark.parametrize(("timeout", "within"), [(30.0, 5.0), (0.6, 0.2)])
def test_the_wait_uses_the_fleets_longest_check_gap(timeout: float, within: float) -> None:
    fleet: Any = SimpleNamespace(config=SimpleNamespace(agent_timeout=timeout))
    assert Fleet.check_within.fget(fleet) == pytest.approx(within)  # type: ignore[attr-defined]
    life: Any = SimpleNamespace(
        config=SimpleNamespace(agent_timeout=timeout), fleet=SimpleNamespace(check_within=0.25)
    )
    assert lost.verdict_seconds(life) == pytest.approx(timeout + 0.25 + 1.0)


@pytest.mark.parametrize(
    ("status", "restarts", "history", "verdict"),
    [
        ("RUNNING", 0, [], replacing.Verdict.REPLACE),
        ("RUNNING", 1, [], replacing.Verdict.FAIL),
        ("RESTARTING", 0, [{"agent": "h2"}], replacing.Verdict.UNDER_WAY),
        ("PENDING", 0, [], replacing.Verdict.FAIL),
    ],
)
def test_the_verdict_carries_the_restarts(
    status: str, restarts: int, history: list[dict[str, Any]], verdict: replacing.Verdict
) -> None:
    s: Any = SimpleNamespace(
        status=status, restarts=restarts, max_restarts=1, restart_history=history
    )
    assert replacing.judged(s) == (verdict, restarts)
