"""/v1/agents/...: what agents on other hosts send (registration, heartbeats, kernel exits).

Authenticated with the agent token, not with user API keys.
"""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Depends, Request

from troupe.api.agent import AgentCapacity, KernelExit
from troupe.api.errors import NotFound, Unauthorized
from troupe.manager.deps import RegistryDep


class AgentRegistration(AgentCapacity):
    #: URL where the manager reaches the agent, e.g. http://10.0.0.5:6011
    address: str


def agent_auth(request: Request, registry: RegistryDep) -> None:
    sent = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
    token = registry.config.resolve_agent_token()
    if not hmac.compare_digest(sent.encode(), token.encode()):
        raise Unauthorized("invalid agent token")


router = APIRouter(tags=["agents"], dependencies=[Depends(agent_auth)])


@router.post("/agents/register", status_code=204)
async def register(reg: AgentRegistration, registry: RegistryDep) -> None:
    cap = AgentCapacity.model_validate(reg.model_dump(exclude={"address"}))
    await registry.fleet.register_remote(cap, reg.address)


@router.post("/agents/{name}/heartbeat", status_code=204)
async def heartbeat(name: str, registry: RegistryDep) -> None:
    if not await registry.fleet.heartbeat(name):
        raise NotFound.of("agent", name)


@router.post("/agents/{name}/events", status_code=204)
async def events(name: str, ev: KernelExit, registry: RegistryDep) -> None:
    if registry.fleet.get(name) is None:
        raise NotFound.of("agent", name)
    registry.fleet.report_exit(name, ev)
