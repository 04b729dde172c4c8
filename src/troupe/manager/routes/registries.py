"""/v1/registries (admins: add, list, remove) and /v1/images/pull (admins: pre-pull).

A registry's password and CA go in with ``POST`` and never come out: answers show only
whether there is one (:class:`RegistryInfo`); the access log never holds a body.
"""

from __future__ import annotations

from fastapi import APIRouter

from troupe.api.aio import gather_all
from troupe.api.errors import Invalid, NotFound
from troupe.api.registries import (
    ImagePull,
    PullResult,
    RegistryAdd,
    RegistryInfo,
    allowed,
    split_image,
)
from troupe.manager.deps import AdminUser, RegistryDep

router = APIRouter()


@router.get("/registries", response_model=list[RegistryInfo], tags=["registries"])
async def list_registries(_: AdminUser, registry: RegistryDep) -> list[RegistryInfo]:
    return registry.fleet.pulls.book.infos()


@router.post("/registries", status_code=201, response_model=RegistryInfo, tags=["registries"])
async def add_registry(req: RegistryAdd, _: AdminUser, registry: RegistryDep) -> RegistryInfo:
    """Adds a registry: agents pull from it with its credentials, trusting its CA."""
    if (req.username is None) != (req.password is None):
        raise Invalid.field_rule("password", "give both a user name and a password, or neither")
    if req.ca_pem is not None and "-----BEGIN CERTIFICATE-----" not in req.ca_pem:
        raise Invalid.field_rule("ca_pem", "not a PEM certificate")
    return registry.fleet.pulls.book.add(req)


@router.delete("/registries/{host}", status_code=204, tags=["registries"])
async def remove_registry(host: str, _: AdminUser, registry: RegistryDep) -> None:
    registry.fleet.pulls.book.remove(host)


@router.post("/images/pull", response_model=list[PullResult], tags=["images"])
async def pull_image(req: ImagePull, _: AdminUser, registry: RegistryDep) -> list[PullResult]:
    """Pulls an image on one agent or on every reachable one (those that lack it), joining a
    pull under way; answers when they are done, one entry per agent."""
    registry_host = split_image(req.image)[0]
    if not allowed(req.image, registry.config.allowed_registries):
        raise Invalid.field_rule(
            "image", f"images from registry {registry_host!r} are not allowed on this server"
        )
    fleet = registry.fleet
    agents = list(fleet.reachable())
    if req.agent is not None:
        if req.agent not in agents:
            raise NotFound.of("agent", req.agent)
        agents = [req.agent]

    async def one(agent_id: str) -> PullResult:
        pulled = await fleet.pulls.ensure(agent_id, req.image)
        return PullResult(agent=agent_id, image=req.image, pulled=pulled)

    return list(await gather_all(one(a) for a in agents))
