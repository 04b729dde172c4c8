"""/v1/agents/...: what agents on other hosts send (registration, heartbeats, kernel exits).

Not user API keys. Registration carries the shared agent token and answers the agent's own
credential (a new one each time; only its SHA-256 is stored). Heartbeats and exit reports
carry ``Authorization: Bearer <credential>`` of the agent they name: the shared token alone
cannot speak for an agent, and one agent cannot speak for another.

A name already taken by a live agent can be registered again only by that agent (it sends
its credential in ``X-Troupe-Agent-Credential``); a LOST agent's name, or one registered
before credentials existed, is free.
"""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from troupe.api import defaults
from troupe.api.agent import AgentCapacity, KernelExit
from troupe.api.errors import NotFound, Unauthorized
from troupe.api.models import NAME_PATTERN
from troupe.manager.deps import RegistryDep, bearer
from troupe.manager.fleet import Fleet

#: Header of a registration by an agent that already holds a credential.
CREDENTIAL_HEADER = "X-Troupe-Agent-Credential"


#: 64-bit signed integer columns
_INT64 = 2**63


class AgentRegistration(AgentCapacity):
    """What an agent reports, held to what the agents table can store (bad input is a 422,
    never a failed INSERT: constrained text fields also refuse lone surrogates)."""

    model_config = ConfigDict(allow_inf_nan=False)

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", description="host name")
    cpu: float = Field(ge=0, le=1_000_000)
    mem: int = Field(ge=0, lt=_INT64)
    gpu: int = Field(0, ge=0, le=1024)
    group: str = Field(defaults.GROUP, pattern=NAME_PATTERN)
    data_marker: str = Field("", max_length=64)
    underlay_mtu: int = Field(0, ge=0, le=65535)
    #: URL where the manager reaches the agent, e.g. http://10.0.0.5:6011
    address: str = Field(pattern=r"^https?://\S+$", max_length=255)


class AgentCredential(BaseModel):
    #: the agent's own secret for heartbeats and events (shown once)
    credential: str


def agent_token(request: Request, registry: RegistryDep) -> None:
    """The shared agent token (registration only)."""
    token = registry.config.resolve_agent_token()
    if not hmac.compare_digest(bearer(request).encode(), token.encode()):
        raise Unauthorized("invalid agent token")


def agent_credential(name: str, request: Request, registry: RegistryDep) -> Fleet:
    """The credential of agent ``name`` (404 if no agent of another host has that name, so
    an agent the manager forgot registers again)."""
    sent = bearer(request)
    if not sent or not sent.isascii():
        raise Unauthorized(f"missing agent credential (Authorization: Bearer <{name}'s>)")
    fleet = registry.fleet
    if not fleet.is_remote(name):
        raise NotFound.of("agent", name)
    if not fleet.credential_ok(name, sent):
        raise Unauthorized(f"invalid credential for agent {name!r} (register again to get one)")
    return fleet


router = APIRouter(tags=["agents"])


@router.post(
    "/agents/register", response_model=AgentCredential, dependencies=[Depends(agent_token)]
)
async def register(
    reg: AgentRegistration, request: Request, registry: RegistryDep
) -> AgentCredential:
    cap = AgentCapacity.model_validate(reg.model_dump(exclude={"address"}))
    held = request.headers.get(CREDENTIAL_HEADER) or None
    credential = await registry.fleet.register_remote(cap, reg.address, held)
    return AgentCredential(credential=credential)


@router.post("/agents/{name}/heartbeat", status_code=204)
async def heartbeat(name: str, fleet: Fleet = Depends(agent_credential)) -> None:
    if not await fleet.heartbeat(name):
        raise NotFound.of("agent", name)


@router.post("/agents/{name}/events", status_code=204)
async def events(name: str, ev: KernelExit, fleet: Fleet = Depends(agent_credential)) -> None:
    """A kernel of this agent stopped; the session life checks that the agent holds it."""
    fleet.report_exit(name, ev)
