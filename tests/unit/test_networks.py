"""Network planning: bridge on one agent, overlay across agents, shared storage for folders."""

from __future__ import annotations

import pytest

from troupe.api.errors import AgentFailed
from troupe.manager.networks import AgentNet, free_subnet, plan_network

A = [
    AgentNet("a1", True, True, "m", 1500),
    AgentNet("a2", False, True, "m", 9000),
    AgentNet("a3", False, True, "other", 1500),
]


def test_one_agent_gets_a_bridge() -> None:
    plan = plan_network(A, ["a2"], with_folders=True)
    assert (plan.driver, plan.creator, plan.mtu) == ("bridge", "a2", 0)


def test_several_agents_get_an_overlay_from_a_swarm_manager() -> None:
    plan = plan_network(A, ["a2", "a3"], with_folders=False)
    assert (plan.driver, plan.creator, plan.mtu) == ("overlay", "a1", 1450)
    assert plan_network(A, ["a2", "a1"], with_folders=False).creator == "a1"


def test_folders_need_the_same_data_root() -> None:
    assert plan_network(A, ["a1", "a2"], with_folders=True).driver == "overlay"
    with pytest.raises(AgentFailed, match=r"shared storage.*a3 \(other\)"):
        plan_network(A, ["a1", "a3"], with_folders=True)


def test_no_swarm_manager() -> None:
    with pytest.raises(AgentFailed, match="Swarm manager"):
        plan_network(A[1:], ["a2", "a3"], with_folders=False)


def test_free_subnet_skips_used_ones() -> None:
    assert free_subnet("10.88.0.0/16", 24, []) == "10.88.0.0/24"
    assert free_subnet("10.88.0.0/16", 24, ["10.88.0.0/24", "10.88.1.0/25", "fd00::/64"]) == (
        "10.88.2.0/24"
    )
    with pytest.raises(AgentFailed, match="no free subnet"):
        free_subnet("10.88.0.0/24", 24, ["10.0.0.0/8"])
