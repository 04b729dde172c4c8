"""Session networks on this engine: created per session, found again by their label.

A session's network carries the session label, so removal and the manager's orphan sweep need
no record of their own: the engine's labels are the truth.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiodocker
from aiodocker.exceptions import DockerError
from aiodocker.networks import DockerNetwork

from troupe.agent.engine import message, step
from troupe.api.agent import LABEL_OWNER, LABEL_SESSION, NetworkSpec
from troupe.api.errors import AgentFailed

#: Tries to remove a network whose just-removed containers' endpoints still linger.
REMOVE_TRIES = 20


def network_config(spec: NetworkSpec) -> dict[str, Any]:
    config: dict[str, Any] = {
        "Name": spec.name,
        "Driver": spec.driver,
        "CheckDuplicate": True,
        "Internal": spec.internal,
        # Overlays must be attachable: kernels are plain containers, not Swarm services.
        "Attachable": spec.driver == "overlay",
        "IPAM": {"Driver": "default", "Config": [{"Subnet": spec.subnet}]},
        "Labels": {LABEL_SESSION: spec.session_id, LABEL_OWNER: spec.owner},
    }
    if spec.mtu:
        config["Options"] = {"com.docker.network.driver.mtu": str(spec.mtu)}
    return config


async def create_network(docker: aiodocker.Docker, spec: NetworkSpec) -> None:
    with step(f"creating network {spec.name}"):
        await docker.networks.create(network_config(spec))


async def used_subnets(docker: aiodocker.Docker) -> list[str]:
    """IPv4 subnets of every network on this engine (troupe's and anyone else's)."""
    with step("listing networks"):
        nets = await docker.networks.list()
    return [
        sub
        for n in nets
        for c in (n.get("IPAM") or {}).get("Config") or []
        if "." in (sub := c.get("Subnet") or "")
    ]


async def remove_session_networks(docker: aiodocker.Docker, session_id: str) -> None:
    with step("listing networks"):
        nets = await docker.networks.list(filters={"label": [f"{LABEL_SESSION}={session_id}"]})
    for n in nets:
        await _remove(docker, n["Id"])


async def _remove(docker: aiodocker.Docker, net_id: str) -> None:
    # Endpoints of just-removed containers may linger for a moment: retry, backing off.
    for attempt in range(REMOVE_TRIES):
        try:
            network = DockerNetwork(docker, net_id)  # type: ignore[no-untyped-call]
            await network.delete()  # (networks.get() would inspect it first)
            return
        except DockerError as e:
            if e.status == 404:
                return
            if attempt == REMOVE_TRIES - 1:
                raise AgentFailed(f"removing network {net_id}: {message(e)}") from e
        await asyncio.sleep(0.05 * (attempt + 1))


async def session_ids_with_networks(docker: aiodocker.Docker) -> set[str]:
    """Sessions that still have a network here (the manager sweeps those it forgot)."""
    with step("listing networks"):
        nets = await docker.networks.list(filters={"label": [LABEL_SESSION]})
    return {n["Labels"][LABEL_SESSION] for n in nets if (n.get("Labels") or {}).get(LABEL_SESSION)}
