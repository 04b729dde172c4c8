"""The full pass's shortcuts held to the plain rule (tests/unit/scheduler_reference.py): failed
shapes looked at again only when they changed, gangs that walk only the agents with the GPUs
they need (the per-free-GPU lists merged), a role's count that stops once enough, a whole fit
planned once per queue, report lines made once per pass for what requests are short of, and
the garbage collector paused during a pass."""

from __future__ import annotations

import gc
from collections.abc import Iterable
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.scheduler_reference import plain_schedule
from tests.unit.test_scheduler import G
from tests.unit.test_scheduler_backlog import World

from troupe.manager import scheduler_spread
from troupe.manager.scheduler import AgentState, Part, Request, _kernel_at_fault
from troupe.manager.scheduler_backlog import Backlog, schedule
from troupe.manager.scheduler_collector import collector_paused
from troupe.manager.scheduler_keys import RANK_MASK
from troupe.manager.scheduler_pool import Pool

#: many free-GPU counts (so a gang merges several per-count lists), memory that runs out
#: before cores (agents with free cores and no memory), ties in free cores
agents_st = st.builds(
    AgentState,
    id=st.just(""),
    group=st.just("default"),
    cpu=st.sampled_from([2, 4, 8]),
    mem=st.sampled_from([2 * G, 4 * G, 8 * G]),
    gpu=st.integers(0, 8),
    cpu_used=st.sampled_from([0, 0, 1]),
    gpu_used=st.integers(0, 2),
)

