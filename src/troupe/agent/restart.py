"""A session's kernels started again in the containers they had: a whole-session restart in
place (docs/policies.md), without removing and creating them (the removal alone took about a
second of an N=4 restart).

Per kernel: a running container is killed (its death is no news: the agent is restarting it,
see :data:`DockerAgent.removing`), the failed attempt's log tail read (the manager keeps it
as that attempt's: the engine's log of a container goes on across starts), the kernel's files
archive written again (its ``kernel.conf`` carries the new ``TROUPE_RESTART_COUNT``, which the
entrypoint exports for the command, ``exec``, terminals and SSH alike) and the container
started again: same id, name, hostname, address, network and folders. The readiness wait then
reads the log from this start on (:func:`troupe.agent.ready.wait_ready`'s ``since``).

A container that is gone, or that the engine killed for memory, is made anew instead (removed
first, its log kept the same way): the restart of that kernel is the fresh one it was before.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from aiodocker.exceptions import DockerError

from troupe.agent import logs as klogs
from troupe.agent import ready
from troupe.agent.engine import step
from troupe.agent.files import kernel_files
from troupe.agent.kernel import endpoint, files_archive
from troupe.api.agent import KernelRestarted, KernelSpec, KernelStarted
from troupe.api.errors import AgentFailed

if TYPE_CHECKING:
    from troupe.agent.docker_backend import DockerAgent


def started_of(spec: KernelSpec, info: dict[str, Any]) -> KernelStarted:
    """What the manager records of a started container (``show``'s answer)."""
    nets = info.get("NetworkSettings", {}).get("Networks", {})
    started = info["State"].get("StartedAt")
    return KernelStarted(
        kernel_id=spec.kernel_id,
        container_id=info["Id"],
        ip=(nets.get(spec.network) or {}).get("IPAddress") or None,
        created_at=ready.engine_time(info["Created"]) if info.get("Created") else None,
        started_at=ready.engine_time(started) if started else None,
    )


async def restart_kernel(agent: DockerAgent, spec: KernelSpec) -> KernelRestarted:
    """``spec``'s kernel started again (see the module's docstring)."""
    container = agent.docker.containers.container(spec.container_name)
    try:
        info = await container.show()
    except DockerError as e:
        if e.status != 404:
            raise AgentFailed(
                f"cannot inspect its container: {e.message}", kernel=spec.hostname
            ) from None
        info = None
    state = (info or {}).get("State") or {}
    if info is None or state.get("OOMKilled") or state.get("Status") in ("dead", "removing"):
        log = ""
        if info is not None:
            log = await agent.remove_container(info["Id"])
        fresh = await agent.create_kernel(spec)
        return KernelRestarted(**fresh.model_dump(), log=log, recreated=True)
    cid = info["Id"]
    agent.removing.add(cid)  # (until started again: the kill's death is no news)
    try:
        with step(kernel=spec.hostname):
            if state.get("Running"):
                with contextlib.suppress(DockerError):  # (stopped meanwhile)
                    await container.kill(signal="SIGKILL")
                await container.wait()
            log = await klogs.last_bytes(agent.docker, cid, agent.saved_log_bytes, tty=False)
            await _keep_address(agent, spec, info)
            files = kernel_files(spec) if spec.files else None
            if spec.files and files is None:
                await container.put_archive("/", files_archive(spec.files))  # type: ignore[no-untyped-call]
            await container.start()
            info = await container.show()
    finally:
        agent.removing.discard(cid)
    agent.restarted(
        cid, files.events if files else None, ready.engine_nanos(info["State"]["StartedAt"])
    )
    if not info["State"].get("Running"):
        raise AgentFailed(
            f"exited at once with code {info['State'].get('ExitCode')}", kernel=spec.hostname
        )
    return KernelRestarted(**started_of(spec, info).model_dump(), log=log)


async def _keep_address(agent: DockerAgent, spec: KernelSpec, info: dict[str, Any]) -> None:
    """Pins the kernel's address on its network (the engine gives a stopped container's
    endpoint a free one at its next start otherwise: kernels started at once swap theirs).
    Once per container: a container made by a fresh start had none pinned."""
    nets = info.get("NetworkSettings", {}).get("Networks", {})
    pinned = ((nets.get(spec.network) or {}).get("IPAMConfig") or {}).get("IPv4Address")
    if not spec.ip or pinned == spec.ip:
        return
    network = await agent.docker.networks.get(spec.network)
    with contextlib.suppress(DockerError):  # (not connected: connected below)
        await network.disconnect({"Container": info["Id"], "Force": True})
    await network.connect({"Container": info["Id"], "EndpointConfig": endpoint(spec)})
