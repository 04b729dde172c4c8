"""Database schema (SQLAlchemy 2). Alembic migrations in ``migrations/`` must match it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator


def utcnow() -> datetime:
    return datetime.now(UTC)


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
    name: Mapped[str] = mapped_column(String(64), unique=True)
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Agent(Base):
    __tablename__ = "agents"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    group: Mapped[str] = mapped_column(String(64), default="default")
    address: Mapped[str | None] = mapped_column(String(255), nullable=True)
    status: Mapped[str] = mapped_column(String(16), default="ALIVE")
    cpu: Mapped[float] = mapped_column(Float)
    mem: Mapped[int] = mapped_column(BigInteger)
    gpu: Mapped[int] = mapped_column(Integer, default=0)
    swarm_manager: Mapped[bool] = mapped_column(Boolean, default=False)
    data_marker: Mapped[str] = mapped_column(String(64), default="")
    underlay_mtu: Mapped[int] = mapped_column(Integer, default=0)
    last_heartbeat: Mapped[datetime | None] = mapped_column()


class Folder(Base):
    __tablename__ = "folders"
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str] = mapped_column(String(64))
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Session(Base):
    __tablename__ = "sessions"
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), index=True)
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    status_info: Mapped[dict[str, Any]] = mapped_column(default=dict)
    type: Mapped[str] = mapped_column(String(16))
    image: Mapped[str] = mapped_column(String(255))
    cluster_size: Mapped[int] = mapped_column(Integer)
    cluster_mode: Mapped[str] = mapped_column(String(16))
    cpu: Mapped[float] = mapped_column(Float)
    mem: Mapped[int] = mapped_column(BigInteger)
    gpu: Mapped[int] = mapped_column(Integer, default=0)
    mounts: Mapped[list[Any]] = mapped_column(default=list)
    environ: Mapped[dict[str, Any]] = mapped_column(default=dict)
    startup_command: Mapped[str | None] = mapped_column(Text, nullable=True)
    dist_env: Mapped[str] = mapped_column(String(16), default="default")
    group: Mapped[str] = mapped_column(String(64), default="default")
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
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column()
    terminated_at: Mapped[datetime | None] = mapped_column()
    kernels: Mapped[list[Kernel]] = relationship(
        back_populates="session",
        order_by="Kernel.rank",
        lazy="selectin",
        cascade="all, delete-orphan",
    )
    owner: Mapped[User] = relationship(lazy="selectin")


class Kernel(Base):
    __tablename__ = "kernels"
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id"), index=True)
    hostname: Mapped[str] = mapped_column(String(32))
    role: Mapped[str] = mapped_column(String(8))
    idx: Mapped[int] = mapped_column(Integer)
    rank: Mapped[int] = mapped_column(Integer)
    agent_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    container_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    ip: Mapped[str | None] = mapped_column(String(64), nullable=True)
    status: Mapped[str] = mapped_column(String(16))
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    oom_killed: Mapped[bool] = mapped_column(Boolean, default=False)
    host_public_key: Mapped[str] = mapped_column(Text)
    #: The kernel's sshd host key; stays in the database so a restarted kernel keeps it.
    host_private_key: Mapped[str] = mapped_column(Text)
    session: Mapped[Session] = relationship(back_populates="kernels")
