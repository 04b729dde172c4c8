"""What the manager asks of an agent, as plain data.

The same models serve the in-process local agent and (later) agents on other hosts over HTTP,
so the manager never knows which one it talks to.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Annotated, Literal, Protocol

from pydantic import BaseModel, Field, field_validator

from troupe.api import defaults
from troupe.api.exec import ExecItem
from troupe.api.metrics import AgentMetrics
from troupe.api.models import GpuId, GpuInfo, ImageInfo
from troupe.api.pipe import Pipe
from troupe.api.registries import PullProgress, PullRequest
from troupe.api.shell import Shell

#: Path prefix of an agent's HTTP API (served by troupe.agent, called by the manager).
AGENT_PREFIX = "/agent/v1"

LABEL_SESSION = "troupe.session"
LABEL_KERNEL = "troupe.kernel"
LABEL_OWNER = "troupe.owner"
LABEL_HOSTNAME = "troupe.hostname"
#: The GPUs (UUIDs, comma-separated) a kernel's container was given: read back after restarts.
LABEL_GPUS = "troupe.gpus"
#: The agent that made a kernel's container (its instance, ``troupe.agent.kernel.instance_of``):
#: agents that share an engine (two managers', a test's next to a developer's) each watch only
#: their own kernels' deaths and reports. A container without it (made before) is any agent's.
LABEL_AGENT = "troupe.agent"


class FileSpec(BaseModel):
    """A file (or, with ``directory``, a directory; with ``fifo``, a named pipe) put into the
    container before it starts, with its owner and mode (never on the host's disk)."""

    path: str
    content: str = ""
    mode: int = 0o644
    uid: int = 0
    gid: int = 0
    directory: bool = False
    fifo: bool = False


class MountSpec(BaseModel):
    """A data folder, by id: each agent finds it under its own (shared) data root."""

    folder_id: str
    target: str
    readonly: bool = False


class NetworkSpec(BaseModel):
    name: str
    session_id: str
    owner: str
    subnet: str
    internal: bool = False
    driver: Literal["bridge", "overlay"] = "bridge"
    #: Overlay MTU (underlay MTU minus VXLAN overhead); 0 keeps Docker's default.
    mtu: int = 0


class KernelSpec(BaseModel):
    session_id: str
    kernel_id: str
    owner: str
    hostname: str
    image: str
    network: str
    env: dict[str, str]
    cpu: float
    mem: int
    command: list[str] = Field(default_factory=list)
    files: list[FileSpec] = Field(default_factory=list)
    mounts: list[MountSpec] = Field(default_factory=list)
    #: UUIDs of the whole GPUs this kernel gets (the engine's ``nvidia`` device request)
    gpus: list[GpuId] = Field(default_factory=list)
    #: the address to give it on its network (a restart in place keeps the one it had)
    ip: str | None = None

    @property
    def container_name(self) -> str:
        return f"troupe-{self.session_id[:12]}-{self.hostname}"


class KernelStarted(BaseModel):
    kernel_id: str
    container_id: str
    ip: str | None
    #: when the engine created and started the container (ISO 8601 UTC; None: unknown)
    created_at: str | None = None
    started_at: str | None = None


class KernelRestarted(KernelStarted):
    """A kernel started again for a restart of its session (``restart_kernels``)."""

    #: the failed attempt's log (its last ``saved_log_bytes``), read before the new start
    log: str = ""
    #: made anew (its container was gone or killed for memory): a new container id
    recreated: bool = False


#: A kernel's start-up phases that only its agent sees: phase -> ISO 8601 UTC time.
#: ``entrypoint``: the entrypoint finished setting up; ``ready``: every peer reachable.
ReadyTimes = dict[str, str]


class KernelExit(BaseModel):
    """A kernel's container stopped on its own (not removed by troupe)."""

    session_id: str = Field(max_length=64)
    kernel_id: str = Field(max_length=64)
    #: as the engine reports it (a 32-bit status; -1 when unknown)
    exit_code: int = Field(ge=-(2**31), le=2**31 - 1)
    oom_killed: bool = False
    #: Docker's own error for a container that could not run its command at all.
    error: str = Field("", max_length=16384)
    last_logs: list[Annotated[str, Field(max_length=16384)]] = Field(
        default_factory=list, max_length=200
    )


class KernelState(BaseModel):
    """A troupe container an agent holds, as its engine reports it."""

    session_id: str
    kernel_id: str
    hostname: str
    container_id: str
    #: the engine's state: running, exited, created, ...; or ``held`` (a failed kernel's
    #: container started again, waiting for its restart's word: not a live kernel)
    state: str
    #: UUIDs of the GPUs its container was given
    gpus: list[str] = Field(default_factory=list)


class AgentCapacity(BaseModel):
    name: str
    cpu: float
    mem: int
    gpu: int = 0
    group: str = defaults.GROUP
    swarm_manager: bool = False
    #: Identity of the agent's data root: agents sharing storage report the same marker.
    data_marker: str = ""
    #: MTU of the interface the engine's swarm traffic uses (0: unknown).
    underlay_mtu: int = 0
    #: The whole GPUs offered to kernels (the manager counts these, not ``gpu``).
    gpus: list[GpuInfo] = Field(default_factory=list, max_length=1024)
    #: Why no GPUs are offered (no nvidia-smi, an engine that cannot hand them over, ...).
    gpu_reason: str = Field("", max_length=1000)

    @field_validator("gpus")
    @classmethod
    def _distinct(cls, gpus: list[GpuInfo]) -> list[GpuInfo]:
        if len({g.uuid for g in gpus}) != len(gpus) or len({g.index for g in gpus}) != len(gpus):
            raise ValueError("GPUs must have distinct indices and UUIDs")
        return gpus


ExitHandler = Callable[[KernelExit], Awaitable[None]]


class AgentBackend(Protocol):
    """What the manager asks of an agent: the in-process Docker one, one on another host over
    HTTP, or a fake in tests. Failures raise :class:`troupe.api.errors.AgentFailed` (with the
    kernel named when one is concerned) or another domain error."""

    name: str

    async def start(self, on_exit: ExitHandler | None = None) -> None: ...
    async def close(self) -> None: ...
    async def capacity(self) -> AgentCapacity: ...
    async def images(self) -> list[ImageInfo]: ...
    async def has_image(self, name: str) -> bool: ...
    async def image_labels(self, name: str) -> dict[str, str]: ...
    def pull_image(self, req: PullRequest) -> AsyncIterator[PullProgress]:
        """Pulls an image, yielding its progress; the last one is ``done``."""
        ...

    async def used_subnets(self) -> list[str]: ...
    async def create_network(self, spec: NetworkSpec) -> None: ...
    async def remove_session_networks(self, session_id: str) -> None: ...
    async def create_kernels(self, specs: Sequence[KernelSpec]) -> list[KernelStarted]: ...
    async def wait_ready(
        self, containers: dict[str, str], hosts: list[str], timeout: float
    ) -> dict[str, ReadyTimes]: ...
    async def restart_kernels(self, specs: Sequence[KernelSpec]) -> list[KernelRestarted]: ...
    async def signal_go(self, container_id: str) -> None: ...
    async def remove_kernels(self, session_id: str) -> dict[str, str]: ...
    async def list_kernels(self) -> list[KernelState]: ...
    async def list_session_ids_with_networks(self) -> set[str]: ...
    async def metrics(self, since: float | None = None) -> AgentMetrics:
        """Its kernels' samples taken after ``since`` (epoch seconds) that it still keeps."""
        ...

    def logs(self, container_id: str, follow: bool = False) -> AsyncIterator[str]: ...
    def exec_stream(
        self, container_id: str, command: list[str], user: str = "work"
    ) -> AsyncIterator[ExecItem]: ...
    def shell(
        self, container_id: str, user: str = "work"
    ) -> AbstractAsyncContextManager[Shell]: ...
    def pipe(
        self, container_id: str, command: list[str], user: str = "work"
    ) -> AbstractAsyncContextManager[Pipe]: ...
