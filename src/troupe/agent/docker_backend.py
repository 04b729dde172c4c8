"""The agent's side of kernels: one Docker engine, through aiodocker.

:class:`DockerAgent` is the one class the rest of troupe uses (in process in the server, or
behind :mod:`troupe.agent.app` on another host); the work lives in modules by job: kernel
containers (:mod:`.kernel`), networks, logs, exec and terminals, engine events. aiodocker (not
docker-py in a thread pool) because manager and agent are asyncio end to end: many parallel
creates, long log/exec/event streams and no thread per stream. Every engine failure leaves as a
domain error (:mod:`troupe.api.errors`), never as aiodocker's.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiodocker
from aiodocker.exceptions import DockerError

from troupe.agent import exec as execs
from troupe.agent import gpus as gpu_discovery
from troupe.agent import logs as klogs
from troupe.agent import metrics as kmetrics
from troupe.agent import netns, networks, ready, restart, runtime
from troupe.agent.engine import end_if_out_of_memory, list_containers, own_place, step
from troupe.agent.events import ExitWatcher
from troupe.agent.exec import ShellIO
from troupe.agent.files import discard, kernel_files, peers_started, remove_files
from troupe.agent.hold import HELD, Holds
from troupe.agent.images import ImageOps
from troupe.agent.kernel import (
    KernelLimits,
    container_config,
    files_archive,
    folder_path,
    instance_of,
    new_folder,
    runner_dir,
)
from troupe.agent.ownership import Kernels, is_kernel
from troupe.agent.resources import (
    data_marker,
    host_cpu_count,
    host_memory_bytes,
    mtu_of_address,
    nofile_limit,
)
from troupe.api import defaults
from troupe.api.agent import (
    LABEL_GPUS,
    LABEL_HOSTNAME,
    LABEL_KERNEL,
    LABEL_SESSION,
    AgentCapacity,
    ExitHandler,
    KernelRestarted,
    KernelSpec,
    KernelStarted,
    KernelState,
    NetworkSpec,
    ReadyTimes,
)
from troupe.api.aio import gather_all
from troupe.api.defaults import AGENT_DATA_ROOT
from troupe.api.errors import AgentFailed, TroupeError
from troupe.api.exec import ExecItem
from troupe.api.metrics import AgentMetrics
from troupe.api.models import GpuInfo
from troupe.api.pipe import Pipe

log = logging.getLogger(__name__)

#: Lines of output quoted when a kernel exits at once.
START_FAILURE_LINES = 5
#: How long the death of a container this agent removed is not reported as an exit.
REMOVING_SECONDS = 60.0


class DockerAgent(ImageOps):
    """An :class:`troupe.api.agent.AgentBackend` on one Docker engine (its images: the
    :class:`ImageOps` part)."""

    def __init__(
        self,
        name: str = "local",
        docker_url: str | None = None,
        cpu: float | None = None,
        mem: int | None = None,
        group: str = defaults.GROUP,
        data_root: Path | None = None,
        *,
        pids_limit: int = defaults.PIDS_LIMIT,
        nofile: int = defaults.NOFILE,
        log_max_size: str = defaults.ENGINE_LOG_MAX_SIZE,
        log_max_files: int = defaults.ENGINE_LOG_MAX_FILES,
        saved_log_bytes: int = defaults.SAVED_LOG_BYTES,
        gpus: str = "auto",
        nvidia_smi: str | None = None,
        metrics_interval: float = kmetrics.INTERVAL,
    ) -> None:
        self.name = name
        self.group = group
        #: Data folders live in ``<data_root>/folders/<folder id>`` (shared storage on clusters).
        self.data_root = data_root or AGENT_DATA_ROOT
        #: what its kernels' containers are labelled with: it watches only theirs
        self.instance = instance_of(name, self.data_root)
        #: What each kernel's container may take besides CPU and memory (clamped at start).
        self.limits = KernelLimits(
            pids=pids_limit, nofile=nofile, log_max_size=log_max_size, log_max_files=log_max_files
        )
        #: A removed kernel's log: only its last this many bytes are returned.
        self.saved_log_bytes = saved_log_bytes
        self._docker_url = docker_url
        self._cpu = cpu
        self._mem = mem
        self._docker: aiodocker.Docker | None = None
        self._exits: ExitWatcher | None = None
        #: containers this agent is removing (their deaths are no news), kept a while after
        self.removing: set[str] = set()
        #: container id -> its readiness FIFO here, from its creation until its readiness wait
        self._events: dict[str, Path] = {}
        #: container id -> its last start (ns) after a restart, until its readiness wait
        self._since: dict[str, int] = {}
        #: the containers requests may name: this engine's troupe kernels (finding N5)
        self.kernels = Kernels(lambda: self.docker)
        self.holds = Holds(lambda: self.docker)  # failed kernels' containers started again
        #: ``--gpus`` and ``--nvidia-smi``; what start() found: the GPUs offered, or why none
        self._gpu_choice = gpu_discovery.Choice.parse(gpus)
        self._nvidia_smi = nvidia_smi
        self.gpus: list[GpuInfo] = []
        self.gpu_reason = ""
        self.metrics_interval = metrics_interval  # seconds between two samples (0: none)
        self._sampler: kmetrics.Sampler | None = None

    # -- lifecycle -------------------------------------------------------------
    async def start(self, on_exit: ExitHandler | None = None) -> None:
        """Makes the data root and its folders private (mode 0700: the engine, root, still
        mounts them), connects to the engine (:class:`AgentFailed` if it does not answer), finds
        the GPUs to offer (:mod:`troupe.agent.gpus`, once) and, given ``on_exit``, reports
        kernels that stop on their own to it."""
        self.private_dirs()
        for root in {str(self.data_root.absolute()), str(self.data_root.resolve())}:
            own_place(root, "<data root>")
        own_place(runner_dir(), "<runner>")
        self.limits = dataclasses.replace(self.limits, nofile=nofile_limit(self.limits.nofile))
        docker = aiodocker.Docker(url=self._docker_url)
        try:
            await docker.version()
        except Exception as e:
            await docker.close()
            raise AgentFailed(f"Docker engine not reachable: {e}") from e
        self._docker = docker
        self.gpus, self.gpu_reason = await gpu_discovery.discover(
            docker, self._gpu_choice, self._nvidia_smi
        )
        if self.gpus:
            log.info("offering %d GPUs: %s", len(self.gpus), ", ".join(g.model for g in self.gpus))
        else:
            log.info("offering no GPUs: %s", self.gpu_reason)
        if on_exit is not None:
            self._exits = ExitWatcher(
                docker, on_exit, self.removing.__contains__, self.holds, self.instance
            )
            self._exits.start()
        self._sampler = kmetrics.Sampler(
            docker, self.metrics_interval, self.gpus, self._nvidia_smi, owner=self.instance
        )
        self._sampler.start()  # (samples nothing with an interval of 0)

    async def close(self) -> None:
        for task in (t for t in (self._sampler, self._exits) if t):
            await task.close()
        self.holds.close()
        if self._docker:
            await self._docker.close()

    async def ping(self, timeout: float = 3.0) -> bool:  # (a gone engine: no heartbeats)
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
        with contextlib.suppress(DockerError):  # a host without Swarm details still serves
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
            gpu=len(self.gpus),
            gpus=self.gpus,
            gpu_reason=self.gpu_reason,
        )

    async def metrics(self, since: float | None = None) -> AgentMetrics:
        """The kernels' samples taken after ``since`` (epoch seconds) that are still kept."""
        s = self._sampler
        return s.since(since) if s else AgentMetrics(interval=self.metrics_interval)

    @property
    def folders_root(self) -> Path:
        return self.data_root / "folders"

    def private_dirs(self) -> None:
        """The data root and ``folders`` in it, created if need be, mode 0700 whatever the
        umask: users' data is not for other accounts of the host."""
        try:
            for d in (self.data_root, self.folders_root):
                d.mkdir(parents=True, exist_ok=True, mode=0o700)
                d.chmod(0o700)
        except OSError as e:
            raise AgentFailed(f"data root {self.data_root}: {e.strerror or e}") from e

    def data_marker(self) -> str:
        """An id stored in the data root, the same for every agent that shares the storage."""
        return data_marker(self.data_root)

    # -- networks --------------------------------------------------------------
    async def create_network(self, spec: NetworkSpec) -> None:
        await networks.create_network(self.docker, spec)

    async def used_subnets(self) -> list[str]:
        """IPv4 subnets of every network on this engine (troupe's and anyone else's)."""
        return await networks.used_subnets(self.docker)

    async def remove_session_networks(self, session_id: str) -> None:
        await networks.remove_session_networks(self.docker, session_id)

    async def list_session_ids_with_networks(self) -> set[str]:
        return await networks.session_ids_with_networks(self.docker)

    # -- kernels ---------------------------------------------------------------
    async def create_kernels(self, specs: Sequence[KernelSpec]) -> list[KernelStarted]:
        """Creates and starts all kernels in parallel; raises the first failure. Every mount is
        checked first (:class:`Invalid` before anything is created: a folder id that is not
        one, or outside ``<data_root>/folders``). Rollback (removing the session's) is the
        caller's."""
        for spec in specs:
            for m in spec.mounts:
                folder_path(self.folders_root, m)
        if any(s.mounts for s in specs):
            self.private_dirs()  # (again: the folders' parent may have been removed since)
        return await gather_all(self.create_kernel(s) for s in specs)

    async def restart_kernels(self, specs: Sequence[KernelSpec]) -> list[KernelRestarted]:
        """The kernels started again in their containers (:mod:`troupe.agent.restart`)."""
        return await gather_all(restart.restart_kernel(self, s) for s in specs)

    async def create_kernel(self, spec: KernelSpec) -> KernelStarted:
        """The kernel's files go in as a read-only bind mount of their archive, which the
        entrypoint unpacks; through the engine's archive upload where FILES_DIR is not ours.
        The archive stays until the container is removed (:meth:`remove_kernels`)."""
        folders = self.folders_root
        for m in spec.mounts:
            new_folder(folders / m.folder_id)
            folder_path(folders, m)  # again, now that it exists
        files = kernel_files(spec) if spec.files else None
        config = container_config(
            spec, runner_dir(), str(folders), self.limits, files, runtime.host_dir(), self.instance
        )
        try:
            with step(kernel=spec.hostname):
                await runtime.check_platform(self.docker, spec.image)
                container = await self.docker.containers.create(config, name=spec.container_name)
                if spec.files and files is None:
                    await container.put_archive(  # type: ignore[no-untyped-call]
                        "/", files_archive(spec.files)
                    )
                await container.start()
                info = await container.show()
        except BaseException:
            # (a container made before the failure goes with the rollback)
            discard(spec.container_name)
            raise
        self.kernels.add(info["Id"])
        if files and files.events:
            self._events[info["Id"]] = files.events
        if not info["State"].get("Running"):
            tail = await klogs.last_lines(self.docker, info["Id"], START_FAILURE_LINES)
            detail = " ".join(line.strip() for line in tail)
            raise AgentFailed(
                f"exited at once with code {info['State'].get('ExitCode')}"
                + (f": {detail}" if detail else ""),
                kernel=spec.hostname,
            )
        started = restart.started_of(spec, info)
        self.holds.ran(info["Id"], spec.network, started.ip)
        return started

    def restarted(self, container_id: str, fifo: Path | None, started_ns: int) -> None:
        """A container started again: its readiness FIFO, and where its new log begins."""
        if fifo:
            self._events[container_id] = fifo
        self._since[container_id] = started_ns

    async def wait_ready(
        self, containers: dict[str, str], hosts: list[str], timeout: float
    ) -> dict[str, ReadyTimes]:
        """Waits until this agent's kernels (``containers``: hostname -> id) say they are ready
        (:mod:`troupe.agent.ready`); of ``hosts`` only their count is needed (each kernel knows
        its peers), for the neighbour table's check.
        Asked once every kernel of the session started: says so to each kernel here, which
        then probes its peers (:func:`peers_started`)."""
        containers = {h: await self.kernels.resolve(c) for h, c in containers.items()}
        fifos = [f for c in containers.values() if (f := self._events.pop(c, None))]
        since = {h: self._since.pop(c, 0) for h, c in containers.items()}
        with peers_started(fifos), self.holds.worded(containers.values()):
            return await ready.wait_ready(self.docker, containers, timeout, since, len(hosts))

    async def signal_go(self, container_id: str) -> None:
        """Lets a batch main1 start its command (it waits until the session is ready)."""
        cid = await self.kernels.resolve(container_id)  # (404 for anything else)
        code, out = await self.exec_collect(cid, ["/bin/sh", "-c", ": > /run/troupe/go"], "root")
        # (a word killed by a signal, 128+, was read: only once the command ran does the sweep
        # of a supervised one that failed at once kill it; else the container's end, reported,
        # or the host's for memory, maybe before the word: the container's end says so)
        if code >= 128:
            await end_if_out_of_memory(self.docker, cid)
        elif code != 0:
            raise AgentFailed(f"could not start the batch command: {out.strip()}", kernel="main1")

    async def remove_kernels(self, session_id: str) -> dict[str, str]:
        """Removes every container of a session here; returns each kernel's log: its last
        ``saved_log_bytes`` at most, read as a stream (see :func:`troupe.agent.logs.last_bytes`).

        Networks are removed separately (:meth:`remove_session_networks`), after the kernels
        on every agent are gone: an overlay cannot be removed while any host still uses it.
        """
        containers = await self._containers(f"{LABEL_SESSION}={session_id}")
        texts = await asyncio.gather(*(self.remove_container(c["Id"]) for c in containers))
        remove_files(session_id)
        hosts = [c["Labels"].get(LABEL_HOSTNAME, c["Id"][:12]) for c in containers]
        return dict(zip(hosts, texts, strict=True))

    async def remove_container(self, cid: str) -> str:
        """Removes one kernel's container; its log's last ``saved_log_bytes``."""
        self.removing.add(cid)  # (its die event may come after the removal)
        self._events.pop(cid, None)
        self._since.pop(cid, None)
        self.kernels.forget(cid)
        asyncio.get_running_loop().call_later(REMOVING_SECONDS, self.removing.discard, cid)
        await self.holds.settle(cid)  # (a held start under way ends first)
        # (kernels never have a TTY: container_config sets none)
        text = await klogs.last_bytes(self.docker, cid, self.saved_log_bytes, tty=False)
        with contextlib.suppress(DockerError):  # already gone: nothing to remove
            await self.docker.containers.container(cid).delete(force=True, v=True)
        self.holds.forget(cid)  # (its marker goes with its files)
        return text

    async def list_kernels(self) -> list[KernelState]:
        """All troupe containers on this engine (for reconciliation after restarts)."""
        listed = await self._containers(LABEL_SESSION)
        for c in listed:
            if is_kernel(c["Labels"]):
                self.kernels.add(c["Id"])
        return [
            KernelState(
                session_id=c["Labels"][LABEL_SESSION],
                kernel_id=c["Labels"].get(LABEL_KERNEL) or "",
                hostname=c["Labels"].get(LABEL_HOSTNAME) or c["Id"][:12],
                container_id=c["Id"],
                state=HELD if self.holds.is_held(c["Id"], c["Names"][0]) else c["State"],
                gpus=[g for g in (c["Labels"].get(LABEL_GPUS) or "").split(",") if g],
            )
            for c in listed
        ]

    async def _containers(self, label: str) -> list[dict[str, Any]]:
        """This engine's containers (running or not) with a label."""
        return await list_containers(self.docker, label)

    # -- logs, exec and terminals ---------------------------------------------------
    # Each names a container: troupe kernels only, as work or root (:mod:`.ownership`).
    async def open_logs(self, container_id: str, follow: bool = False) -> AsyncIterator[str]:
        """:meth:`logs`, but an unknown container raises :class:`NotFound` here, before any
        line (so the HTTP face can still answer 404)."""
        cid = await self.kernels.resolve(container_id)
        with self.kernels.gone_if_unknown(cid):
            return await klogs.open_logs(self.docker, cid, follow)

    async def logs(self, container_id: str, follow: bool = False) -> AsyncIterator[str]:
        """Timestamped log lines (``2026-...Z text``) of one kernel."""
        async for line in await self.open_logs(container_id, follow):
            yield line

    async def open_exec(
        self, container_id: str, command: list[str], user: str = "work"
    ) -> AsyncIterator[ExecItem]:
        """:meth:`exec_stream`, but the engine's refusal (:class:`NotFound`,
        :class:`NotRunning`) is raised here, before any output."""
        cid = await self.kernels.resolve(container_id)
        with self.kernels.gone_if_unknown(cid):
            return await execs.open_exec(self.docker, cid, command, user)

    async def exec_stream(
        self, container_id: str, command: list[str], user: str = "work"
    ) -> AsyncIterator[ExecItem]:
        """Runs a command with the kernel's environment; yields output, then the exit code."""
        async for item in await self.open_exec(container_id, command, user):
            yield item

    async def exec_collect(
        self, container_id: str, command: list[str], user: str = "work"
    ) -> tuple[int, str]:
        """Exit code and output; ``(-1, why)`` when the command could not run at all."""
        try:
            cid = await self.kernels.resolve(container_id)
        except TroupeError as e:
            return -1, e.message
        return await execs.exec_collect(self.docker, cid, command, user)

    @contextlib.asynccontextmanager
    async def shell(self, container_id: str, user: str = "work") -> AsyncIterator[ShellIO]:
        """An interactive login shell with a TTY (bash if the image has it, else sh)."""
        cid = await self.kernels.resolve(container_id)
        with self.kernels.gone_if_unknown(cid):
            async with execs.open_shell(self.docker, cid, user) as sh:
                yield sh

    @contextlib.asynccontextmanager
    async def pipe(
        self, container_id: str, command: list[str], user: str = "work"
    ) -> AsyncIterator[Pipe]:
        """A command with raw stdin/stdout (no TTY): tunnels (see agent.netns) and copies."""
        cid = await self.kernels.resolve(container_id)
        with self.kernels.gone_if_unknown(cid):
            async with netns.open_pipe(self.docker, cid, command, user) as p:
                yield p
