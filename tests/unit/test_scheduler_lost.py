"""LOST agents in the scheduler's why-pending report: named for the sessions they could hold
once back, placing nothing meanwhile (docs/lifecycle.md, placing)."""

from __future__ import annotations

from tests.unit.test_scheduler import G, agent, req

from troupe.manager.roles import request_of
from troupe.manager.scheduler import Part, Request
from troupe.manager.scheduler_backlog import Backlog, schedule

LOST = "agent {}: LOST (no heartbeat); waiting for it to come back"


def test_a_group_with_only_lost_agents_names_those_that_could_hold_the_session() -> None:
    lost = [agent("big", cpu=8, group="g"), agent("small", cpu=2, group="g")]
    d = schedule([req("s", 2, cpu=2, group="g")], [], lost)
    assert d.placements == {}
    assert d.waiting == {"s": [LOST.format("big")]}  # small holds one kernel, not both
    d = schedule([req("m", 2, cpu=2, group="g", mode="multi-node")], [], lost)
    assert d.waiting == {"m": [LOST.format("big"), LOST.format("small")]}


def test_lost_agents_follow_the_alive_ones_in_the_report() -> None:
    d = schedule([req("s", 1, cpu=6)], [agent("a")], [agent("b", cpu=8)])
    assert d.waiting["s"][0].startswith("agent a: cpu: needs 6 cores")
    assert d.waiting["s"][-1] == LOST.format("b")


def test_without_lost_agents_the_report_is_as_before() -> None:
    d = schedule([req("s", 1, group="g")], [agent("a")])
    assert d.waiting == {"s": ["no agent in resource group 'g'"]}


def test_with_roles_every_roles_kernels_decide_whether_a_lost_agent_is_named() -> None:
    """Not main's shape alone (finding RL3, docs/reliability.md): main1 then two workers;
    the LOST agent has 4 cores."""
    lost = [agent("h", cpu=4, group="g")]

    def roles(mode: str, main: float, worker: float) -> Request:
        parts = [Part("main", 1, main, G), Part("worker", 2, worker, G)]
        return request_of("s", "g", mode, parts)

    # main is 3 of the 4 cores, the workers the last one: the agent holds it all
    assert schedule([roles("single-node", 3, 0.5)], [], lost).waiting == {"s": [LOST.format("h")]}
    # three kernels of main's 1 core would fit, but the workers' 3 cores each do not
    none = {"s": ["no agent in resource group 'g'"]}
    assert schedule([roles("single-node", 1, 3)], [], lost).waiting == none
    # multi-node: main (8 cores) fits nowhere here, but a worker fits on the LOST agent
    assert schedule([roles("multi-node", 8, 1)], [], lost).waiting == {"s": [LOST.format("h")]}


def test_a_backlogs_why_names_the_lost_agents_of_the_sessions_group_only() -> None:
    """``Backlog.why`` (the manager's reports) says what a pass's report says, LOST agents
    included (those of another group are not named: ``waiting_for_lost``'s rule)."""
    alive = [agent("a"), agent("x", group="other")]
    lost = [agent("b", cpu=8), agent("y", cpu=8, group="other")]
    pending = [req("s", 1, cpu=6), req("t", 1, cpu=6, group="other")]
    backlog = Backlog(alive, lost)
    backlog.add_all(pending)
    backlog.run(report=False)
    reported = schedule(pending, alive, lost).waiting
    assert backlog.why("s") == reported["s"]
    assert backlog.why("s")[-1] == LOST.format("b")
    assert backlog.why("t") == reported["t"]
    assert LOST.format("b") not in backlog.why("t")
