"""Wire models of ``/v1/users`` beyond a user's identity (:class:`~troupe.api.models.UserInfo`):
their limits, what their sessions hold, and a user as an admin sees them. The manager's routes
answer with these and the SDK returns them.

The keys of :class:`LimitsUpdate`, :class:`Limits`, the manager's ``quotas.Limits`` and the
CLI's ``LIMIT_KEYS`` are one set (``tests/unit/test_cli_fast.py`` holds them together).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from troupe.api.durations import MAX_SECONDS, Duration
from troupe.api.models import Name, Strict, UserInfo, parse_size


class LimitsUpdate(Strict):
    """A user's own limits, as an admin sets them: a key given null goes back to the
    server's default, a key left out keeps its value."""

    sessions: int | None = Field(None, ge=0, description="active sessions")
    kernels: int | None = Field(None, ge=0, description="kernels of active sessions")
    cpu: float | None = Field(None, ge=0, allow_inf_nan=False, description="cores in use")
    mem: int | None = Field(None, ge=0, description="bytes in use, or a size such as 64g")
    gpu: int | None = Field(None, ge=0, description="GPUs in use")
    streams: int | None = Field(None, ge=1, description="concurrent waits, follows, execs")
    max_priority: int | None = Field(None, ge=-100, le=100, description="highest priority")
    groups: list[Name] | None = Field(None, description="resource groups the user may use")
    max_time_limit: Duration | None = Field(
        None, ge=1, le=MAX_SECONDS, description="longest time limit of a session (s, or 2h)"
    )
    max_idle_timeout: Duration | None = Field(
        None, ge=1, le=MAX_SECONDS, description="longest idle timeout of a session (s, or 2h)"
    )

    @field_validator("mem", mode="before")
    @classmethod
    def _size(cls, v: object) -> object:
        return None if v is None else parse_size(v)


class Limits(BaseModel):
    """A user's effective limits: their own over the server's defaults (null: none). The one
    shape of limits: the manager's quotas compute with it too (:mod:`troupe.manager.quotas`)."""

    model_config = ConfigDict(frozen=True)

    sessions: int | None = None
    kernels: int | None = None
    cpu: float | None = None
    mem: int | None = None
    gpu: int | None = None
    streams: int | None = None
    max_priority: int | None = None
    groups: list[str] | None = None
    max_time_limit: int | None = None
    max_idle_timeout: int | None = None


class Usage(BaseModel):
    """What a user's active sessions hold. The one shape of usage: the manager's quotas add
    with it too (:mod:`troupe.manager.quotas`)."""

    model_config = ConfigDict(frozen=True)

    sessions: int = 0
    kernels: int = 0
    cpu: float = 0.0
    mem: int = 0
    gpu: int = 0

    def plus(self, size: int, cpu: float, mem: int, gpu: int) -> Usage:
        """With one more session of ``size`` kernels of this size each."""
        return Usage(
            sessions=self.sessions + 1,
            kernels=self.kernels + size,
            cpu=self.cpu + size * cpu,
            mem=self.mem + size * mem,
            gpu=self.gpu + size * gpu,
        )

    @classmethod
    def of(cls, sessions: Iterable[tuple[int, float, int, int]]) -> Usage:
        """From (cluster_size, cpu, mem, gpu) of each active session."""
        used = cls()
        for size, cpu, mem, gpu in sessions:
            used = used.plus(size, cpu, mem, gpu)
        return used

    @classmethod
    def of_kernels(cls, kernels: Iterable[tuple[str, float, int, int]]) -> Usage:
        """From (session id, cpu, mem, gpu) of each kernel of the active sessions: every
        role's kernels count with their own resources."""
        sessions: set[str] = set()
        n, cpu, mem, gpu = 0, 0.0, 0, 0
        for session_id, k_cpu, k_mem, k_gpu in kernels:
            sessions.add(session_id)
            n, cpu, mem, gpu = n + 1, cpu + k_cpu, mem + k_mem, gpu + k_gpu
        return cls(sessions=len(sessions), kernels=n, cpu=cpu, mem=mem, gpu=gpu)


class UserListed(UserInfo):
    """A user, and whether their key was revoked."""

    revoked: bool = Field(False, description="the key was revoked (rotate gives a new one)")


class UserDetail(UserListed):
    """A user with their effective limits and what their active sessions hold."""

    limits: Limits = Field(description="effective limits: the user's own over the defaults")
    overrides: dict[str, Any] = Field(description="the limits an admin set for this user")
    usage: Usage
