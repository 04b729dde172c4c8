"""The incremental pass (troupe.manager.scheduler_backlog.Backlog) places exactly as the plain
rule does over the whole backlog, after any sequence of changes: sessions that end, agents
added, removed or changed, sessions that arrive or go."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.scheduler_reference import hold, plain_schedule
from tests.unit.test_scheduler import G, parts, with_roles

from troupe.manager.scheduler import AgentState, Part, Request
from troupe.manager.scheduler_backlog import Backlog

GROUPS = ["default", "g2"]

agents_st = st.builds(
    AgentState,
    id=st.just(""),
    group=st.sampled_from(GROUPS),
    cpu=st.sampled_from([1, 2, 4, 8]),
    mem=st.integers(1, 16).map(lambda m: m * G),
    gpu=st.integers(0, 2),
    cpu_used=st.sampled_from([0, 0.5, 1]),
)


@st.composite
def requests_st(draw: st.DrawFn, first: int) -> list[Request]:
    reqs = [
        Request(
            session_id=f"s{first + i}",
            group=draw(st.sampled_from(GROUPS)),
            mode=draw(st.sampled_from(["single-node", "multi-node"])),
            size=draw(st.integers(1, 6)),
            cpu=draw(st.sampled_from([0.25, 0.5, 1, 2])),
            mem=draw(st.integers(1, 4)) * G // 2,
            gpu=draw(st.integers(0, 1)),
            priority=draw(st.integers(0, 2)),
            order=float(draw(st.integers(0, 40))),
        )
        for i in range(draw(st.integers(0, 6)))
    ]
    return [with_roles(r, draw(st.lists(parts, max_size=2))) for r in reqs]


changes = st.lists(
    st.tuples(
        st.sampled_from(["end", "end", "new", "cancel", "add_agent", "drop_agent", "resize"]),
        st.integers(0, 1000),
    ),
    max_size=12,
)


class World:
    """The reference's view: the agents as they are, the pending and the running sessions."""

    def __init__(self, agents: list[AgentState], reqs: list[Request]) -> None:
        self.agents = {a.id: a for a in agents}
        self.pending = {r.session_id: r for r in reqs}
        self.running: dict[str, tuple[Request, list[str]]] = {}
        self.next_id = 100

    def expected(self) -> dict[str, list[str]]:
        placed = plain_schedule(list(self.pending.values()), list(self.agents.values()))
        for sid, where in placed.items():
            r = self.pending.pop(sid)
            hold(self.agents, r, where)
            self.running[sid] = (r, where)
        return placed

    def step(
        self, backlog: Backlog, what: str, pick: int, draw_new: Callable[[int], list[Request]]
    ) -> bool:
        """The steps every sequence test takes (a session ends, new ones come, one is
        cancelled), told to the reference and to ``backlog`` alike; False for another step."""
        if what == "end":
            for a in self.end(pick):
                backlog.set_agent(a)
        elif what == "new":
            new = draw_new(self.next_id)
            self.next_id += len(new)
            for r in new:
                self.pending[r.session_id] = r
                backlog.add(r)
        elif what == "cancel":
            if self.pending:
                sid = sorted(self.pending)[pick % len(self.pending)]
                del self.pending[sid]
                backlog.remove(sid)
        else:
            return False
        return True

    def end(self, pick: int) -> list[AgentState]:
        """A running session ends: its kernels' resources come back."""
        if not self.running:
            return []
        sid = sorted(self.running)[pick % len(self.running)]
        r, where = self.running.pop(sid)
        touched = {}
        for a_id, k in zip(where, r.kernel_shapes(), strict=True):
            if a_id in self.agents:
                a = self.agents[a_id]
                a = replace(
                    a,
                    cpu_used=a.cpu_used - k.cpu,
                    mem_used=a.mem_used - k.mem,
                    gpu_used=a.gpu_used - k.gpu,
                )
                self.agents[a_id] = touched[a_id] = a
        return list(touched.values())


@settings(max_examples=300, deadline=None)
@given(
    st.lists(agents_st, min_size=1, max_size=5),
    requests_st(0),
    changes,
    st.data(),
)
def test_each_pass_after_changes_places_as_the_plain_rule(
    agents: list[AgentState], reqs: list[Request], steps: list[tuple[str, int]], data: st.DataObject
) -> None:
    agents = [replace(a, id=f"a{i}") for i, a in enumerate(agents)]
    world = World(agents, reqs)
    backlog = Backlog(agents)
    backlog.add_all(reqs)
    assert backlog.run().placements == world.expected()
    next_agent = len(agents)
    for what, pick in steps:
        if world.step(backlog, what, pick, lambda first: data.draw(requests_st(first))):
            pass
        elif what == "add_agent":
            a = replace(data.draw(agents_st), id=f"a{next_agent}")
            next_agent += 1
            world.agents[a.id] = a
            backlog.set_agent(a)
        elif what == "drop_agent" and world.agents:
            a_id = sorted(world.agents)[pick % len(world.agents)]
            del world.agents[a_id]
            for sid in [s for s, (_, where) in world.running.items() if a_id in where]:
                del world.running[sid]  # its sessions fail with the agent
            backlog.remove_agent(a_id)
        elif what == "resize" and world.agents:
            a = world.agents[sorted(world.agents)[pick % len(world.agents)]]
            a = replace(a, cpu=max(a.cpu + (pick % 5 - 2), 0.5), group=GROUPS[pick % 2])
            world.agents[a.id] = a
            backlog.set_agent(a)
        assert backlog.run().placements == world.expected(), what


def test_a_gang_with_roles_that_failed_is_tried_again_with_less_room() -> None:
    """Greedy role-by-role packing can fail with more room and fit with less: such a queue
    never settles, and the pass after a session took room it needed looks at it again."""
    gang = Request(
        session_id="r",
        group="default",
        mode="multi-node",
        size=3,
        cpu=1,
        mem=G,
        parts=(Part("main", 2, 1, G), Part("worker", 1, 1, G, 1)),
    )
    x = AgentState(id="b", group="default", cpu=2, mem=16 * G, gpu=2)
    y = AgentState(id="a", group="default", cpu=2, mem=16 * G, gpu=0)
    backlog = Backlog([x, y])
    backlog.add(gang)
    assert backlog.run().placements == {} == plain_schedule([gang], [x, y])
    # a GPU session ahead of it takes half a core of b: main then goes to a, the worker to b
    vip = Request("v", "default", "single-node", 1, 0.5, G, gpu=1, priority=1)
    backlog.add(vip)
    expected = plain_schedule([gang, vip], [x, y])
    assert expected == {"v": ["b"], "r": ["a", "a", "b"]}
    assert backlog.run().placements == expected
