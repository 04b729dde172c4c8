"""Stored rows -> wire models (what the API shows of sessions).

One function builds a :class:`SessionInfo` (:func:`build_session_info`) from anything with the
session's and kernels' fields: ORM objects (:func:`session_info`) or plain rows of only the
columns shown (:func:`session_infos`, for pages of the list, where loading ORM objects with
their keys and relationships took most of the time).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import Select, select
from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.models import KernelInfo, Mount, Resources, SessionInfo
from troupe.manager.store.models import Kernel, Session, User

#: Phases of a kernel's start-up, in order (stamped in its timeline).
KERNEL_PHASES = ("created", "started", "entrypoint", "ready")
#: What a SessionInfo shows of a session row, and of each kernel row.
SESSION_COLUMNS = (
    Session.id,
    Session.name,
    Session.status,
    Session.status_info,
    Session.type,
    Session.image,
    Session.cluster_size,
    Session.cluster_mode,
    Session.cpu,
    Session.mem,
    Session.gpu,
    Session.mounts,
    Session.dist_env,
    Session.group,
    Session.priority,
    Session.uid,
    Session.gid,
    Session.isolated_network,
    Session.network,
    Session.subnet,
    Session.exit_code,
    Session.created_at,
    Session.started_at,
    Session.terminated_at,
    Session.timeline,
)
KERNEL_COLUMNS = (
    Kernel.session_id,
    Kernel.id,
    Kernel.hostname,
    Kernel.role,
    Kernel.idx,
    Kernel.rank,
    Kernel.agent_id,
    Kernel.container_id,
    Kernel.ip,
    Kernel.status,
    Kernel.exit_code,
    Kernel.oom_killed,
    Kernel.timeline,
    Kernel.gpus,
)


class KernelFields(Protocol):
    """A kernel's shown fields (an ORM :class:`Kernel` or a row of :data:`KERNEL_COLUMNS`)."""

    @property
    def timeline(self) -> dict[str, Any]: ...
    @property
    def gpus(self) -> list[Any]: ...


def _since(t0: datetime, timeline: Mapping[str, str], keys: Mapping[str, str]) -> dict[str, float]:
    """Seconds from ``t0`` to each phase (``keys``: phase -> timeline key) that ``timeline``
    has (ms precision; bad stamps skipped)."""
    out = {}
    for phase, key in keys.items():
        if at := timeline.get(key):
            try:
                out[phase] = round((datetime.fromisoformat(at) - t0).total_seconds(), 3)
            except (TypeError, ValueError):
                continue
    return out


def phases(
    s: Any, kernels: Sequence[KernelFields]
) -> tuple[dict[str, float], list[dict[str, float]]]:
    """The session's start-up phases and each kernel's, as seconds after creation: what the
    benchmarks and the web UI show. The session's kernel phases are the slowest kernel's."""
    t0 = s.created_at
    per_kernel = [_since(t0, k.timeline, {p: p for p in KERNEL_PHASES}) for k in kernels]
    session = _since(t0, s.timeline, {"scheduled": "SCHEDULED", "network": "network"})
    for phase in KERNEL_PHASES[:-1]:
        if per_kernel and all(phase in k for k in per_kernel):
            session[phase] = max(k[phase] for k in per_kernel)
    session.update(_since(t0, s.timeline, {"ready": "RUNNING"}))
    return session, per_kernel


def build_session_info(s: Any, owner: str, kernels: Sequence[Any]) -> SessionInfo:
    """``s`` and ``kernels`` have the fields of :data:`SESSION_COLUMNS` / :data:`KERNEL_COLUMNS`
    (kernels in rank order)."""
    session_phases, kernel_phases = phases(s, kernels)
    return SessionInfo(
        id=s.id,
        name=s.name,
        owner=owner,
        status=s.status,
        status_info=s.status_info,
        type=s.type,
        image=s.image,
        cluster_size=s.cluster_size,
        cluster_mode=s.cluster_mode,
        resources=Resources(cpu=s.cpu, mem=s.mem, gpu=s.gpu),
        mounts=[Mount(folder=m["folder"], readonly=m["readonly"]) for m in s.mounts],
        dist_env=s.dist_env,
        group=s.group,
        priority=s.priority,
        uid=s.uid,
        gid=s.gid,
        isolated_network=s.isolated_network,
        network=s.network,
        subnet=s.subnet,
        exit_code=s.exit_code,
        created_at=s.created_at,
        started_at=s.started_at,
        terminated_at=s.terminated_at,
        timeline=s.timeline,
        phases=session_phases,
        kernels=[
            KernelInfo(
                id=k.id,
                hostname=k.hostname,
                role=k.role,
                idx=k.idx,
                rank=k.rank,
                agent=k.agent_id,
                container_id=k.container_id,
                ip=k.ip,
                status=k.status,
                exit_code=k.exit_code,
                oom_killed=k.oom_killed,
                timeline=k.timeline,
                phases=p,
                gpus=list(k.gpus or []),
            )
            for k, p in zip(kernels, kernel_phases, strict=True)
        ],
    )


def session_info(s: Session) -> SessionInfo:
    return build_session_info(s, s.owner.name, s.kernels)


def session_columns() -> Select[Any]:
    """``SELECT`` of what :func:`session_infos` shows (with the owner's name as ``owner``), for
    the caller to filter and order."""
    return select(*SESSION_COLUMNS, User.name.label("owner")).join(
        User, User.id == Session.owner_id
    )


async def session_infos(db: AsyncSession, q: Select[Any]) -> list[SessionInfo]:
    """The sessions ``q`` (from :func:`session_columns`) selects, in its order, with their
    kernels (one more query)."""
    rows = (await db.execute(q)).all()
    if not rows:
        return []
    kernels: defaultdict[str, list[Any]] = defaultdict(list)
    kq = (
        select(*KERNEL_COLUMNS)
        .where(Kernel.session_id.in_([r.id for r in rows]))
        .order_by(Kernel.session_id, Kernel.rank)
    )
    for k in (await db.execute(kq)).all():
        kernels[k.session_id].append(k)
    return [build_session_info(r, r.owner, kernels[r.id]) for r in rows]
