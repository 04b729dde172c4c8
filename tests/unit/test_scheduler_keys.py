"""The pool's int sort keys (troupe.manager.scheduler_keys) order agents exactly as
(free cores, id) does: free cores that differ by the last bit of a float, negative free
cores, -0.0, and ids that come later between two others (the ranks numbered again)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.scheduler_reference import plain_schedule
from tests.unit.test_scheduler import G

from troupe.manager.scheduler import AgentState, Request
from troupe.manager.scheduler_backlog import Backlog, schedule
from troupe.manager.scheduler_keys import Ranks, cores_key

floats = st.one_of(
    st.floats(allow_nan=False),
    st.sampled_from([0.0, -0.0, 0.1 + 0.2, 0.3, 1 / 3, -1e-300, 5e-324, 1.0]),
)


@settings(max_examples=500)
@given(floats, floats)
def test_cores_keys_compare_as_the_floats(a: float, b: float) -> None:
    ka, kb = cores_key(a), cores_key(b)
    assert (ka < kb, ka == kb, ka > kb) == (a < b, a == b, a > b)


@settings(max_examples=200)
@given(st.lists(st.tuples(st.booleans(), st.text("ab", max_size=24)), max_size=60))
def test_ranks_stay_in_the_ids_order_through_adds_and_removes(ops: list[tuple[bool, str]]) -> None:
    ranks = Ranks(["m"])
    for add, agent_id in ops:
        if add and agent_id not in ranks.rank:
            ranks.add(agent_id)
        elif not add and agent_id in ranks.rank:
            ranks.remove(agent_id)
    ids = sorted(ranks.rank)
    assert [ranks.rank[a] for a in ids] == sorted(ranks.rank.values())
    assert {ranks.id_of[r]: r for r in ranks.id_of} == ranks.rank


def test_ids_squeezed_between_two_others_number_the_ranks_again() -> None:
    ranks = Ranks(["a", "b"])
    renumbered = [ranks.add("a" + "z" * k) for k in range(1, 20)]  # each between the last and b
    assert any(renumbered)  # the gap of GAP between a and b ran out
    assert sorted(ranks.rank, key=ranks.rank.__getitem__) == sorted(ranks.rank)


def _agent(i: int, cpu: float, used: float, group: str = "default") -> AgentState:
    return AgentState(id=f"a{i}", group=group, cpu=cpu, mem=64 * G, gpu=0, cpu_used=used)


def _req(i: int, cpu: float, size: int = 1, mode: str = "single-node") -> Request:
    return Request(f"s{i:03d}", "default", mode, size, cpu, G, order=float(i))


# free cores that tie, tie but for the last bit (0.1 + 0.2 against 0.3), or are negative
cores = st.sampled_from([0.3, 0.1 + 0.2, 1.0, 0.7 + 0.3, 2.0, 1 / 3 + 2 / 3, 4.0])
used = st.sampled_from([0.0, 0.1, 0.2, 0.1 + 0.2, 1 / 3, 5.0])
amounts = st.sampled_from([0.1, 0.2, 0.3, 1 / 3, 0.5, 1.0])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(cores, used), min_size=1, max_size=8),
    st.lists(st.tuples(amounts, st.integers(1, 3), st.booleans()), max_size=14),
)
def test_fractional_cores_place_as_the_plain_rule(
    agents: list[tuple[float, float]], reqs: list[tuple[float, int, bool]]
) -> None:
    """Ties of free cores that only float rounding breaks go the way the plain rule's float
    order sends them; agents with more in use than their cores (negative free) too."""
    group = [_agent(i, c, u) for i, (c, u) in enumerate(agents)]
    pending = [
        _req(i, c, n, "multi-node" if multi else "single-node")
        for i, (c, n, multi) in enumerate(reqs)
    ]
    assert schedule(pending, group).placements == plain_schedule(pending, group)


def test_agents_added_between_others_place_as_the_plain_rule() -> None:
    """New agents whose ids sort between two others until the ranks are numbered again, then
    a pass: the tightest fit and ties by id as the plain rule has them."""
    agents = [AgentState("a", "default", 4, 8 * G, 0), AgentState("b", "default", 4, 8 * G, 0)]
    backlog = Backlog(agents)
    for k in range(1, 20):
        a = AgentState("a" + "z" * k, "default", 4 - (k % 3), 8 * G, 0, cpu_used=k % 2 * 0.5)
        agents.append(a)
        backlog.set_agent(a)
    reqs = [_req(i, [0.5, 1, 2, 3][i % 4], 1 + i % 2) for i in range(40)]
    backlog.add_all(reqs)
    assert backlog.run().placements == plain_schedule(reqs, agents)
