"""/v1/health, /v1/agents (list; remove, for admins), /v1/images."""

from __future__ import annotations

from fastapi import APIRouter

from troupe import __version__
from troupe.api.models import AgentInfo, ImageInfo
from troupe.manager.deps import DB, AdminUser, CurrentUser, RegistryDep
from troupe.manager.reads.agents import agent_infos, image_infos

router = APIRouter()


@router.get("/health", tags=["misc"])
async def health() -> dict[str, str]:
    return {"status": "ok", "version": __version__}


@router.get("/agents", response_model=list[AgentInfo], tags=["agents"])
async def list_agents(db: DB, _: CurrentUser, registry: RegistryDep) -> list[AgentInfo]:
    return await agent_infos(db, registry.fleet)


@router.delete("/agents/{name}", status_code=204, tags=["agents"])
async def remove_agent(name: str, _: AdminUser, registry: RegistryDep) -> None:
    """Forgets an agent of another host (admins). Only a LOST one: an ALIVE agent must be
    stopped first (409), and the manager's own agents stay (409). Its sessions were failed
    when it was lost; if it comes back it registers as a new agent."""
    await registry.fleet.remove(name)


@router.get("/images", response_model=list[ImageInfo], tags=["images"])
async def list_images(_: CurrentUser, registry: RegistryDep) -> list[ImageInfo]:
    """Images of every reachable agent; an agent that does not answer is skipped."""
    return await image_infos(registry.fleet)
