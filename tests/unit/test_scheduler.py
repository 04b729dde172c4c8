"""The pure scheduler: docs/contract.md, 'Placement', property-tested."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from troupe.manager.scheduler import AgentState, Request, never_fits, schedule

G = 1024**3


def agent(i: str, cpu: float = 4, mem: int = 8 * G, group: str = "default") -> AgentState:
    return AgentState(id=i, group=group, cpu=cpu, mem=mem, gpu=0)


def req(
    sid: str,
    size: int,
    cpu: float = 1,
    mem: int = G,
    mode: str = "single-node",
    priority: int = 0,
    order: float = 0,
    group: str = "default",
) -> Request:
    return Request(
        session_id=sid,
        group=group,
        mode=mode,
        size=size,
        cpu=cpu,
        mem=mem,
        priority=priority,
        order=order,
    )


def test_single_node_needs_one_agent_with_room_for_all() -> None:
    d = schedule([req("s", 3)], [agent("a", cpu=2), agent("b", cpu=2)])
    assert d.placements == {}
    assert any("cpu: needs 3 cores, 2 cores free" in r for r in d.waiting["s"])


def test_multi_node_prefers_one_agent_then_spreads() -> None:
    assert schedule(
        [req("s", 3, mode="multi-node")], [agent("a", 2), agent("b", 4)]
    ).placements == {"s": ["b", "b", "b"]}
    d = schedule([req("s", 3, mode="multi-node")], [agent("a", 1), agent("b", 1), agent("c", 1)])
    assert sorted(d.placements["s"]) == ["a", "b", "c"]


def test_priority_then_fifo() -> None:
    reqs = [req("late", 2, order=2), req("early", 2, order=1), req("vip", 2, priority=5, order=3)]
    d = schedule(reqs, [agent("a", cpu=4)])
    assert set(d.placements) == {"vip", "early"}
    assert "late" in d.waiting


def test_never_fits() -> None:
    agents = [agent("a", cpu=2), agent("b", cpu=2)]
    assert never_fits(req("s", 3), agents) is not None
    assert never_fits(req("s", 3, mode="multi-node"), agents) is None
    assert never_fits(req("s", 1, cpu=3, mode="multi-node"), agents) is not None
    assert never_fits(req("s", 1, group="gpu"), agents) == "no agent in resource group 'gpu'"
    busy = [AgentState(id="a", group="default", cpu=2, mem=G, gpu=0, cpu_used=2)]
    assert never_fits(req("s", 2, mem=G // 2), busy) is None  # fits once the agent is idle


@st.composite
def worlds(draw: st.DrawFn) -> tuple[list[Request], list[AgentState]]:
    agents = [
        AgentState(
            id=f"a{i}",
            group=draw(st.sampled_from(["default", "g2"])),
            cpu=draw(st.sampled_from([1, 2, 4, 8])),
            mem=draw(st.integers(1, 16)) * G,
            gpu=draw(st.integers(0, 2)),
            cpu_used=draw(st.sampled_from([0, 0.5, 1])),
        )
        for i in range(draw(st.integers(1, 6)))
    ]
    reqs = [
        Request(
            session_id=f"s{i}",
            group=draw(st.sampled_from(["default", "g2"])),
            mode=draw(st.sampled_from(["single-node", "multi-node"])),
            size=draw(st.integers(1, 8)),
            cpu=draw(st.sampled_from([0.25, 0.5, 1, 2])),
            mem=draw(st.integers(1, 4)) * G // 2,
            gpu=draw(st.integers(0, 1)),
            priority=draw(st.integers(0, 2)),
            order=float(i),
        )
        for i in range(draw(st.integers(0, 12)))
    ]
    return reqs, agents


@settings(max_examples=300, deadline=None)
@given(worlds())
def test_never_overcommits_never_partial(world: tuple[list[Request], list[AgentState]]) -> None:
    reqs, agents = world
    d = schedule(reqs, agents)
    by_id = {a.id: a for a in agents}
    used = {a.id: [a.cpu_used, a.mem_used, a.gpu_used] for a in agents}
    for r in reqs:
        assert (r.session_id in d.placements) != (r.session_id in d.waiting)
        placed = d.placements.get(r.session_id)
        if placed is None:
            continue
        assert len(placed) == r.size  # all or nothing
        if r.mode == "single-node":
            assert len(set(placed)) == 1
        for a in placed:
            assert by_id[a].group == r.group
            used[a][0] += r.cpu
            used[a][1] += r.mem
            used[a][2] += r.gpu
    for a in agents:
        assert used[a.id][0] <= a.cpu + 1e-9
        assert used[a.id][1] <= a.mem
        assert used[a.id][2] <= a.gpu


def plain_schedule(reqs: list[Request], agents: list[AgentState]) -> dict[str, list[str]]:
    """The placement rule (docs/contract.md, 'Placement') written out plainly, with none of the
    pass's shortcuts (failed shapes remembered, bisection over agents sorted by free cores)."""
    free = {a.id: a for a in agents}
    out: dict[str, list[str]] = {}
    for r in sorted(reqs, key=lambda r: (-r.priority, r.order, r.session_id)):
        group = sorted(
            (a for a in free.values() if a.group == r.group), key=lambda a: (a.cpu_free, a.id)
        )
        whole = [a for a in group if a.kernels_fitting(r) >= r.size]
        if whole:
            placed = [whole[0].id] * r.size  # the tightest fit in cores
        elif r.mode == "multi-node":
            placed = []
            for a in reversed(group):  # the roomiest first
                placed += [a.id] * min(a.kernels_fitting(r), r.size - len(placed))
            if len(placed) < r.size:
                continue
        else:
            continue
        for a_id in set(placed):
            free[a_id] = free[a_id].take(r, placed.count(a_id))
        out[r.session_id] = placed
    return out


@settings(max_examples=400, deadline=None)
@given(worlds())
def test_the_pass_places_as_the_plain_rule(world: tuple[list[Request], list[AgentState]]) -> None:
    """The pass's shortcuts change its speed, not one placement."""
    reqs, agents = world
    assert schedule(reqs, agents).placements == plain_schedule(reqs, agents)
