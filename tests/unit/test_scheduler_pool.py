"""The pool's index (troupe.manager.scheduler_pool) through holds, placements, agents that
change, come and go: every agent in the list of its memory level and, with free GPUs, of its
free-GPU count, each list sorted and none empty, the lists highest first (a search stops at
the first below what it needs), and the list of every agent by free cores, made when asked,
equal to all of them sorted."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.test_scheduler import G

from troupe.manager.scheduler import AgentState, Request
from troupe.manager.scheduler_backlog import Backlog
from troupe.manager.scheduler_keys import RANK_MASK, cores_key
from troupe.manager.scheduler_pool import Pool
from troupe.manager.scheduler_take import level_of

agents_st = st.lists(
    st.builds(
        AgentState,
        id=st.sampled_from([f"a{i}" for i in range(8)]),
        group=st.just("default"),
        cpu=st.sampled_from([1.0, 2.0, 4.0, 8.0]),
        mem=st.sampled_from([1, 3, 16, 300, 4 * G, 64 * G]),
        gpu=st.sampled_from([0, 1, 2, 4]),
        cpu_used=st.sampled_from([0.0, 0.5, 1 / 3]),
    ),
    min_size=1,
    max_size=8,
    unique_by=lambda a: a.id,
)
requests_st = st.lists(
    st.builds(
        Request,
        session_id=st.uuids().map(str),
        group=st.just("default"),
        mode=st.sampled_from(["single-node", "multi-node"]),
        size=st.integers(1, 3),
        cpu=st.sampled_from([0.5, 1.0, 1 / 3]),
        mem=st.sampled_from([0, 1, 2, 256, G, 8 * G]),
        gpu=st.sampled_from([0, 0, 1]),
    ),
    max_size=12,
)


def assert_indexed(pool: Pool) -> None:
    entries: list[int] = []
    for by_mem, lists in ((True, pool.by_mem), (False, pool.by_gpu)):
        assert list(lists) == sorted(lists, reverse=True)
        for key, bucket in lists.items():
            assert bucket and bucket == sorted(bucket)
            for entry in bucket:
                agent_id = pool.id_of[entry & RANK_MASK]
                f = pool.free[agent_id]
                assert entry == cores_key(f[0]) | pool.ranks.rank[agent_id]
                assert key == (level_of(f[1]) if by_mem else int(f[2]))
            if by_mem:
                entries += bucket
    assert sorted(entries) == pool.by_cpu
    assert len(entries) == len(pool.base)
    gpus = {pool.id_of[e & RANK_MASK] for b in pool.by_gpu.values() for e in b}
    assert gpus == {a for a, f in pool.free.items() if f[2] > 0}
    # each rank's slot holds the agent's own lists and state (the hot paths read them)
    assert set(pool.slots) == set(pool.id_of)
    for rank, (agent_id, free, used, base) in pool.slots.items():
        assert pool.id_of[rank] == agent_id
        assert free is pool.free[agent_id]
        assert used is pool.used[agent_id] and base is pool.base[agent_id]


@settings(max_examples=300, deadline=None)
@given(agents_st, requests_st, agents_st, st.data())
def test_the_index_stays_whole_and_in_order(
    agents: list[AgentState],
    reqs: list[Request],
    changes: list[AgentState],
    data: st.DataObject,
) -> None:
    backlog = Backlog(agents)
    pool = backlog.pools["default"]
    assert_indexed(pool)
    backlog.add_all([replace(r, order=float(i)) for i, r in enumerate(reqs)])
    backlog.run()
    assert_indexed(pool)
    for a in changes:  # new, or back with another capacity and use
        backlog.set_agent(a)
        assert_indexed(pool)
    for agent_id in data.draw(st.lists(st.sampled_from(sorted(pool.base)), unique=True)):
        if len(pool.base) > 1:
            backlog.remove_agent(agent_id)
            assert_indexed(pool)
    backlog.run()
    assert_indexed(pool)


def test_the_index_stays_whole_when_the_ranks_are_numbered_again() -> None:
    """Ids that each sort between the last one and ``b`` use up the gap between two ranks:
    every rank changes, and with it every entry and slot."""
    pool = Pool([AgentState("a", "default", 4, 8 * G, 1), AgentState("b", "default", 8, G, 0)])
    first = pool.ranks.rank["b"]
    for k in range(1, 20):
        pool.set_agent(AgentState("a" + "z" * k, "default", 1 + k % 4, 4 * G, k % 3))
        assert_indexed(pool)
    assert pool.ranks.rank["b"] != first  # numbered again
    pool.hold("az", 0.5, G, 0)
    assert_indexed(pool)
