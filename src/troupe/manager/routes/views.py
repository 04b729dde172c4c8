"""Stored rows -> wire models (what the API shows of sessions)."""

from __future__ import annotations

from troupe.api.models import KernelInfo, Mount, Resources, SessionInfo
from troupe.manager.store.models import Session


def session_info(s: Session) -> SessionInfo:
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
            )
            for k in s.kernels
        ],
    )
