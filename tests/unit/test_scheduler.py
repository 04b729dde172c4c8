"""The pure scheduler: docs/contract.md, 'Placement', property-tested."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.scheduler_reference import plain_schedule

from troupe.manager.scheduler import AgentState, Part, Request, never_fits
from troupe.manager.scheduler_backlog import Backlog, schedule

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
    reqs = [with_roles(r, draw(st.lists(parts, max_size=3))) for r in reqs]
    return reqs, agents


parts = st.builds(
    Part,
    role=st.sampled_from(["worker", "ps", "data"]),
    kernels=st.integers(1, 3),
    cpu=st.sampled_from([0.25, 0.5, 1, 2]),
    mem=st.integers(1, 4).map(lambda m: m * G // 2),
    gpu=st.integers(0, 1),
)


def with_roles(r: Request, roles: list[Part]) -> Request:
    """``r`` as main (its own shape) plus ``roles`` (names made unique), or ``r`` if none."""
    if not roles:
        return r
    roles = [p._replace(role=f"{p.role}{'x' * i}") for i, p in enumerate(roles)]
    all_parts = (Part("main", 1, r.cpu, r.mem, r.gpu), *roles)
    return replace(r, size=sum(p.kernels for p in all_parts), parts=all_parts)


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
        for a, k in zip(placed, r.kernel_shapes(), strict=True):
            assert by_id[a].group == r.group
            used[a][0] += k.cpu
            used[a][1] += k.mem
            used[a][2] += k.gpu
    for a in agents:
        assert used[a.id][0] <= a.cpu + 1e-9
        assert used[a.id][1] <= a.mem
        assert used[a.id][2] <= a.gpu


@settings(max_examples=400, deadline=None)
@given(worlds())
def test_the_pass_places_as_the_plain_rule(world: tuple[list[Request], list[AgentState]]) -> None:
    """The pass's shortcuts change its speed, not one placement."""
    reqs, agents = world
    assert schedule(reqs, agents).placements == plain_schedule(reqs, agents)


# --- roles: kernels of different shapes (docs/contract.md, 'Placement') ----------------------


def roles_req(sid: str, mode: str = "single-node", **kw: object) -> Request:
    """main (1 core) + worker:2 (2 cores, 1 GPU each) + ps:1 (0.5 core)."""
    ps = Part("main", 1, 1, G), Part("worker", 2, 2, G, 1), Part("ps", 1, 0.5, G)
    return Request(session_id=sid, group="default", mode=mode, size=4, cpu=1, mem=G, parts=ps, **kw)  # type: ignore[arg-type]


def gpu_agent(i: str, cpu: float = 8, gpu: int = 2) -> AgentState:
    return AgentState(id=i, group="default", cpu=cpu, mem=16 * G, gpu=gpu)


def test_single_node_roles_need_one_agent_for_every_role() -> None:
    assert schedule([roles_req("s")], [gpu_agent("a")]).placements == {"s": ["a"] * 4}
    d = schedule([roles_req("s")], [gpu_agent("a", gpu=1), gpu_agent("b", gpu=1)])
    assert d.placements == {}
    assert any(
        "role worker, kernel worker2" in line and "gpu: needs 1 GPU, 0 GPUs free" in line
        for line in d.waiting["s"]
    )


def test_multi_node_roles_spread_per_kernel_shape() -> None:
    agents = [gpu_agent("a", cpu=3, gpu=1), gpu_agent("b", cpu=3, gpu=1)]
    placed = schedule([roles_req("s", "multi-node")], agents).placements["s"]
    # main1 and ps1 need no GPU; each worker takes one agent's only GPU
    assert sorted(placed[1:3]) == ["a", "b"]


def test_never_fits_names_the_role_and_kernel() -> None:
    why = never_fits(roles_req("s"), [gpu_agent("a", gpu=1)])
    assert why is not None and "role worker, kernel worker2" in why
    why = never_fits(roles_req("s", "multi-node"), [gpu_agent("a", gpu=0), gpu_agent("b", gpu=0)])
    assert why is not None and "role worker, kernel worker1" in why
    assert (
        never_fits(roles_req("s", "multi-node"), [gpu_agent("a", gpu=1), gpu_agent("b", gpu=1)])
        is None
    )


def test_waiting_multi_node_roles_name_the_kernel() -> None:
    d = schedule([roles_req("s", "multi-node")], [gpu_agent("a", gpu=1)])
    assert all("role worker, kernel worker2" in line for line in d.waiting["s"][:1])


def test_waiting_sessions_of_one_queue_share_its_report_and_keep_it() -> None:
    """The decision keeps one report per queue with its sessions and maps each session to it
    when read, as a dict would; a later pass of the backlog does not change it."""
    agents = [AgentState("a", "default", 2, 4 * G, 0)]
    reqs = [Request(f"s{i}", "default", "single-node", 1, 4, G, order=i) for i in range(3)]
    reqs.append(Request("t", "default", "single-node", 1, 1, 8 * G, order=9))
    backlog = Backlog(agents)
    backlog.add_all(reqs)
    waiting = backlog.run().waiting
    assert len(waiting) == 4 and sorted(waiting) == ["s0", "s1", "s2", "t"]
    assert "s1" in waiting and "u" not in waiting and waiting.get("u") is None
    assert waiting["s0"] is waiting["s2"] and waiting["s0"] != waiting["t"]
    assert waiting == {sid: waiting[sid] for sid in ("s0", "s1", "s2", "t")}
    assert "cpu: needs 4 cores, 2 cores free" in waiting["s0"][0]
    backlog.remove("s1")
    backlog.set_agent(AgentState("a", "default", 8, 4 * G, 0))
    assert list(backlog.run().placements) == ["s0", "s2"]
    assert sorted(waiting) == ["s0", "s1", "s2", "t"]  # as that pass left them
