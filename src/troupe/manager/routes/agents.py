"""/v1/agents/...: what agents on other hosts send (registration, heartbeats, kernel exits).

Authenticated with the agent token, not with user API keys.
"""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Depends, Request

from troupe.api.agent import AgentCapacity, KernelExit
from troupe.manager.deps import RegistryDep
from troupe.manager.errors import ApiError, not_found


class AgentRegistration(AgentCapacity):
    #: URL where the manager reaches the agent, e.g. http://10.0.0.5:6011
    address: str


def agent_auth(request: Request, registry: RegistryDep) -> None:
    sent = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
    if not hmac.compare_digest(sent, registry.config.resolve_agent_token()):
        raise ApiError(401, "unauthorized", "invalid agent token")


router = APIRouter(tags=["agents"], dependencies=[Depends(agent_auth)])


@router.post("/agents/register", status_code=204)
async def register(reg: AgentRegistration, registry: RegistryDep) -> None:
    cap = AgentCapacity.model_validate(reg.model_dump(exclude={"address"}))
    await registry.fleet.register_remote(cap, reg.address)


@router.post("/agents/{name}/heartbeat", status_code=204)
async def heartbeat(name: str, registry: RegistryDep) -> None:
    if not await registry.fleet.heartbeat(name):
        raise not_found("agent", name)


@router.post("/agents/{name}/events", status_code=204)
async def events(name: str, ev: KernelExit, registry: RegistryDep) -> None:
    await registry.kernel_exited(ev)
