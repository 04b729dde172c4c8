"""Wire format of the REST API (`/v1`), shared by the manager and the client SDK.

Validation lives here so that every entry point (API, CLI through the API, web UI) rejects bad
input with the same message naming the field and the rule.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from troupe.api import defaults
from troupe.api.exec import KERNEL_PATTERN
from troupe.api.lifecycle import AgentStatus, KernelStatus, SessionStatus
from troupe.api.metrics import UsageSummary
from troupe.api.policies import RestartRules, RestartView
from troupe.api.roles import ResolvedRole, RoleSpec, roles_error, total_kernels
from troupe.api.session_times import TimesCreate, TimesInfo
from troupe.api.values import (
    ENV_NAME,
    MAX_IMAGE_LENGTH,
    Size,
    check_environ,
    check_image,
    format_size,
    image_reference_error,
    parse_size,
)
from troupe.cluster.contract import MAIN_ROLE, SUB_ROLE, ClusterMode, DistEnvMode

__all__ = [
    "ENV_NAME",
    "MAX_IMAGE_LENGTH",
    "AgentStatus",
    "ClusterMode",
    "DistEnvMode",
    "KernelStatus",
    "ResolvedRole",
    "RoleSpec",
    "SessionStatus",
    "format_size",
    "image_reference_error",
    "parse_size",
]

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
#: NAME_PATTERN in words: the names' OpenAPI description and their error (api/rule_words.py).
NAME_RULE = "1-63 letters, digits, '_', '.' or '-', starting with a letter or digit"
#: KERNEL_PATTERN in words.
KERNEL_RULE = "main1 or a kernel of a role: its name (a lowercase word) and a number, e.g. sub1"
#: The shape of a session's id (a UUID). No session may be named so: a reference that is some
#: session's id always means that session (finding N3, docs/reliability.md).
SESSION_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)


Name = Annotated[str, Field(pattern=NAME_PATTERN, description=NAME_RULE)]


#: Who a command runs as in a kernel.
ExecUser = Literal["work", "root"]


class SessionType(StrEnum):
    """Interactive sessions run until destroyed; batch ones end when main1's command does."""

    INTERACTIVE = "interactive"
    BATCH = "batch"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Resources(Strict):
    """Per-kernel resources; a session of size N needs N times this.

    The minimums (:data:`~troupe.api.defaults.MIN_CPU`, :data:`~troupe.api.defaults.MIN_MEM`)
    are checked when a session is created (:class:`SessionCreate`), not here, so sessions
    stored under older rules still read back.
    """

    cpu: float = Field(
        defaults.CPU,
        gt=0,
        le=1024,
        description=f"cores, may be fractional; at least {defaults.MIN_CPU:g}",
    )
    mem: Size = Field(
        defaults.MEM,
        description=f"bytes, or a size such as 512m; at least {format_size(defaults.MIN_MEM)}",
    )
    gpu: int = Field(0, ge=0, le=64, description="whole devices")

    def below_minimum(self) -> str | None:
        """Why these resources are too small for a new session (None: they are not)."""
        if self.cpu < defaults.MIN_CPU:
            return f"resources.cpu: must be at least {defaults.MIN_CPU:g} cores"
        if self.mem < defaults.MIN_MEM:
            return f"resources.mem: must be at least {format_size(defaults.MIN_MEM)}"
        return None


class Mount(Strict):
    folder: Name
    readonly: bool = False

    @classmethod
    def parse(cls, spec: str) -> Mount:
        """``name`` or ``name:ro`` / ``name:rw`` as the CLI takes it."""
        name, _, mode = spec.partition(":")
        if mode not in ("", "ro", "rw"):
            raise ValueError(f"mount {spec!r}: mode must be ro or rw")
        return cls(folder=name, readonly=mode == "ro")


