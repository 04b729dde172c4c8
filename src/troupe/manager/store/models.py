"""Database schema (SQLAlchemy 2). Alembic migrations in ``migrations/`` must match it."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

from troupe.api import defaults
from troupe.api.lifecycle import (
    SESSION_ACTIVE,
    SESSION_ALLOCATED,
    AgentStatus,
    KernelStatus,
    SessionStatus,
    utcnow,
)
from troupe.api.models import SessionType
from troupe.cluster.contract import ClusterMode, DistEnvMode

__all__ = [
    "Agent",
    "AuditEvent",
    "Base",
    "Folder",
    "Kernel",
    "Session",
    "SessionEvent",
    "SessionUsage",
    "User",
    "WebSession",
    "utcnow",
]


#: The partial index's predicate (migration 0003 writes the same text).
ACTIVE_SQL = "status IN ({})".format(", ".join(f"'{s.value}'" for s in sorted(SESSION_ACTIVE)))
ALLOCATED_SQL = "subnet IS NOT NULL AND status IN ({})".format(
    ", ".join(f"'{s.value}'" for s in sorted(SESSION_ALLOCATED))
)


def enum_column(enum: type[StrEnum]) -> Enum:
    """The enum stored as its plain string (VARCHAR(16)): rows written before stay valid."""
    return Enum(
        enum,
        native_enum=False,
        create_constraint=False,
        length=16,
        values_callable=lambda e: [m.value for m in e],
        validate_strings=True,
    )


# Sessions, kernels and agents carry a ``version`` column (optimistic locking): an UPDATE of a
# row that changed since it was read fails with StaleDataError instead of silently overwriting
# (e.g. a destroy racing the scheduler); store/unit.py retries the step on fresh rows.


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite forgets the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(UTC)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: JSON,
        list[Any]: JSON,
        datetime: UTCDateTime,
    }


class User(Base):
    __tablename__ = "users"
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)  # uq: 0001
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    #: per-user limits set by an admin, overriding the server's defaults (see quotas.py):
    #: sessions, kernels, cpu, mem, gpu, streams, max_priority, groups
    limits: Mapped[dict[str, Any]] = mapped_column(default=dict)
    #: set when an admin deleted the user (kept for the sessions and folders it owned)
    deleted_at: Mapped[datetime | None] = mapped_column()


class WebSession(Base):
    """A sign-in of the web UI (see manager/websessions.py); its cookie's token is not stored."""

    __tablename__ = "web_sessions"
    #: SHA-256 of the cookie's random token
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    #: the user's ``key_hash`` at sign-in: once the key is revoked or rotated it differs
    key_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(index=True)


class Agent(Base):
    __tablename__ = "agents"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    group: Mapped[str] = mapped_column(String(64), default=defaults.GROUP)
    address: Mapped[str | None] = mapped_column(String(255), nullable=True)
    status: Mapped[AgentStatus] = mapped_column(enum_column(AgentStatus))
    cpu: Mapped[float] = mapped_column(Float)
    mem: Mapped[int] = mapped_column(BigInteger)
    gpu: Mapped[int] = mapped_column(Integer, default=0)
    #: the GPUs offered, as reported: [{index, uuid, model, memory}] (``gpu`` is their count)
    gpus: Mapped[list[Any]] = mapped_column(default=list)
    #: why the agent offers no GPUs ("" when it offers some)
    gpu_reason: Mapped[str] = mapped_column(Text, default="")
    swarm_manager: Mapped[bool] = mapped_column(Boolean, default=False)
    data_marker: Mapped[str] = mapped_column(String(64), default="")
    underlay_mtu: Mapped[int] = mapped_column(Integer, default=0)
    last_heartbeat: Mapped[datetime | None] = mapped_column()
    #: SHA-256 of the agent's own credential, issued at its first registration
    credential_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    version: Mapped[int] = mapped_column(Integer, server_default="0")
    __mapper_args__ = {"version_id_col": version}  # noqa: RUF012


