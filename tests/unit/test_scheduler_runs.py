"""The full pass's fast paths held to the plain rule (tests/unit/scheduler_reference.py):
a fresh backlog's pass walks its sessions in the order ``add_all`` sorted them (no heap), and
each placement moves its agent in sorted lists by a bounded bisection. Worlds made to break a
wrong shortcut: long runs of identical sessions interleaved with other queues and priorities,
agents of few sizes (ties in free cores, broken by id) that fill up mid-run, GPUs, multi-node
gangs and roles."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.scheduler_reference import plain_schedule
from tests.unit.test_scheduler import G
from tests.unit.test_scheduler_backlog import World

from troupe.manager.scheduler import AgentState, Part, Request
from troupe.manager.scheduler_backlog import Backlog, schedule

GROUPS = ["default", "g2"]

#: few sizes, so that many agents tie in free cores (the lower id first) and fill up together
agents_st = st.builds(
    AgentState,
    id=st.just(""),
    group=st.sampled_from(GROUPS),
    cpu=st.sampled_from([2, 4]),
    mem=st.sampled_from([4 * G, 8 * G]),
    gpu=st.sampled_from([0, 2]),
    cpu_used=st.sampled_from([0, 0, 1]),
)

shapes_st = st.builds(
    Request,
    session_id=st.just(""),
    group=st.sampled_from(GROUPS),
    mode=st.sampled_from(["single-node", "multi-node"]),
    size=st.integers(1, 4),
    cpu=st.sampled_from([0.5, 1, 2]),
    mem=st.sampled_from([G // 2, G, 2 * G]),
    gpu=st.integers(0, 1),
)


def roles_of(shape: Request, workers: int, gpu: int) -> Request:
    parts = (Part("main", 1, shape.cpu, shape.mem), Part("worker", workers, 0.5, G, gpu))
    return replace(shape, size=1 + workers, parts=parts)


@st.composite
def run_worlds(draw: st.DrawFn) -> tuple[list[Request], list[AgentState]]:
    """A few shapes (some with roles), each repeated in runs: consecutive sessions of one
    shape, then of another, with priorities that may put a run's tail ahead of its head."""
    n_agents = draw(st.integers(1, 8))
    ids = draw(st.permutations(range(n_agents)))  # ids not in the order agents are listed
    agents = [replace(draw(agents_st), id=f"a{i}") for i in ids]
    shapes = draw(st.lists(shapes_st, min_size=1, max_size=4))
    shapes = [
        roles_of(s, draw(st.integers(1, 3)), draw(st.integers(0, 1))) if draw(st.booleans()) else s
        for s in shapes
    ]
    reqs: list[Request] = []
    for _ in range(draw(st.integers(0, 8))):
        shape = draw(st.sampled_from(shapes))
        prio = draw(st.sampled_from([0, 0, 0, 1]))
        for _ in range(draw(st.integers(1, 6))):  # a run of identical sessions
            order = float(draw(st.integers(0, 20)))  # ties in arrival: by session id
            n = len(reqs)
            reqs.append(replace(shape, session_id=f"s{n:03d}", priority=prio, order=order))
    return list(draw(st.permutations(reqs))), agents  # given in any order


@settings(max_examples=400, deadline=None)
@given(run_worlds())
def test_runs_of_identical_sessions_place_as_the_plain_rule(
    world: tuple[list[Request], list[AgentState]],
) -> None:
    reqs, agents = world
    assert schedule(reqs, agents).placements == plain_schedule(reqs, agents)


@settings(max_examples=300, deadline=None)
@given(run_worlds())
def test_the_fresh_walk_and_the_heap_walk_decide_alike(
    world: tuple[list[Request], list[AgentState]],
) -> None:
    """``add_all`` on an empty backlog keeps its order for a pass without a heap; sessions
    added one by one are walked by the heap: the same placements and the same reports."""
    reqs, agents = world
    fresh = Backlog(agents)
    fresh.add_all(reqs)
    assert fresh._line is not None or not reqs
    one_by_one = Backlog(agents)
    for r in reqs:
        one_by_one.add(r)
    assert one_by_one._line is None
    a, b = fresh.run(), one_by_one.run()
    assert a.placements == b.placements
    assert a.waiting == b.waiting
    for sid in a.waiting:  # the session index, made when first asked
        assert fresh.why(sid) == one_by_one.why(sid)


@settings(max_examples=200, deadline=None)
@given(run_worlds(), st.lists(st.integers(0, 1000), max_size=8), st.data())
def test_runs_after_changes_place_as_the_plain_rule(
    world: tuple[list[Request], list[AgentState]], ends: list[int], data: st.DataObject
) -> None:
    """The fresh pass, then sessions that end (room back on agents that filled up mid-run)
    and new runs arriving, each pass equal to the plain rule over what waits."""
    reqs, agents = world
    state = World(agents, reqs)
    backlog = Backlog(agents)
    backlog.add_all(reqs)
    assert backlog.run().placements == state.expected()

    def more(first: int) -> list[Request]:
        new, _ = data.draw(run_worlds())
        return [replace(r, session_id=f"n{first + i}") for i, r in enumerate(new)]

    for pick in ends:
        state.step(backlog, "end" if pick % 3 else "new", pick, more)
        assert backlog.run().placements == state.expected()


def test_a_change_after_add_all_keeps_the_order_only_if_no_session_changed() -> None:
    """An agent's change leaves the fresh order valid; a session added or removed drops it
    (the heap walks the queues then), and the placements stay the plain rule's."""
    agents = [AgentState(id=f"a{i}", group="default", cpu=4, mem=8 * G, gpu=0) for i in range(2)]
    reqs = [Request(f"s{i}", "default", "single-node", 1, 1, G, order=i) for i in range(10)]
    backlog = Backlog(agents[:1])
    backlog.add_all(reqs)
    backlog.set_agent(agents[1])
    assert backlog._line is not None
    late = Request("late", "default", "single-node", 1, 1, G, priority=1, order=99)
    backlog.add(late)
    assert backlog._line is None
    backlog.remove("s0")
    expected = plain_schedule([*reqs[1:], late], agents)
    assert backlog.run().placements == expected
    assert "late" in expected
