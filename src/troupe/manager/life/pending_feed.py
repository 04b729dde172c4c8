"""What the placing pass reads of the database: the PENDING sessions (all of them, or those
a change named) as the scheduler's requests, and the agents that placed sessions hold.

Plain column reads, no ORM objects: a manager that starts with 100,000 PENDING sessions
loads them once, and each later pass loads only the sessions that changed.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.lifecycle import SESSION_ALLOCATED, SessionStatus
from troupe.manager.roles import request_of
from troupe.manager.scheduler import Part, Request
from troupe.manager.store.models import Kernel, Session

#: ids per ``IN (...)`` (well under every database's limit of bound parameters)
CHUNK = 500


class KernelShape(Protocol):
    @property
    def role(self) -> str: ...
    @property
    def cpu(self) -> float: ...
    @property
    def mem(self) -> int: ...
    @property
    def gpu(self) -> int: ...


def kernel_parts(kernels: Sequence[KernelShape]) -> list[Part]:
    """A stored session's kernels (in rank order) as the scheduler's parts, one per role."""
    parts: list[Part] = []
    for k in kernels:
        if parts and parts[-1].role == k.role:
            parts[-1] = parts[-1]._replace(kernels=parts[-1].kernels + 1)
        else:
            parts.append(Part(k.role, 1, k.cpu, k.mem, k.gpu))
    return parts


def pending_since(
    created_at: datetime, timeline: Mapping[str, Any] | None, restarts: int
) -> datetime:
    """When the session last became PENDING: its creation, or its re-placement after a lost
    agent (``max_pending_seconds`` counts from there)."""
    again = (timeline or {}).get(SessionStatus.PENDING.value) if restarts else None
    return datetime.fromisoformat(again) if again else created_at


@dataclass(frozen=True)
class Waiting:
    """A PENDING session as the placing pass keeps it."""

    request: Request
    #: its kernels' hostnames, by rank (the why-pending report has one entry per kernel)
    hosts: tuple[str, ...]
    #: when its ``max_pending_seconds`` runs out; None: never
    due: datetime | None
    #: the why-pending lines stored now; None: none stored, or not one list for every kernel
    shown: list[str] | None

    def report(self, lines: list[str]) -> dict[str, list[str]]:
        return {h: lines for h in self.hosts}


def _shown(info: Mapping[str, Any] | None, hosts: tuple[str, ...]) -> list[str] | None:
    report = (info or {}).get("pending")
    if not isinstance(report, dict) or not hosts or set(report) != set(hosts):
        return None
    first = report[hosts[0]]
    if not isinstance(first, list) or any(report[h] != first for h in hosts):
        return None
    return list(first)


def chunks(ids: Collection[str]) -> Iterator[list[str]]:
    ordered = sorted(ids)
    for i in range(0, len(ordered), CHUNK):
        yield ordered[i : i + CHUNK]


async def load_waiting(db: AsyncSession, ids: Collection[str] | None = None) -> dict[str, Waiting]:
    """The PENDING sessions (of ``ids`` if given; the others are not PENDING), by id."""
    if ids is None:
        return await _load(db, Session.status == SessionStatus.PENDING)
    out: dict[str, Waiting] = {}
    for chunk in chunks(ids):
        out.update(
            await _load(db, (Session.status == SessionStatus.PENDING) & Session.id.in_(chunk))
        )
    return out


async def _load(db: AsyncSession, where: ColumnElement[bool]) -> dict[str, Waiting]:
    kernels: dict[str, list[Any]] = {}
    rows = await db.execute(
        select(Kernel.session_id, Kernel.role, Kernel.cpu, Kernel.mem, Kernel.gpu, Kernel.hostname)
        .join(Session, Kernel.session_id == Session.id)
        .where(where)
        .order_by(Kernel.session_id, Kernel.rank)
    )
    for k in rows:
        kernels.setdefault(k.session_id, []).append(k)
    sessions = await db.execute(
        select(
            Session.id,
            Session.group,
            Session.cluster_mode,
            Session.priority,
            Session.created_at,
            Session.max_pending_seconds,
            Session.restarts,
            Session.timeline,
            Session.status_info,
        ).where(where)
    )
    out: dict[str, Waiting] = {}
    for s in sessions:
        ks = kernels.get(s.id)
        if not ks:
            continue
        request = request_of(
            s.id,
            s.group,
            s.cluster_mode,
            kernel_parts(ks),
            priority=s.priority,
            order=s.created_at.timestamp(),
        )
        due = None
        if s.max_pending_seconds:
            since = pending_since(s.created_at, s.timeline, s.restarts)
            due = since + timedelta(seconds=s.max_pending_seconds)
        hosts = tuple(k.hostname for k in ks)
        out[s.id] = Waiting(request, hosts, due, _shown(s.status_info, hosts))
    return out


async def holders(db: AsyncSession, ids: Collection[str] | None = None) -> dict[str, set[str]]:
    """Session id -> the agents its kernels hold, for the sessions (of ``ids`` if given) whose
    kernels' resources count as used (placed and not over)."""
    where = Session.status.in_(SESSION_ALLOCATED) & Kernel.agent_id.is_not(None)
    out: dict[str, set[str]] = {}
    for chunk in [None] if ids is None else list(chunks(ids)):
        rows = await db.execute(
            select(Kernel.session_id, Kernel.agent_id)
            .join(Session, Kernel.session_id == Session.id)
            .where(where if chunk is None else where & Session.id.in_(chunk))
        )
        for sid, agent_id in rows:
            out.setdefault(sid, set()).add(agent_id or "")
    return out