class SessionCreate(TimesCreate, RestartRules, Strict):
    name: Name
    image: str = Field(
        min_length=1,
        max_length=255,
        description="Docker image reference: name[:tag][@digest], e.g. troupe/base:0.1.0",
    )
    cluster_size: int = Field(
        1, ge=1, description="number of kernels; with roles, their total (may be left out)"
    )
    roles: list[RoleSpec] | None = Field(
        None,
        description="the session's roles, main first unless implicit (then main has the "
        "top-level image and resources); none: main:1 plus sub:cluster_size-1",
    )
    cluster_mode: ClusterMode = ClusterMode.SINGLE_NODE
    resources: Resources = Field(default_factory=lambda: Resources())
    mounts: list[Mount] = Field(default_factory=list)
    environ: dict[str, str] = Field(default_factory=dict)
    type: SessionType = SessionType.INTERACTIVE
    startup_command: str | None = Field(None, min_length=1, max_length=65536)
    dist_env: DistEnvMode = DistEnvMode.DEFAULT
    group: Name = defaults.GROUP
    priority: int = Field(0, ge=-100, le=100)
    max_pending_seconds: float | None = Field(None, gt=0)
    uid: int = Field(1000, ge=1, le=65534, description="uid of user work in every kernel")
    gid: int = Field(1000, ge=1, le=65534, description="gid of user work in every kernel")
    isolated_network: bool = False
    ssh_key: str | None = Field(
        None,
        max_length=16384,
        description="the user's OpenSSH public key (one line), added to main1's authorized_keys"
        " only, for `troupe session ssh` and the like",
    )

    @field_validator("name")
    @classmethod
    def _not_an_id(cls, name: str) -> str:
        if SESSION_ID.fullmatch(name):
            raise ValueError("name: must not have the shape of a session id (a UUID)")
        return name

    @field_validator("ssh_key")
    @classmethod
    def _public_key(cls, key: str | None) -> str | None:
        from troupe.cluster.keys import check_public_key

        return None if key is None else check_public_key(key)

    @field_validator("image")
    @classmethod
    def _image_reference(cls, image: str) -> str:
        return check_image(image)

    @field_validator("environ")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        return check_environ(env)

    @field_validator("mounts")
    @classmethod
    def _unique_mounts(cls, mounts: list[Mount]) -> list[Mount]:
        names = [m.folder for m in mounts]
        if len(names) != len(set(names)):
            raise ValueError("each folder may be mounted once")
        return mounts

    @model_validator(mode="after")
    def _resources_minimum(self) -> SessionCreate:
        why = self.resources.below_minimum()
        if why is not None:  # "resources.cpu: ..." names the field (see api/edge.py)
            raise ValueError(why)
        return self

    @model_validator(mode="after")
    def _batch_needs_command(self) -> SessionCreate:
        main = next((r for r in self.roles or [] if r.name == MAIN_ROLE), None)
        command = self.startup_command or (main.startup_command if main else None)
        if self.type is SessionType.BATCH and not command:
            raise ValueError("startup_command: required for batch sessions")
        if self.type is SessionType.INTERACTIVE and self.startup_command:
            raise ValueError("startup_command: only batch sessions run a startup command")
        return self

    @model_validator(mode="after")
    def _roles(self) -> SessionCreate:
        """Each role's rules, naming the field (``roles[1].name: ...``); then
        ``cluster_size`` is the roles' total (given, it must equal it)."""
        if self.roles is None:
            return self
        why = roles_error(self.roles, self.type is SessionType.BATCH)
        for i, role in enumerate(self.roles):
            low = None if why else self._role_resources(role).below_minimum()
            why = why or (f"roles[{i}].{low}" if low else None)
        if why is not None:
            raise ValueError(why)
        total = total_kernels(self.roles)
        if "cluster_size" in self.model_fields_set and self.cluster_size != total:
            raise ValueError(
                f"cluster_size: {self.cluster_size} is not the roles' total of {total}"
                " kernels (leave it out, or give the total)"
            )
        self.cluster_size = total
        return self

    def _role_resources(self, role: RoleSpec) -> Resources:
        given = role.resources.model_dump(exclude_none=True) if role.resources else {}
        return self.resources.model_copy(update=given)

    def resolved_roles(self) -> list[ResolvedRole]:
        """Every role, main first, with the session's values where it gives none: without
        roles ``main:1`` plus ``sub:cluster_size-1`` (today's sessions)."""
        r = self.resources
        top = ResolvedRole(MAIN_ROLE, 1, self.image, r.cpu, r.mem, r.gpu, {}, self.startup_command)
        if self.roles is None:
            sub = replace(top, name=SUB_ROLE, replicas=self.cluster_size - 1, startup_command=None)
            return [top, sub] if self.cluster_size > 1 else [top]
        out = [] if any(role.name == MAIN_ROLE for role in self.roles) else [top]
        for role in self.roles:
            main = role.name == MAIN_ROLE
            res = self._role_resources(role)
            resolved = ResolvedRole(
                role.name,
                role.replicas,
                role.image or self.image,
                res.cpu,
                res.mem,
                res.gpu,
                dict(role.environ or {}),
                role.startup_command or (self.startup_command if main else None),
            )
            if main:
                out.insert(0, resolved)
            else:
                out.append(resolved)
        return out


class KernelInfo(BaseModel):
    id: str
    hostname: str
    role: str
    idx: int
    rank: int
    #: this kernel's image and resources (its role's; absent in data of older versions)
    image: str | None = None
    resources: Resources | None = None
    agent: str | None = None
    container_id: str | None = None
    ip: str | None = None
    status: KernelStatus
    exit_code: int | None = None
    oom_killed: bool = False
    #: status (or phase) -> when it was reached, ISO 8601 UTC
    timeline: dict[str, str] = Field(default_factory=dict)
    #: UUIDs of the whole GPUs this kernel holds on its agent
    gpus: list[str] = Field(default_factory=list)
    phases: dict[str, float] = Field(
        default_factory=dict,
        description="start-up phase -> seconds after the session was created: created, "
        "started (the engine's), entrypoint (set up), ready (every peer reachable)",
    )


