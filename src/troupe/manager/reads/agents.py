"""The agents and their images, as ``/v1/agents``, ``/v1/images`` and the web pages show them."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.errors import TroupeError
from troupe.api.lifecycle import SESSION_HAS_KERNELS, AgentStatus
from troupe.api.models import AgentInfo, GpuInfo, ImageInfo
from troupe.manager.fleet import Fleet
from troupe.manager.store.models import Agent, Kernel, Session

log = logging.getLogger(__name__)


async def agent_infos(db: AsyncSession, fleet: Fleet) -> list[AgentInfo]:
    """Every agent by name, with its free capacity (ALIVE ones) and its kernels in use."""
    states = {a.id: a for a in await fleet.states(db)}
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
        # (free as the row's status says: an agent LOST since ``states`` read it has none)
        st = states.get(a.id) if a.status == AgentStatus.ALIVE else None
        # (an in-process agent sends none: its registration's time would only grow old)
        hb = None if fleet.is_local(a.id) else a.last_heartbeat
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


async def image_infos(fleet: Fleet) -> list[ImageInfo]:
    """Images of every reachable agent, each once with the agents that hold it; an agent
    that does not answer is skipped."""
    seen: dict[str, ImageInfo] = {}
    for agent_id, agent in fleet.reachable().items():
        try:
            images = await agent.images()
        except TroupeError as e:
            log.warning("image list skips agent %s: %s", agent.name, e)
            continue
        for img in images:
            seen.setdefault(img.name, img.model_copy(update={"agents": []})).agents.append(agent_id)
    return list(seen.values())
