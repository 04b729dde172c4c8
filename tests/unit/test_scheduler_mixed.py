"""The backlog in a mixed world (most sessions with roles, most multi-node, agents short of
room), after sequences of changes: placements equal to the plain rule, the why-pending report
of every waiting session equal to a fresh pass's, and the pass after a change looks only at
the queues that change can serve (troupe.manager.scheduler_backlog, scheduler_queues)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.scheduler_reference import plain_schedule
from tests.unit.test_scheduler import G
from tests.unit.test_scheduler_backlog import World

from troupe.manager.scheduler import AgentState, Part, Request
from troupe.manager.scheduler_backlog import Backlog, schedule
from troupe.manager.scheduler_pool import Pool

agents_st = st.builds(
    AgentState,
    id=st.just(""),
    group=st.just("default"),
    cpu=st.sampled_from([1, 2, 3, 4]),
    mem=st.integers(2, 8).map(lambda m: m * G),
    gpu=st.integers(0, 2),
    cpu_used=st.sampled_from([0, 0, 0.5]),
)
roles_st = st.lists(
    st.builds(
        Part,
        role=st.just("r"),
        kernels=st.integers(1, 3),
        cpu=st.sampled_from([0.5, 1, 2]),
        mem=st.integers(1, 3).map(lambda m: m * G),
        gpu=st.integers(0, 1),
    ),
    min_size=1,
    max_size=3,
)


#: roles of several kernels each: a role's count over the group falls short by more than one
#: (Pool.ruled_out then answers without a try)
many_roles_st = st.lists(
    st.builds(
        Part,
        role=st.just("r"),
        kernels=st.integers(2, 8),
        cpu=st.sampled_from([1, 2]),
        mem=st.just(G),
        gpu=st.sampled_from([0, 0, 1]),
    ),
    min_size=1,
    max_size=2,
)


@st.composite
def sessions_st(
    draw: st.DrawFn, first: int, roles_of: st.SearchStrategy[list[Part]] = roles_st, most: int = 5
) -> list[Request]:
    out = []
    for i in range(draw(st.integers(0, most))):
        cpu, mem = draw(st.sampled_from([0.5, 1, 2])), draw(st.integers(1, 3)) * G
        req = Request(
            session_id=f"s{first + i}",
            group="default",
            mode=draw(st.sampled_from(["multi-node", "multi-node", "single-node"])),
            size=draw(st.integers(1, 4)),
            cpu=cpu,
            mem=mem,
            gpu=draw(st.integers(0, 1)),
            priority=draw(st.integers(0, 1)),
            order=float(draw(st.integers(0, 30))),
        )
        roles = draw(st.one_of(st.just([]), roles_of, roles_of))
        if roles:
            roles = [p._replace(role=f"w{'x' * j}") for j, p in enumerate(roles)]
            parts = (Part("main", 1, cpu, mem, req.gpu), *roles)
            req = replace(req, size=sum(p.kernels for p in parts), parts=parts)
        out.append(req)
    return out


steps_st = st.lists(
    st.tuples(st.sampled_from(["end", "end", "new", "cancel", "grow", "shrink"]), st.integers()),
    max_size=10,
)


def reports_match(backlog: Backlog, world: World) -> None:
    """Every waiting session's report, asked of the backlog, is a fresh pass's over the same
    state (where that pass places nothing more: greedy packing may fit with less room)."""
    fresh = schedule(list(world.pending.values()), list(world.agents.values()))
    if fresh.placements:
        return
    for sid in world.pending:
        assert backlog.why(sid) == fresh.waiting[sid], sid


@settings(max_examples=300, deadline=None)
@given(st.lists(agents_st, min_size=1, max_size=6), sessions_st(0), steps_st, st.data())
def test_mixed_sequences_place_and_report_as_the_plain_rule(
    agents: list[AgentState], reqs: list[Request], steps: list[tuple[str, int]], data: st.DataObject
) -> None:
    check_sequences(agents, reqs, steps, data, roles_st)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(agents_st, min_size=1, max_size=6),
    sessions_st(0, many_roles_st, 12),
    steps_st,
    st.data(),
)
def test_roles_ruled_out_by_the_pass_counts_place_and_report_as_the_plain_rule(
    agents: list[AgentState], reqs: list[Request], steps: list[tuple[str, int]], data: st.DataObject
) -> None:
    check_sequences(agents, reqs, steps, data, many_roles_st)


def check_sequences(
    agents: list[AgentState],
    reqs: list[Request],
    steps: list[tuple[str, int]],
    data: st.DataObject,
    roles_of: st.SearchStrategy[list[Part]],
) -> None:
    agents = [replace(a, id=f"a{i}") for i, a in enumerate(agents)]
    world = World(agents, reqs)
    backlog = Backlog(agents)
    backlog.add_all(reqs)
    assert backlog.run().placements == world.expected()
    reports_match(backlog, world)
    for what, pick in steps:
        if world.step(backlog, what, pick, lambda first: data.draw(sessions_st(first, roles_of))):
            pass
        elif what in ("grow", "shrink"):
            a = world.agents[sorted(world.agents)[pick % len(world.agents)]]
            more = 0.5 if what == "grow" else -0.5
            a = replace(a, cpu_used=max(a.cpu_used - more, 0), mem_used=a.mem_used)
            world.agents[a.id] = a
            backlog.set_agent(a)
        assert backlog.run().placements == world.expected(), what
        reports_match(backlog, world)


def gang(sid: str, order: float, priority: int = 0) -> Request:
    """main (2 cores) then a GPU worker: greedy packing puts main on the roomiest agent,
    which may be the one whose GPU the worker needs."""
    parts = (Part("main", 1, 2, G), Part("worker", 1, 1, G, 1))
    return Request(sid, "default", "multi-node", 2, 2, G, 0, priority, order, parts)


def test_a_sleeping_gang_joins_the_pass_when_an_agent_it_took_from_changes() -> None:
    """The gang ``g1`` failed as packed (main took the GPU agent ``b``); a later session
    placed on ``b`` in the same pass makes the next gang of that shape fit, as the plain
    rule does, though the queue slept since the pass before."""
    b = AgentState(id="b", group="default", cpu=2.5, mem=16 * G, gpu=1)
    a = AgentState(id="a", group="default", cpu=2, mem=4 * G, gpu=0)
    backlog = Backlog([a, b])
    backlog.add(gang("g1", 1))
    assert backlog.run().placements == {} == plain_schedule([gang("g1", 1)], [a, b])
    # x (only b has its memory) leaves b fewer cores than a: main goes to a, the worker to b
    later = [gang("g2", 3), Request("x", "default", "single-node", 1, 1, 8 * G, 0, 0, 2)]
    for r in later:
        backlog.add(r)
    expected = plain_schedule([gang("g1", 1), *later], [a, b])
    assert expected == {"x": ["b"], "g2": ["a", "b"]}
    assert backlog.run().placements == expected


def test_the_pass_after_a_session_ends_tries_only_the_queues_the_room_can_serve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Many dead queues, one session's end: the pass tries only the queues whose need the
    freed agent has, then only up to the first that takes the room."""
    agents = [AgentState(id=f"a{i}", group="default", cpu=4, mem=8 * G, gpu=0) for i in range(4)]
    fill = [Request(f"f{i}", "default", "single-node", 1, 4, 8 * G, order=i) for i in range(4)]
    # 40 shapes that wait: 10 need more than any agent has, 30 would fit one freed agent
    big = [Request(f"b{i}", "default", "single-node", 1, 5 + i, G, order=10 + i) for i in range(10)]
    small = [
        Request(f"s{i}", "default", "multi-node", 1, 1 + i % 3, (1 + i) * G // 8, order=20 + i)
        for i in range(30)
    ]
    backlog = Backlog(agents)
    backlog.add_all(fill + big + small)
    assert len(backlog.run().placements) == 4
    tried: list[str] = []
    place = Pool.place

    def counting(self: Pool, req: Request, shape: object) -> list[str] | None:
        tried.append(req.session_id)
        return place(self, req, shape)  # type: ignore[arg-type]

    monkeypatch.setattr(Pool, "place", counting)
    backlog.set_agent(agents[0])  # f0 ended: a0 is idle again
    placed = backlog.run().placements
    assert tried and not any(sid.startswith("b") for sid in tried)
    assert len(tried) <= len(placed) + 1  # the ones placed, then the first that no longer fit


def test_a_role_the_pass_counts_rule_out_is_not_tried_and_one_at_the_bound_is() -> None:
    """Four agents of 1.5 cores hold 4 one-core workers, one each. ``r1`` (5 workers) fails on
    that count; ``r3`` (6: more than one short) is then ruled out by the count alone, without
    a try; ``r2`` (4 workers: exactly the count) is still tried, and fits as a gang."""
    agents = [AgentState(id=f"a{i}", group="default", cpu=1.5, mem=8 * G, gpu=0) for i in range(4)]

    def roles(sid: str, workers: int, order: float) -> Request:
        parts = (Part("main", 1, 0.5, G), Part("worker", workers, 1, G))
        return Request(sid, "default", "multi-node", 1 + workers, 0.5, G, 0, 0, order, parts)

    reqs = [roles("r1", 5, 1), roles("r3", 6, 2), roles("r2", 4, 3)]
    seen: list[bool] = []
    ruled_out = Pool.ruled_out

    def spy(pool: Pool, layout: object) -> bool:
        seen.append(ruled_out(pool, layout))  # type: ignore[arg-type]
        return seen[-1]

    backlog = Backlog(agents)
    backlog.add_all(reqs)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(Pool, "ruled_out", spy)
        placements = backlog.run().placements
    assert placements == plain_schedule(reqs, agents)
    assert sorted(placements) == ["r2"] and seen == [True, False], seen
