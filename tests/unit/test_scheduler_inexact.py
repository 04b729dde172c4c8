"""Amounts not exact in binary (0.1, 0.3 cores; odd bytes): the pass and the plain rule add a
session's kernels to an agent's use the same way, to the last bit (docs/design.md: a
session's kernels on one agent are summed in rank order, then held in one step), so ties
that only rounding breaks are broken alike (troupe.manager.scheduler_backlog)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import example, given, settings
from hypothesis import strategies as st
from tests.unit.scheduler_reference import plain_schedule

from troupe.manager.scheduler import AgentState, Part, Request
from troupe.manager.scheduler_backlog import schedule

G = 2**30
tenths = st.integers(1, 12).map(lambda n: n * 0.1)
cores = st.one_of(tenths, st.integers(1, 4).map(lambda n: n * 0.3))
odd_bytes = st.integers(1, 5).map(lambda n: n * G // 3 + 1)

agents_st = st.builds(
    AgentState,
    id=st.just(""),
    group=st.just("default"),
    cpu=st.sampled_from([1.0, 2.0, 3.0]),
    mem=st.integers(3, 12).map(lambda n: n * G + 7),
    gpu=st.just(0),
    cpu_used=st.one_of(st.just(0.0), tenths),
)


@st.composite
def sessions_st(draw: st.DrawFn) -> list[Request]:
    out = []
    for i in range(draw(st.integers(1, 6))):
        cpu, mem = draw(cores), draw(odd_bytes)
        parts = [Part("main", 1, cpu, mem)]
        for j in range(draw(st.integers(0, 3))):
            parts.append(Part("w" + "x" * j, draw(st.integers(1, 3)), draw(cores), draw(odd_bytes)))
        out.append(
            Request(
                session_id=f"s{i}",
                group="default",
                mode=draw(st.sampled_from(["single-node", "multi-node"])),
                size=sum(p.kernels for p in parts),
                cpu=cpu,
                mem=mem,
                order=float(i),
                parts=tuple(parts) if len(parts) > 1 else (),
            )
        )
    return out


def _agent(cpu: float, used: float, mem: int) -> AgentState:
    return AgentState("", "default", cpu, mem, 0, cpu_used=used)


@settings(max_examples=400, deadline=None)
@given(st.lists(agents_st, min_size=1, max_size=5), sessions_st())
@example(  # a0 holds s0 (1.2 + 0.9 on 0.1 in use): its free cores tie with a1's, or not
    agents=[_agent(3.0, 1 * 0.1, 4 * G + 7), _agent(2.0, 12 * 0.1, 10 * G + 7)],
    reqs=[
        Request(
            "s0",
            "default",
            "single-node",
            2,
            4 * 0.3,
            4 * G // 3 + 1,
            order=0.0,
            parts=(Part("main", 1, 4 * 0.3, 4 * G // 3 + 1), Part("w", 1, 3 * 0.3, G // 3 + 1)),
        ),
        Request("s1", "default", "single-node", 1, 2 * 0.1, 4 * G // 3 + 1, order=1.0),
    ],
)
def test_inexact_amounts_place_as_the_plain_rule(
    agents: list[AgentState], reqs: list[Request]
) -> None:
    agents = [replace(a, id=f"a{i}") for i, a in enumerate(agents)]
    assert schedule(reqs, agents).placements == plain_schedule(reqs, agents)
