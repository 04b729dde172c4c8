"""Which network a session gets, and its subnet (docs/contract.md, 'Network'). Pure functions."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from troupe.api.errors import AgentFailed

#: Bytes VXLAN adds to every packet of an overlay network.
VXLAN_OVERHEAD = 50


@dataclass(frozen=True)
class AgentNet:
    """What network planning needs to know about an agent."""

    id: str
    swarm_manager: bool
    alive: bool
    data_marker: str
    underlay_mtu: int


@dataclass(frozen=True)
class NetworkPlan:
    driver: Literal["bridge", "overlay"]
    #: the agent that creates (and at the end removes) the network
    creator: str
    #: overlay MTU; 0 keeps Docker's default
    mtu: int


def plan_network(
    agents: Sequence[AgentNet], placement: Sequence[str], with_folders: bool
) -> NetworkPlan:
    """Kernels on one agent share a bridge; kernels on several agents join a Swarm attachable
    overlay, created through an agent whose engine is a Swarm manager (one of the session's
    own agents if possible). ``placement``: the distinct agents of the session's kernels."""
    by_id = {a.id: a for a in agents}
    if len(placement) == 1:
        return NetworkPlan("bridge", placement[0], 0)
    if with_folders:
        markers = {by_id[a].data_marker for a in placement}
        if len(markers) > 1 or "" in markers:
            names = ", ".join(f"{a} ({by_id[a].data_marker or 'no marker'})" for a in placement)
            raise AgentFailed(
                f"data folders need shared storage, but agents {names} do not report the same "
                "data root"
            )
    own = [a for a in placement if by_id[a].swarm_manager]
    others = [a.id for a in agents if a.swarm_manager and a.alive and a.id not in placement]
    if not own + others:
        raise AgentFailed("kernels span agents, but no agent's engine is a Swarm manager")
    mtus = [by_id[a].underlay_mtu for a in placement if by_id[a].underlay_mtu]
    mtu = min(mtus) - VXLAN_OVERHEAD if mtus else 0
    return NetworkPlan("overlay", (own + others)[0], mtu)


def free_subnet(pool: str, prefix: int, used: Iterable[str]) -> str:
    """The first subnet of ``prefix`` bits in ``pool`` overlapping none of ``used`` (IPv4)."""
    taken = [ipaddress.ip_network(u) for u in used if "." in u]
    for net in ipaddress.ip_network(pool).subnets(new_prefix=prefix):
        if not any(net.overlaps(t) for t in taken):
            return str(net)
    raise AgentFailed(f"no free subnet left in {pool}")