class Folder(Base):
    __tablename__ = "folders"
    __table_args__ = (UniqueConstraint("owner_id", "name", name="uq_folders_owner_name"),)
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str] = mapped_column(String(64))
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Session(Base):
    __tablename__ = "sessions"
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), index=True)
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    status: Mapped[SessionStatus] = mapped_column(enum_column(SessionStatus), index=True)
    status_info: Mapped[dict[str, Any]] = mapped_column(default=dict)
    #: status (or phase) -> ISO time it was reached; written by troupe.api.lifecycle
    timeline: Mapped[dict[str, Any]] = mapped_column(default=dict)
    #: the final status a TERMINATING session will reach (survives a manager restart)
    ending: Mapped[SessionStatus | None] = mapped_column(enum_column(SessionStatus), nullable=True)
    type: Mapped[SessionType] = mapped_column(enum_column(SessionType))
    image: Mapped[str] = mapped_column(String(255))
    cluster_size: Mapped[int] = mapped_column(Integer)
    cluster_mode: Mapped[ClusterMode] = mapped_column(enum_column(ClusterMode))
    cpu: Mapped[float] = mapped_column(Float)
    mem: Mapped[int] = mapped_column(BigInteger)
    gpu: Mapped[int] = mapped_column(Integer, default=0)
    mounts: Mapped[list[Any]] = mapped_column(default=list)
    environ: Mapped[dict[str, Any]] = mapped_column(default=dict)
    startup_command: Mapped[str | None] = mapped_column(Text, nullable=True)
    dist_env: Mapped[DistEnvMode] = mapped_column(enum_column(DistEnvMode))
    group: Mapped[str] = mapped_column(String(64), default=defaults.GROUP)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    max_pending_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    uid: Mapped[int] = mapped_column(Integer, default=1000)
    gid: Mapped[int] = mapped_column(Integer, default=1000)
    isolated_network: Mapped[bool] = mapped_column(Boolean, default=False)
    network: Mapped[str | None] = mapped_column(String(128), nullable=True)
    subnet: Mapped[str | None] = mapped_column(String(32), nullable=True)
    #: The session's SSH private key. Never returned by the API, never logged.
    ssh_private_key: Mapped[str] = mapped_column(Text)
    ssh_public_key: Mapped[str] = mapped_column(Text)
    #: The user's own public key (``--ssh-key``), added to main1's authorized_keys only.
    user_ssh_key: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: The create request as validated (``SessionCreate``'s JSON), what ``GET
    #: /v1/sessions/{ref}/spec`` gives back; None for sessions stored before it was kept.
    #: Deferred: lists and look-ups never need it.
    request: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True, deferred=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    #: restart rules (docs/policies.md): how often the whole session may restart after a
    #: kernel's failure, the exit codes that end it at once, and when a batch succeeds
    max_restarts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    no_restart_exit_codes: Mapped[list[Any]] = mapped_column(default=list, server_default="[]")
    success_policy: Mapped[str] = mapped_column(String(8), default="main", server_default="main")
    #: how often it restarted so far (the attempt running now; TROUPE_RESTART_COUNT)
    restarts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: one entry per restart: attempt, kernel, reason, exit_code, oom_killed, last_logs, at
    restart_history: Mapped[list[Any]] = mapped_column(default=list, server_default="[]")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column()
    terminated_at: Mapped[datetime | None] = mapped_column()
    #: its clocks (docs/policies.md): seconds from RUNNING to the SIGTERM, from the SIGTERM to
    #: the end, and idle seconds before it is destroyed; since when it is idle (the reaper's)
    time_limit: Mapped[int | None] = mapped_column(Integer, nullable=True)
    stop_grace: Mapped[int] = mapped_column(Integer, default=10, server_default="10")
    idle_timeout: Mapped[int | None] = mapped_column(Integer, nullable=True)
    idle_since: Mapped[datetime | None] = mapped_column()
    version: Mapped[int] = mapped_column(Integer, server_default="0")
    kernels: Mapped[list[Kernel]] = relationship(
        back_populates="session",
        order_by="Kernel.rank",
        lazy="selectin",
        cascade="all, delete-orphan",
    )
    owner: Mapped[User] = relationship(lazy="selectin")
    __mapper_args__ = {"version_id_col": version}  # noqa: RUF012
    __table_args__ = (
        # A name is unique per owner among active sessions; the database enforces it, so two
        # concurrent creates cannot both win.
        Index(
            "uq_sessions_active_name",
            "owner_id",
            "name",
            unique=True,
            sqlite_where=text(ACTIVE_SQL),
            postgresql_where=text(ACTIVE_SQL),
        ),
        # Two sessions prepared at once cannot claim the same subnet, on either database.
        Index(
            "uq_sessions_allocated_subnet",
            "subnet",
            unique=True,
            sqlite_where=text(ALLOCATED_SQL),
            postgresql_where=text(ALLOCATED_SQL),
        ),
        # A user's look-up by name (GET /v1/sessions/{name}, any status): one index search,
        # not a scan of all the user's sessions through the owner's index.
        Index("ix_sessions_owner_name", "owner_id", "name"),
        # Pages of GET /v1/sessions (newest first; id breaks ties): every user's, one user's.
        Index("ix_sessions_created", "created_at", "id"),
        Index("ix_sessions_owner_created", "owner_id", "created_at", "id"),
        Index(
            "ix_sessions_active_owner_created",
            "owner_id",
            "created_at",
            "id",
            sqlite_where=text(ACTIVE_SQL),
            postgresql_where=text(ACTIVE_SQL),
        ),
    )


class Kernel(Base):
    __tablename__ = "kernels"
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id"), index=True)
    hostname: Mapped[str] = mapped_column(String(32))
    role: Mapped[str] = mapped_column(String(16))
    idx: Mapped[int] = mapped_column(Integer)
    rank: Mapped[int] = mapped_column(Integer)
    #: this kernel's image and resources: its role's (docs/design.md, 'Roles'); the session's
    #: own columns keep the top-level values
    image: Mapped[str] = mapped_column(String(255))
    cpu: Mapped[float] = mapped_column(Float)
    mem: Mapped[int] = mapped_column(BigInteger)
    gpu: Mapped[int] = mapped_column(Integer, default=0)
    #: the role's own variables, over the session's ``environ``
    environ: Mapped[dict[str, Any]] = mapped_column(default=dict)
    #: what this kernel runs in a batch session (None: nothing, it waits)
    startup_command: Mapped[str | None] = mapped_column(Text, nullable=True)
    agent_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    container_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    ip: Mapped[str | None] = mapped_column(String(64), nullable=True)
    status: Mapped[KernelStatus] = mapped_column(enum_column(KernelStatus))
    timeline: Mapped[dict[str, Any]] = mapped_column(default=dict)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    oom_killed: Mapped[bool] = mapped_column(Boolean, default=False)
    #: UUIDs of the GPUs given to this kernel on its agent (chosen when the session is placed)
    gpus: Mapped[list[Any]] = mapped_column(default=list)
    host_public_key: Mapped[str] = mapped_column(Text)
    #: The kernel's sshd host key; stays in the database so a restarted kernel keeps it.
    host_private_key: Mapped[str] = mapped_column(Text)
    version: Mapped[int] = mapped_column(Integer, server_default="0")
    session: Mapped[Session] = relationship(back_populates="kernels")
    __mapper_args__ = {"version_id_col": version}  # noqa: RUF012


class SessionUsage(Base):
    """What a finished session's kernels used (docs/metrics.md), written when it finished;
    deleted with the session (retention)."""

    __tablename__ = "session_usage"
    session_id: Mapped[str] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True
    )
    #: a :class:`troupe.api.metrics.UsageSummary`
    summary: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class SessionEvent(Base):
    """One entry of a session's event list (manager/session_events.py); deleted with the
    session (retention), at most ``session_events.CAP`` per session."""

    __tablename__ = "session_events"
    #: ascending: readers follow a list with ``after`` the last id they saw
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(default=utcnow)
    #: ``status``, ``kernel-exit``, ``oom``, ``restart``, ``app-open``, ``idle-warning``, ...
    kind: Mapped[str] = mapped_column(String(32))
    #: the status reached (status events), else None
    status: Mapped[str | None] = mapped_column(String(16), nullable=True)
    #: the kernel concerned (hostname), else None
    kernel: Mapped[str | None] = mapped_column(String(32), nullable=True)
    message: Mapped[str] = mapped_column(Text, default="")
    actor: Mapped[str] = mapped_column(String(96), default="system")
    __table_args__ = (Index("ix_session_events_session_id", "session_id", "id"),)


class AuditEvent(Base):
    """An admin's (or a user's own) change of users and keys (manager/audit.py)."""

    __tablename__ = "audit_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    #: the name of the user who acted (as it was then)
    actor: Mapped[str] = mapped_column(String(64))
    #: ``user-create``, ``user-delete``, ``key-revoke``, ``key-rotate``, ``limits-set``
    action: Mapped[str] = mapped_column(String(32))
    #: the name of the user acted on (as it was then)
    target: Mapped[str] = mapped_column(String(64))
    #: what changed, e.g. the limits set
    details: Mapped[dict[str, Any]] = mapped_column(default=dict)
