"""/v1/health, /v1/agents (list; remove, for admins), /v1/images."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from fastapi import APIRouter
from sqlalchemy import func, select

from troupe import __version__
from troupe.api.errors import TroupeError
from troupe.api.lifecycle import SESSION_HAS_KERNELS
from troupe.api.models import AgentInfo, GpuInfo, ImageInfo
from troupe.manager.deps import DB, AdminUser, CurrentUser, RegistryDep
from troupe.manager.store.models import Agent, Kernel, Session

log = logging.getLogger(__name__)
router = APIRouter()


@router.get("/health", tags=["misc"])
async def health() -> dict[str, str]:
    return {"status": "ok", "version": __version__}


@router.get("/agents", response_model=list[AgentInfo], tags=["agents"])
async def list_agents(db: DB, _: CurrentUser, registry: RegistryDep) -> list[AgentInfo]:
    states = {a.id: a for a in await registry.fleet.states(db)}
    rows = await db.execute(
        select(Kernel.agent_id, func.count())
        .join(Session, Kernel.session_id == Session.id)
        .where(Session.status.in_(SESSION_HAS_KERNELS))
        .group_by(Kernel.agent_id)
    )
    counts = {agent_id: n for agent_id, n in rows}
    now = datetime.now(UTC)
    out = []
    for a in (await db.execute(select(Agent).order_by(Agent.name))).scalars():
        st = states.get(a.id)
        hb = a.last_heartbeat
        out.append(
            AgentInfo(
                id=a.id,
                name=a.name,
                group=a.group,
                status=a.status,
                cpu=a.cpu,
                mem=a.mem,
                gpu=a.gpu,
                cpu_free=st.cpu_free if st else 0,
                mem_free=st.mem_free if st else 0,
                gpu_free=st.gpu_free if st else 0,
                kernels=counts.get(a.id, 0),
                swarm_manager=a.swarm_manager,
                heartbeat_age=(now - hb).total_seconds() if hb else None,
                gpus=[GpuInfo.model_validate(g) for g in a.gpus or []],
                gpu_reason=a.gpu_reason,
            )
        )
    return out


@router.delete("/agents/{name}", status_code=204, tags=["agents"])
async def remove_agent(name: str, _: AdminUser, registry: RegistryDep) -> None:
    """Forgets an agent of another host (admins). Only a LOST one: an ALIVE agent must be
    stopped first (409), and the manager's own agents stay (409). Its sessions were failed
    when it was lost; if it comes back it registers as a new agent."""
    await registry.fleet.remove(name)


@router.get("/images", response_model=list[ImageInfo], tags=["images"])
async def list_images(_: CurrentUser, registry: RegistryDep) -> list[ImageInfo]:
    """Images of every reachable agent; an agent that does not answer is skipped."""
    seen: dict[str, ImageInfo] = {}
    for agent in registry.fleet.reachable().values():
        try:
            images = await agent.images()
        except TroupeError as e:
            log.warning("image list skips agent %s: %s", agent.name, e)
            continue
        for img in images:
            seen.setdefault(img.name, img)
    return list(seen.values())
