"""The agent's side of kernels: Docker containers and networks through aiodocker.

aiodocker (not docker-py in a thread pool) because the manager is asyncio end to end: many
parallel creates, long log/exec/event streams and no thread per stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import aiodocker
from aiodocker.exceptions import DockerError

from troupe.agent.base import AgentError, ExecExit, ExecOutput, ExitHandler, gather_all
from troupe.agent.kernel import RUNNER_MOUNT, container_config, files_archive
from troupe.agent.resources import host_cpu_count, host_memory_bytes, mtu_of_address
from troupe.api.agent import (
    LABEL_HOSTNAME,
    LABEL_KERNEL,
    LABEL_OWNER,
    LABEL_SESSION,
    AgentCapacity,
    KernelExit,
    KernelSpec,
    KernelStarted,
    NetworkSpec,
)
from troupe.api.models import ImageInfo

log = logging.getLogger(__name__)


@dataclass
class ShellIO:
    """Both ends of an interactive exec: bytes in, bytes out, resize, exit code."""

    exec: Any
    stream: Any

    async def read(self) -> bytes | None:
        msg = await self.stream.read_out()
        return None if msg is None else bytes(msg.data)

    async def write(self, data: bytes) -> None:
        await self.stream.write_in(data)

    async def resize(self, rows: int, cols: int) -> None:
        await self.exec.resize(h=rows, w=cols)

    async def exit_code(self) -> int:
        info = await self.exec.inspect()
        return int(info.get("ExitCode") or 0)


def runner_dir() -> str:
    return str(resources.files("troupe") / "runner")


def _docker_message(e: DockerError) -> str:
    return str(e.message if hasattr(e, "message") else e)


class DockerAgent:
    def __init__(
        self,
        name: str = "local",
        docker_url: str | None = None,
        cpu: float | None = None,
        mem: int | None = None,
        group: str = "default",
        data_root: Path | None = None,
    ) -> None:
        self.name = name
        self.group = group
        #: Data folders live in ``<data_root>/folders/<folder id>`` (shared storage on clusters).
        self.data_root = data_root or Path("/var/lib/troupe")
        self._docker_url = docker_url
        self._cpu = cpu
        self._mem = mem
        self._docker: aiodocker.Docker | None = None
        self._events_task: asyncio.Task[None] | None = None
        self._on_exit: ExitHandler | None = None

    # -- lifecycle -------------------------------------------------------------
    async def start(self, on_exit: ExitHandler | None = None) -> None:
        self._docker = aiodocker.Docker(url=self._docker_url)
        try:
            await self._docker.version()
        except Exception as e:
            await self._docker.close()
            raise AgentError(f"Docker engine not reachable: {e}") from e
        self._on_exit = on_exit
        self._events_task = asyncio.create_task(self._watch_events(), name="agent-events")

    async def close(self) -> None:
        if self._events_task:
            self._events_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._events_task
        if self._docker:
            await self._docker.close()

    async def ping(self, timeout: float = 3.0) -> bool:
        """Whether the engine answers (an agent whose engine is gone stops heartbeating)."""
        try:
            async with asyncio.timeout(timeout):
                await self.docker.version()
        except Exception:
            return False
        return True

    @property
    def docker(self) -> aiodocker.Docker:
        if self._docker is None:
            raise RuntimeError("agent not started")
        return self._docker

    async def capacity(self) -> AgentCapacity:
        swarm, mtu = False, 0
        with contextlib.suppress(DockerError):
            info = await self.docker.system.info()
            swarm = bool(info.get("Swarm", {}).get("ControlAvailable"))
            node_addr = info.get("Swarm", {}).get("NodeAddr") or ""
            if node_addr:
                mtu = mtu_of_address(node_addr)
        return AgentCapacity(
            name=self.name,
            data_marker=self.data_marker(),
            underlay_mtu=mtu,
            cpu=self._cpu if self._cpu is not None else host_cpu_count(),
            mem=self._mem if self._mem is not None else host_memory_bytes(),
            group=self.group,
            swarm_manager=swarm,
        )

    def data_marker(self) -> str:
        """An id stored in the data root, the same for every agent that shares the storage."""
        marker = self.data_root / ".troupe-data-id"
        if not marker.exists():
            self.data_root.mkdir(parents=True, exist_ok=True)
            tmp = marker.with_suffix(f".{uuid.uuid4().hex}")
            tmp.write_text(uuid.uuid4().hex + "\n")
            with contextlib.suppress(FileExistsError):  # another agent won the race
                marker.hardlink_to(tmp)
            tmp.unlink()
        return marker.read_text().strip()

    # -- images ----------------------------------------------------------------
    async def images(self) -> list[ImageInfo]:
        out: list[ImageInfo] = []
        for img in await self.docker.images.list():
            for tag in img.get("RepoTags") or []:
                if tag == "<none>:<none>":
                    continue
                out.append(
                    ImageInfo(
                        name=tag,
                        id=img["Id"],
                        size=img.get("Size", 0),
                        created=datetime.fromtimestamp(int(img.get("Created", 0)), UTC).isoformat(),
                    )
                )
        return sorted(out, key=lambda i: i.name)

    async def has_image(self, name: str) -> bool:
        try:
            await self.docker.images.inspect(name)
        except DockerError:
            return False
        return True

    # -- networks --------------------------------------------------------------
    async def create_network(self, spec: NetworkSpec) -> None:
        config: dict[str, Any] = {
            "Name": spec.name,
            "Driver": spec.driver,
            "CheckDuplicate": True,
            "Internal": spec.internal,
            "Attachable": spec.driver == "overlay",
            "IPAM": {"Driver": "default", "Config": [{"Subnet": spec.subnet}]},
            "Labels": {LABEL_SESSION: spec.session_id, LABEL_OWNER: spec.owner},
        }
        if spec.mtu:
            config["Options"] = {"com.docker.network.driver.mtu": str(spec.mtu)}
        try:
            await self.docker.networks.create(config)
        except DockerError as e:
            raise AgentError(f"creating network {spec.name}: {_docker_message(e)}") from e

    async def used_subnets(self) -> list[str]:
        """IPv4 subnets of every network on this engine (troupe's and anyone else's)."""
        out = []
        for n in await self.docker.networks.list():
            for c in (n.get("IPAM") or {}).get("Config") or []:
                sub = c.get("Subnet") or ""
                if "." in sub:
                    out.append(sub)
        return out

    async def remove_session_networks(self, session_id: str) -> None:
        nets = await self.docker.networks.list(filters={"label": [f"{LABEL_SESSION}={session_id}"]})
        for n in nets:
            await self._remove_network(n["Id"])

    async def _remove_network(self, net_id: str) -> None:
        # Endpoints of just-removed containers may linger for a moment.
        for attempt in range(20):
            try:
                await self.docker.networks.get(net_id)
            except DockerError:
                return
            try:
                await (await self.docker.networks.get(net_id)).delete()
                return
            except DockerError as e:
                if e.status == 404:
                    return
                if attempt == 19:
                    raise AgentError(f"removing network {net_id}: {_docker_message(e)}") from e
                await asyncio.sleep(0.05 * (attempt + 1))

    # -- kernels ---------------------------------------------------------------
    async def create_kernels(self, specs: Sequence[KernelSpec]) -> list[KernelStarted]:
        """Creates and starts all kernels in parallel; raises the first failure.

        Rollback is the caller's: it removes everything labelled with the session.
        """
        return await gather_all(self._create_kernel(s) for s in specs)

    async def _create_kernel(self, spec: KernelSpec) -> KernelStarted:
        folders = self.data_root / "folders"
        for m in spec.mounts:
            (folders / m.folder_id).mkdir(parents=True, exist_ok=True)
        config = container_config(spec, runner_dir(), str(folders))
        try:
            container = await self.docker.containers.create(config, name=spec.container_name)
            if spec.files:
                await container.put_archive(  # type: ignore[no-untyped-call]
                    "/", files_archive(spec.files)
                )
            await container.start()
            info = await container.show()
        except DockerError as e:
            raise AgentError(_docker_message(e), kernel=spec.hostname) from e
        nets = info.get("NetworkSettings", {}).get("Networks", {})
        ip = (nets.get(spec.network) or {}).get("IPAddress") or None
        if not info["State"].get("Running"):
            tail: list[str] = []
            with contextlib.suppress(DockerError):
                tail = await container.log(stdout=True, stderr=True, tail=5)
            detail = " ".join(line.strip() for line in tail)
            raise AgentError(
                f"exited at once with code {info['State'].get('ExitCode')}"
                + (f": {detail}" if detail else ""),
                kernel=spec.hostname,
            )
        return KernelStarted(kernel_id=spec.kernel_id, container_id=info["Id"], ip=ip)

    async def wait_ready(
        self, containers: dict[str, str], hosts: list[str], timeout: float
    ) -> None:
        """Runs the readiness check in this agent's kernels at once.

        ``containers``: hostname -> container id of the kernels here; ``hosts``: every hostname
        of the session (peers may live on other agents).
        """

        async def check(host: str, cid: str) -> None:
            peers = [h for h in hosts if h != host]
            code, out = await self.exec_collect(
                cid, ["/bin/sh", f"{RUNNER_MOUNT}/ready.sh", str(int(timeout)), *peers], user="root"
            )
            if code != 0:
                raise AgentError(out.strip() or f"readiness check exited with {code}", kernel=host)

        await gather_all(check(h, c) for h, c in containers.items())

    async def signal_go(self, container_id: str) -> None:
        """Lets a batch main1 start its command (it waits until the session is ready)."""
        code, out = await self.exec_collect(
            container_id, ["/bin/sh", "-c", ": > /run/troupe/go"], user="root"
        )
        if code != 0:
            raise AgentError(f"could not start the batch command: {out.strip()}", kernel="main1")

    async def remove_kernels(self, session_id: str) -> dict[str, str]:
        """Removes every container of a session here; returns each kernel's log.

        Networks are removed separately (:meth:`remove_session_networks`), after the kernels
        on every agent are gone: an overlay cannot be removed while any host still uses it.
        """
        containers = await self._session_containers(session_id)

        async def remove(c: dict[str, Any]) -> tuple[str, str]:
            host = c["Labels"].get(LABEL_HOSTNAME, c["Id"][:12])
            text = ""
            with contextlib.suppress(DockerError):
                lines = await self.docker.containers.container(c["Id"]).log(
                    stdout=True, stderr=True, timestamps=True
                )
                text = "".join(lines)
            with contextlib.suppress(DockerError):
                await self.docker.containers.container(c["Id"]).delete(force=True, v=True)
            return host, text

        return dict(await asyncio.gather(*(remove(c) for c in containers)))

    async def _session_containers(self, session_id: str) -> list[dict[str, Any]]:
        raw = await self.docker._query_json(  # list() wraps away the labels we need
            "containers/json",
            params={
                "all": "1",
                "filters": json.dumps({"label": [f"{LABEL_SESSION}={session_id}"]}),
            },
        )
        return list(raw)

    async def list_kernels(self) -> list[dict[str, Any]]:
        """All troupe containers on this engine (for reconciliation after restarts)."""
        raw = await self.docker._query_json(
            "containers/json",
            params={"all": "1", "filters": json.dumps({"label": [LABEL_SESSION]})},
        )
        return [
            {
                "session_id": c["Labels"][LABEL_SESSION],
                "kernel_id": c["Labels"].get(LABEL_KERNEL),
                "hostname": c["Labels"].get(LABEL_HOSTNAME),
                "container_id": c["Id"],
                "state": c["State"],
            }
            for c in raw
        ]

    async def list_session_ids_with_networks(self) -> set[str]:
        nets = await self.docker.networks.list(filters={"label": [LABEL_SESSION]})
        return {n["Labels"][LABEL_SESSION] for n in nets if n.get("Labels")}

    # -- logs and exec ---------------------------------------------------------
    async def logs(self, container_id: str, follow: bool = False) -> AsyncIterator[str]:
        """Timestamped log lines (``2026-...Z text``) of one kernel."""
        c = self.docker.containers.container(container_id)
        try:
            if follow:
                async for line in c.log(stdout=True, stderr=True, follow=True, timestamps=True):
                    yield line
            else:
                for line in await c.log(stdout=True, stderr=True, timestamps=True):
                    yield line
        except DockerError as e:
            if e.status != 404:
                raise

    async def exec_stream(
        self, container_id: str, command: list[str], user: str = "work"
    ) -> AsyncIterator[ExecOutput | ExecExit]:
        """Runs a command with the kernel's environment; yields output, then the exit code."""
        c = self.docker.containers.container(container_id)
        ex = await c.exec(
            ["/bin/sh", f"{RUNNER_MOUNT}/exec.sh", *command],
            user=user,
            workdir="/home/work" if user == "work" else "/",
        )
        async with ex.start(detach=False) as stream:
            while True:
                msg = await stream.read_out()
                if msg is None:
                    break
                yield ExecOutput(bytes(msg.data))
        info = await ex.inspect()
        yield ExecExit(int(info.get("ExitCode") or 0))

    async def exec_collect(
        self, container_id: str, command: list[str], user: str = "work"
    ) -> tuple[int, str]:
        out = bytearray()
        code = -1
        try:
            async for item in self.exec_stream(container_id, command, user):
                if isinstance(item, ExecOutput):
                    out += item.data
                else:
                    code = item.exit_code
        except DockerError as e:
            return -1, _docker_message(e)
        return code, out.decode(errors="replace")

    @contextlib.asynccontextmanager
    async def shell(self, container_id: str, user: str = "work") -> AsyncIterator[ShellIO]:
        """An interactive login shell with a TTY (bash if the image has it, else sh)."""
        c = self.docker.containers.container(container_id)
        ex = await c.exec(
            [
                "/bin/sh",
                f"{RUNNER_MOUNT}/exec.sh",
                "/bin/sh",
                "-c",
                "if [ -x /bin/bash ]; then exec /bin/bash -l; else exec /bin/sh -l; fi",
            ],
            stdin=True,
            tty=True,
            user=user,
            environment={"TERM": "xterm-256color"},
            workdir="/home/work" if user == "work" else "/",
        )
        async with ex.start(detach=False) as stream:
            yield ShellIO(ex, stream)

    # -- events ----------------------------------------------------------------
    async def _watch_events(self) -> None:
        """Reports kernels that stop on their own; reconnects if the stream breaks."""
        delay = 0.1
        while True:
            try:
                async for event in self._event_stream():
                    delay = 0.1
                    await self._handle_event(event)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # engine restarted or stream broke
                log.warning("docker event stream ended: %s; reconnecting", e)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _event_stream(self) -> AsyncIterator[dict[str, Any]]:
        params = {
            "filters": json.dumps(
                {"type": ["container"], "event": ["die", "oom"], "label": [LABEL_SESSION]}
            )
        }
        async with self.docker._query("events", params=params, timeout=None) as resp:
            while True:
                line = await resp.content.readline()
                if not line:
                    return
                if line.strip():
                    yield json.loads(line)

    async def _handle_event(self, event: dict[str, Any]) -> None:
        if event.get("Action") != "die" or self._on_exit is None:
            return
        attrs = event.get("Actor", {}).get("Attributes", {})
        cid = event.get("Actor", {}).get("ID") or event.get("id")
        session_id, kernel_id = attrs.get(LABEL_SESSION), attrs.get(LABEL_KERNEL)
        if not (cid and session_id and kernel_id):
            return
        oom, error = False, ""
        last: list[str] = []
        with contextlib.suppress(DockerError):
            info = await self.docker.containers.container(cid).show()
            oom = bool(info["State"].get("OOMKilled"))
            error = str(info["State"].get("Error") or "")
            lines = await self.docker.containers.container(cid).log(
                stdout=True, stderr=True, tail=20
            )
            last = [line.rstrip("\n") for line in lines]
        await self._on_exit(
            KernelExit(
                session_id=session_id,
                kernel_id=kernel_id,
                exit_code=int(attrs.get("exitCode", -1)),
                oom_killed=oom,
                error=error,
                last_logs=last,
            )
        )
