"""Per-user limits: the server's defaults (``ServerConfig.quota_*``), overridden per user by an
admin (``users.limits``); admins have none. Pure arithmetic, no I/O: admission feeds it the
user's active sessions and the request, the users routes show what it computes.

Keys: ``sessions`` (active sessions), ``kernels`` (their kernels), ``cpu``, ``mem``, ``gpu``
(sums over the active sessions' kernels, each with its role's size), ``streams`` (concurrent long
requests), ``max_priority`` (a higher priority is refused), ``groups`` (the resource groups
the user may use), ``max_time_limit`` and ``max_idle_timeout`` (the longest clocks a session
may have: :mod:`troupe.manager.life.times`). A limit of ``None`` is no limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from troupe.api import defaults
from troupe.api.counted import counted
from troupe.api.models import format_size
from troupe.api.users import Limits, Usage
from troupe.manager.config import ServerConfig
from troupe.manager.store.models import User

KEYS = tuple(Limits.model_fields)
#: Sums of fractional cores are compared with this slack (0.1 + 0.2 fits a limit of 0.3).
EPSILON = 1e-9


#: No limits at all.
UNLIMITED = Limits()


def server_defaults(config: ServerConfig) -> Limits:
    """What a user gets when an admin set nothing for them."""
    return Limits(
        sessions=config.quota_sessions,
        kernels=config.quota_kernels,
        cpu=config.quota_cpu,
        mem=config.quota_mem,
        gpu=config.quota_gpu,
        streams=config.quota_streams,
        max_priority=0,
        groups=[defaults.GROUP],
        max_time_limit=config.quota_time_limit,
        max_idle_timeout=config.quota_idle_timeout,
    )


def effective(base: Limits, overrides: Mapping[str, Any] | None, admin: bool) -> Limits:
    """``base`` with the user's own values (keys absent or null keep the default). Admins
    have no limits but ``streams`` (troupe.manager.streams counts theirs too)."""
    given = {k: v for k, v in (overrides or {}).items() if k in KEYS and v is not None}
    if "groups" in given:
        given["groups"] = list(given["groups"])
    mine = base.model_copy(update=given)
    return UNLIMITED.model_copy(update={"streams": mine.streams}) if admin else mine


def limits_of(config: ServerConfig, user: User) -> Limits:
    """The user's effective limits (what admission and the stream limit apply)."""
    return effective(server_defaults(config), user.limits, user.admin)


@dataclass(frozen=True)
class Ask:
    """The part of a create request that limits concern."""

    group: str
    priority: int
    size: int
    cpu: float
    mem: int
    gpu: int
    #: a session whose roles differ: (replicas, cpu, mem, gpu) of each role, summed over
    #: instead of ``size`` x (cpu, mem, gpu)
    roles: tuple[tuple[int, float, int, int], ...] = ()

    def totals(self) -> tuple[float, int, int]:
        """(cores, bytes, GPUs) of all its kernels."""
        if not self.roles:
            return self.size * self.cpu, self.size * self.mem, self.size * self.gpu
        return (
            sum(n * cpu for n, cpu, _, _ in self.roles),
            sum(n * mem for n, _, mem, _ in self.roles),
            sum(n * gpu for n, _, _, gpu in self.roles),
        )

    def shown(self, total: str, per_kernel: str) -> str:
        """``4 x 2 cores`` (one shape), or ``8 cores over 4 kernels of every role``."""
        if not self.roles:
            return f"{self.size} x {per_kernel}"
        return f"{total} over {self.size} kernels of every role"


@dataclass(frozen=True)
class Refusal:
    #: the request field at fault (None: none is, e.g. too many sessions)
    field: str | None
    message: str


def check_static(limits: Limits, ask: Ask) -> Refusal | None:
    """What does not depend on the user's other sessions: priority and group."""
    if limits.max_priority is not None and ask.priority > limits.max_priority:
        return Refusal(
            "priority",
            f"priority: {ask.priority} is above your limit of {limits.max_priority} (max_priority)",
        )
    if limits.groups is not None and ask.group not in limits.groups:
        yours = ", ".join(limits.groups) or "none"
        return Refusal(
            "group",
            f"group: you may not use resource group {ask.group!r} (groups: {yours})",
        )
    return None


def check(limits: Limits, used: Usage, ask: Ask) -> Refusal | None:
    """None if ``ask`` fits the user's limits next to what ``used`` holds; else why not."""
    refusal = check_static(limits, ask)
    if refusal is not None:
        return refusal
    cpu, mem, gpu = ask.totals()
    after = Usage(
        sessions=used.sessions + 1,
        kernels=used.kernels + ask.size,
        cpu=used.cpu + cpu,
        mem=used.mem + mem,
        gpu=used.gpu + gpu,
    )
    if limits.sessions is not None and after.sessions > limits.sessions:
        return Refusal(
            None,
            f"sessions: you have {used.sessions} active session(s); your limit is"
            f" {limits.sessions} (sessions)",
        )
    if limits.kernels is not None and after.kernels > limits.kernels:
        return Refusal(
            "cluster_size",
            f"cluster_size: {ask.size} more kernel(s) would make {after.kernels} in active"
            f" sessions, over your limit of {limits.kernels} (kernels)",
        )
    if limits.cpu is not None and after.cpu > limits.cpu + EPSILON:
        return Refusal(
            "resources",
            f"resources: {ask.shown(counted(cpu, 'core'), counted(ask.cpu, 'core'))} would make"
            f" {after.cpu:g} in use,"
            f" over your limit of {limits.cpu:g} (cpu)",
        )
    if limits.mem is not None and after.mem > limits.mem:
        return Refusal(
            "resources",
            f"resources: {ask.shown(format_size(mem), format_size(ask.mem))} memory would make"
            f" {format_size(after.mem)} in use, over your limit of {format_size(limits.mem)}"
            " (mem)",
        )
    if limits.gpu is not None and after.gpu > limits.gpu:
        return Refusal(
            "resources",
            f"resources: {ask.shown(counted(gpu, 'GPU'), counted(ask.gpu, 'GPU'))} would make"
            f" {after.gpu} in use, over your limit of {limits.gpu} (gpu)",
        )
    return None