class SessionShown(TimesInfo):
    id: str
    name: str
    owner: str
    status: SessionStatus
    status_info: dict[str, Any] = Field(default_factory=dict)
    type: SessionType
    image: str
    cluster_size: int
    cluster_mode: ClusterMode
    resources: Resources
    mounts: list[Mount]
    dist_env: DistEnvMode
    group: str
    priority: int
    uid: int
    gid: int
    isolated_network: bool
    network: str | None = None
    subnet: str | None = None
    exit_code: int | None = None
    created_at: datetime
    started_at: datetime | None = None
    terminated_at: datetime | None = None
    #: status (or phase) -> when it was reached, ISO 8601 UTC
    timeline: dict[str, str] = Field(default_factory=dict)
    phases: dict[str, float] = Field(
        default_factory=dict,
        description="start-up phase -> seconds after creation: scheduled, network, then "
        "created, started, entrypoint (the slowest kernel's) and ready (RUNNING)",
    )
    kernels: list[KernelInfo] = Field(default_factory=list)
    #: a finished session's use (GET /v1/sessions/{ref}; null in lists and while it runs)
    usage: UsageSummary | None = None


class SessionInfo(RestartView, SessionShown):
    """A session as the API shows it (its restart fields last)."""


class SessionSSH(BaseModel):
    """What an OpenSSH client needs to log into a session's main1 through the manager."""

    id: str
    name: str
    user: str
    #: main1's sshd host key, ``TYPE BASE64`` (to pin in a known_hosts file)
    host_key: str
    #: the user's public key the session was created with (``ssh_key``), or ""
    user_key: str = ""


class ExecRequest(Strict):
    command: list[str] = Field(min_length=1, description="argv; no argument may contain NUL")
    kernel: str = Field("main1", pattern=KERNEL_PATTERN)
    user: ExecUser = "work"

    @field_validator("command")
    @classmethod
    def _no_nul(cls, command: list[str]) -> list[str]:
        for i, arg in enumerate(command):
            if "\0" in arg:
                raise ValueError(f"argument {i} contains a NUL character")
        return command


class FolderCreate(Strict):
    name: Name


class FolderInfo(BaseModel):
    id: str
    name: str
    owner: str
    created_at: datetime


class UserCreate(Strict):
    name: Name
    admin: bool = False


class UserInfo(BaseModel):
    id: str
    name: str
    admin: bool
    created_at: datetime
    api_key: str | None = Field(None, description="shown once, at creation")


#: A GPU's id as the engine's device request takes it (e.g. ``GPU-78e7bc87-...``).
GpuId = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")]


class GpuInfo(BaseModel):
    """One whole GPU an agent offers, as ``nvidia-smi`` reports it."""

    index: int = Field(ge=0, le=1023)
    uuid: GpuId
    model: str = Field("", max_length=255)
    #: bytes (0: unknown)
    memory: int = Field(0, ge=0, lt=2**63)


class AgentInfo(BaseModel):
    id: str
    name: str
    group: str
    status: AgentStatus
    cpu: float
    mem: int
    gpu: int
    cpu_free: float
    mem_free: int
    gpu_free: int
    kernels: int
    swarm_manager: bool = False
    #: seconds since the agent's last heartbeat; None for the manager's own agent (in the
    #: server's process: it sends none)
    heartbeat_age: float | None = None
    #: the GPUs offered (``gpu`` is their count) and, when there are none, why
    gpus: list[GpuInfo] = Field(default_factory=list)
    gpu_reason: str = ""


class ImageInfo(BaseModel):
    name: str
    id: str
    size: int
    created: str
    has_sshd: bool | None = None
    #: the agents that hold it (filled in by the manager's list)
    agents: list[str] = Field(default_factory=list)


#: An app's state in main1 (docs/apps.md, "States").
AppState = Literal["stopped", "starting", "running", "failed"]


class AppInfo(BaseModel):
    """An app of a session's main1: one its image declares (``name``) or any port (``name``
    is then the port's number)."""

    name: str
    port: int = Field(ge=1, le=65535)
    state: AppState
    #: the app's origin (a list), or a one-time link into it (an open); None: the server
    #: serves no apps
    url: str | None = None
    #: the last lines of the app's log (``/home/work/.troupe/apps/<name>.log``) when it is
    #: not running
    log_tail: list[str] = Field(default_factory=list)
