"""Stored rows -> wire models (what the API shows of sessions)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from troupe.api.models import KernelInfo, Mount, Resources, SessionInfo
from troupe.manager.store.models import Session

#: Phases of a kernel's start-up, in order (stamped in its timeline).
KERNEL_PHASES = ("created", "started", "entrypoint", "ready")


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


def phases(s: Session) -> tuple[dict[str, float], list[dict[str, float]]]:
    """The session's start-up phases and each kernel's, as seconds after creation: what the
    benchmarks and the web UI show. The session's kernel phases are the slowest kernel's."""
    t0 = s.created_at
    kernels = [_since(t0, k.timeline, {p: p for p in KERNEL_PHASES}) for k in s.kernels]
    session = _since(t0, s.timeline, {"scheduled": "SCHEDULED", "network": "network"})
    for phase in KERNEL_PHASES[:-1]:
        if kernels and all(phase in k for k in kernels):
            session[phase] = max(k[phase] for k in kernels)
    session.update(_since(t0, s.timeline, {"ready": "RUNNING"}))
    return session, kernels


def session_info(s: Session) -> SessionInfo:
    session_phases, kernel_phases = phases(s)
    return SessionInfo(
        id=s.id,
        name=s.name,
        owner=s.owner.name,
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
            for k, p in zip(s.kernels, kernel_phases, strict=True)
        ],
    )
