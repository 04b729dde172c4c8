"""What the manager asks of an agent, as plain data.

The same models serve the in-process local agent and (later) agents on other hosts over HTTP,
so the manager never knows which one it talks to.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

LABEL_SESSION = "troupe.session"
LABEL_KERNEL = "troupe.kernel"
LABEL_OWNER = "troupe.owner"
LABEL_HOSTNAME = "troupe.hostname"


class FileSpec(BaseModel):
    """A file put into the container before it starts (never on the host's disk)."""

    path: str
    content: str
    mode: int = 0o644
    uid: int = 0
    gid: int = 0


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

    @property
    def container_name(self) -> str:
        return f"troupe-{self.session_id[:12]}-{self.hostname}"


class KernelStarted(BaseModel):
    kernel_id: str
    container_id: str
    ip: str | None


class KernelExit(BaseModel):
    """A kernel's container stopped on its own (not removed by troupe)."""

    session_id: str
    kernel_id: str
    exit_code: int
    oom_killed: bool = False
    #: Docker's own error for a container that could not run its command at all.
    error: str = ""
    last_logs: list[str] = Field(default_factory=list)


class ExecResult(BaseModel):
    exit_code: int
    output: str


class AgentCapacity(BaseModel):
    name: str
    cpu: float
    mem: int
    gpu: int = 0
    group: str = "default"
    swarm_manager: bool = False
    #: Identity of the agent's data root: agents sharing storage report the same marker.
    data_marker: str = ""
    #: MTU of the interface the engine's swarm traffic uses (0: unknown).
    underlay_mtu: int = 0