#: few shapes, many sessions: shapes fail early in a pass and cover later ones
shape_st = st.tuples(
    st.sampled_from(["single-node", "multi-node", "multi-node"]),
    st.integers(1, 6),
    st.sampled_from([0.5, 1, 2]),
    st.sampled_from([G // 2, G, 2 * G]),
    st.integers(0, 3),
)
role_st = st.builds(
    Part,
    role=st.just("w"),
    kernels=st.integers(1, 4),
    cpu=st.sampled_from([0.5, 1, 2]),
    mem=st.sampled_from([G // 2, G]),
    gpu=st.integers(0, 3),
)


@st.composite
def sessions_st(draw: st.DrawFn, first: int = 0) -> list[Request]:
    shapes = draw(st.lists(shape_st, min_size=1, max_size=4))
    roles = draw(st.lists(st.lists(role_st, min_size=1, max_size=2), max_size=2))
    out = []
    for i in range(draw(st.integers(0, 14))):
        mode, size, cpu, mem, gpu = draw(st.sampled_from(shapes))
        r = Request(
            f"s{first + i}", "default", mode, size, cpu, mem, gpu, draw(st.integers(0, 1)), i
        )
        if roles and draw(st.booleans()):
            named = [
                p._replace(role=f"w{'x' * j}") for j, p in enumerate(draw(st.sampled_from(roles)))
            ]
            ps = (Part("main", 1, cpu, mem, 0), *named)
            r = replace(r, size=sum(p.kernels for p in ps), parts=ps)
        out.append(r)
    return out


def named(agents: list[AgentState]) -> list[AgentState]:
    return [replace(a, id=f"a{i}", gpu_used=min(a.gpu_used, a.gpu)) for i, a in enumerate(agents)]


@settings(max_examples=400, deadline=None)
@given(st.lists(agents_st, min_size=1, max_size=8), sessions_st())
def test_gpu_gangs_and_failed_shapes_place_as_the_plain_rule(
    agents: list[AgentState], reqs: list[Request]
) -> None:
    agents = named(agents)
    assert schedule(reqs, agents).placements == plain_schedule(reqs, agents)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(agents_st, min_size=1, max_size=8),
    sessions_st(),
    st.lists(
        st.tuples(st.sampled_from(["end", "end", "new", "cancel"]), st.integers()), max_size=8
    ),
    st.data(),
)
def test_sequences_of_changes_place_as_the_plain_rule(
    agents: list[AgentState], reqs: list[Request], steps: list[tuple[str, int]], data: st.DataObject
) -> None:
    agents = named(agents)
    world = World(agents, reqs)
    backlog = Backlog(agents)
    backlog.add_all(reqs)
    assert backlog.run().placements == world.expected()
    for what, pick in steps:
        world.step(backlog, what, pick, lambda first: data.draw(sessions_st(first)))
        assert backlog.run().placements == world.expected(), what


@settings(max_examples=200, deadline=None)
@given(st.lists(agents_st, min_size=1, max_size=8), sessions_st(), st.booleans())
def test_queues_made_by_the_fresh_walk_hold_each_waiting_session_once(
    agents: list[AgentState], reqs: list[Request], ask_first: bool
) -> None:
    """After ``add_all`` the queues' sessions are made by the fresh walk, or before it when
    asked for (a session's report): either way the plain rule's placements, and every waiting
    session once in its queue, in rank order, for the passes after."""
    agents = named(agents)
    backlog = Backlog(agents)
    backlog.add_all(reqs)
    if ask_first and reqs:
        backlog.why(reqs[0].session_id)
    decision = backlog.run()
    assert decision.placements == plain_schedule(reqs, agents)
    queued = [r.session_id for q in backlog.queues.values() for r in q.items]
    assert sorted(queued) == sorted(decision.waiting)
    for q in backlog.queues.values():
        assert q.items == sorted(q.items, key=lambda r: (-r.priority, r.order, r.session_id))


@settings(max_examples=200, deadline=None)
@given(st.lists(agents_st, min_size=1, max_size=8), sessions_st())
def test_report_lines_made_once_are_each_requests_own(
    agents: list[AgentState], reqs: list[Request]
) -> None:
    """A pass's report lines, shared by the requests short of the same, are what a report of
    each request alone says (a fresh pool of the agents as the pass left them)."""
    agents = named(agents)
    backlog = Backlog(agents)
    backlog.add_all(reqs)
    decision = backlog.run()
    pool = backlog.pools["default"]
    left = [pool.agent(a) for a in pool.base]
    by_id = {r.session_id: r for r in reqs}
    for sid, lines in decision.waiting.items():
        assert Pool(left).report(by_id[sid]) == lines, sid


def test_requests_short_of_different_amounts_get_their_own_lines() -> None:
    """Single-node sessions of one kernel shape and different sizes, multi-node ones of it,
    and gangs whose kernel at fault differs: each waiting one's lines say what it needs."""
    agents = [AgentState(f"a{i}", "default", 2, 2 * G, 0) for i in range(4)]
    reqs = [
        Request("s3", "default", "single-node", 3, 1, G, order=1),
        Request("s4", "default", "single-node", 4, 1, G, order=2),
        Request("m9", "default", "multi-node", 9, 1, G, order=3),
        Request("m9b", "default", "multi-node", 9, 1, 3 * G, order=4),
    ]
    decision = schedule(reqs, agents)
    pool = Pool(agents)
    for r in reqs:
        assert decision.waiting[r.session_id] == pool.report(r)
    assert decision.waiting["s3"] != decision.waiting["s4"]
    assert decision.waiting["m9"] != decision.waiting["m9b"]
    assert "needs 3 cores" in decision.waiting["s3"][0]


def plain_kernel_at_fault(agent: AgentState, req: Request) -> tuple[Part, AgentState]:
    """The first kernel that no longer fits on ``agent`` once those before it are on it,
    kernel by kernel as the plain rule adds them."""
    shapes = req.kernel_shapes()
    for kernel in shapes:
        if agent.kernels_fitting(kernel) < 1:
            return kernel, agent
        agent = agent.take(kernel, 1)
    return shapes[-1], agent


@settings(max_examples=300, deadline=None)
@given(agents_st, sessions_st())
def test_the_kernel_at_fault_is_the_plain_walks(agent: AgentState, reqs: list[Request]) -> None:
    agent = named([agent])[0]
    for r in reqs:
        kernel, left = _kernel_at_fault(agent, r)
        want, want_left = plain_kernel_at_fault(agent, r)
        assert kernel == want
        assert (left.cpu_used, left.mem_used, left.gpu_used) == (
            want_left.cpu_used,
            want_left.mem_used,
            want_left.gpu_used,
        )


def test_a_count_that_fell_short_fails_later_gangs_of_its_kernel_without_a_walk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A role's kernels fit on too few agents: the first gang counts them all, a later gang
    of that kernel that wants more fails on the count remembered for the pass (room only
    shrinks), one that wants fewer is counted again and placed, all as the plain rule."""
    agents = [AgentState(f"a{i}", "default", 2, 4 * G, gpu=1) for i in range(3)]
    worker = Part("w", 4, 1, G, 1)  # 4 GPU kernels, 3 GPUs in the group

    def gang(sid: str, order: int, kernels: int) -> Request:
        ps = (Part("main", 1, 0.5, G), worker._replace(kernels=kernels))
        return Request(sid, "default", "multi-node", 1 + kernels, 0.5, G, 0, 0, order, ps)

    walks: list[tuple[float, float]] = []
    with_cores = scheduler_spread.with_cores  # a count's walk (in no order)

    def counting(pool: Pool, cpu: float, mem: float, gpu: float) -> Iterable[int]:
        walks.append((cpu, gpu))
        return with_cores(pool, cpu, mem, gpu)

    monkeypatch.setattr(scheduler_spread, "with_cores", counting)
    reqs = [gang("g1", 1, 4), gang("g2", 2, 5), gang("g3", 3, 2)]
    backlog = Backlog(agents)
    backlog.add_all(reqs)
    placed = backlog.run().placements
    assert placed == plain_schedule(reqs, agents)
    assert list(placed) == ["g3"]
    assert backlog.pools["default"].counts[(1, G, 1)] == 3
    assert walks.count((1, 1)) == 2  # g1's count, then g3's (g2's failed on g1's)


def test_a_gang_of_one_shape_knows_exactly_how_many_of_its_kernels_fit() -> None:
    """Its count is its own (not the pass's remembered one): after a gang of the same kernel
    failed and a session took an agent, a later gang's bound is what fits then, so a later
    pass wakes its queue only when that is enough."""
    agents = [AgentState(f"a{i}", "default", 2.0, 64 * G, 0) for i in range(4)]  # 3 kernels each
    reqs = [
        Request("A", "default", "multi-node", 14, 0.1, 20 * G, order=1.0),  # 12 fit
        Request("C", "default", "single-node", 1, 2.0, G, order=2.0),  # takes an agent
        Request("B", "default", "multi-node", 13, 0.1, 20 * G, order=3.0),  # 9 fit now
    ]
    backlog = Backlog(agents)
    backlog.add_all(reqs)
    assert list(backlog.run().placements) == ["C"]
    totals = {q.items[0].session_id: q.total for q in backlog.queues.values() if q.items}
    assert totals == {"A": 12, "B": 9}


def test_the_collector_is_paused_during_a_pass_and_back_after_it() -> None:
    seen: list[bool] = []

    @collector_paused
    def inner(fail: bool) -> None:
        seen.append(gc.isenabled())
        if fail:
            raise RuntimeError("boom")

    assert gc.isenabled()
    inner(False)
    with pytest.raises(RuntimeError):
        inner(True)
    assert seen == [False, False] and gc.isenabled()
    gc.disable()
    try:
        inner(False)  # paused by the caller: left paused
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_pass_makes_no_reference_cycles() -> None:
    """It runs with the collector paused (above), so what it makes must go by reference counts:
    a cycle (a pool and its report cache holding each other) would stay until a collection,
    and would take the freeing out of a timed pass."""
    agents = [AgentState(f"a{i}", "default", 4, 8 * G, i % 3) for i in range(6)]
    roles = (Part("main", 1, 1, G), Part("w", 3, 2, 2 * G, 1), Part("ps", 1, 0.5, G))
    reqs = [
        Request(f"s{i}", "default", mode, 5, 1, G, 0, 0, float(i), roles)
        for i, mode in enumerate(["multi-node", "single-node"] * 4)
    ] + [Request(f"p{i}", "default", "multi-node", 4, 2, 3 * G, order=10.0 + i) for i in range(6)]
    gc.collect()
    gc.disable()
    try:
        decision = schedule(reqs, agents)
        backlog = Backlog(agents)
        backlog.add_all(reqs)
        backlog.run()
        backlog.set_agent(replace(agents[0], cpu=8, mem=16 * G))  # grown: dead queues wake
        backlog.set_agent(AgentState("b0", "default", 4, 8 * G, 1))  # new (ranks, index)
        backlog.remove_agent("a5")
        backlog.run()
        waiting = next(r.session_id for r in reqs if r.session_id in backlog.queue_of)
        assert backlog.why(waiting)
        del backlog
        found = gc.collect()
    finally:
        gc.enable()
    assert decision.waiting and found == 0


def test_a_count_skips_the_agents_below_its_kernels_memory_level() -> None:
    """The lists of the memory levels below a kernel's hold no agent with its bytes (full
    agents among them): a count or a gang's walk skips them whole, with the same answer."""
    full = [AgentState(f"f{i}", "default", 64, 32 * G, 0, mem_used=32 * G) for i in range(50)]
    pool = Pool([*full, AgentState("r", "default", 4, 32 * G, 0)])
    walked = list(scheduler_spread.with_cores(pool, 1, G, 0))
    assert [pool.id_of[e & RANK_MASK] for e in walked] == ["r"]
    assert list(scheduler_spread.roomiest(pool, 1, G, 0)) == walked
    assert scheduler_spread.count(pool, Part("w", 10, 1, G), 10) == 4
    assert len(list(scheduler_spread.with_cores(pool, 1, 0, 0))) == 51  # no bytes asked: all
