"""``troupe agent``: serves one host's Docker engine to a manager on another host.

It registers, heartbeats, forwards kernel exits, and serves the manager's requests over HTTP.
Both directions carry the agent token.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvicorn

from troupe.agent.app import create_agent_app
from troupe.agent.docker_backend import DockerAgent
from troupe.api import defaults
from troupe.api.agent import KernelExit
from troupe.api.defaults import AGENT_DATA_ROOT, HEARTBEAT_SECONDS

log = logging.getLogger(__name__)


@dataclass
class AgentConfig:
    """What ``troupe agent`` was told on its command line."""

    manager: str
    token: str
    listen_host: str
    listen_port: int
    name: str
    docker_url: str | None = None
    cpu: float | None = None
    mem: int | None = None
    group: str = defaults.GROUP
    data_root: Path = AGENT_DATA_ROOT
    heartbeat: float = HEARTBEAT_SECONDS
    #: Address the manager uses to reach this agent (default: the listen address).
    advertise: str | None = None

    @property
    def address(self) -> str:
        return self.advertise or f"http://{self.listen_host}:{self.listen_port}"


class AgentDaemon:
    """Runs :class:`DockerAgent` behind its HTTP face and keeps the manager informed: it
    registers (again, whenever the manager forgot it), heartbeats while the engine answers, and
    forwards kernel exits, retrying until the manager has them."""

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.backend = DockerAgent(
            config.name,
            docker_url=config.docker_url,
            cpu=config.cpu,
            mem=config.mem,
            group=config.group,
            data_root=config.data_root,
        )
        self._http = httpx.AsyncClient(
            base_url=config.manager.rstrip("/") + "/v1",
            headers={"Authorization": f"Bearer {config.token}"},
            timeout=10,
        )
        self._events: asyncio.Queue[KernelExit] = asyncio.Queue()

    async def _on_exit(self, ev: KernelExit) -> None:
        await self._events.put(ev)

    async def _register(self) -> None:
        cap = await self.backend.capacity()
        body = {**cap.model_dump(), "address": self.config.address}
        delay = 0.2
        while True:
            try:
                r = await self._http.post("/agents/register", json=body)
                if r.status_code < 300:
                    log.info("registered with %s as %s", self.config.manager, self.config.name)
                    return
                log.warning("registration refused: %s %s", r.status_code, r.text)
            except httpx.HTTPError as e:
                log.warning("manager unreachable: %s", e)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat)
            if not await self.backend.ping():
                # Without its engine this agent can neither run nor stop kernels: going silent
                # lets the manager declare it LOST and fail its sessions.
                log.warning("Docker engine not answering; heartbeat withheld")
                continue
            try:
                r = await self._http.post(f"/agents/{self.config.name}/heartbeat")
                if r.status_code == 404:  # the manager forgot us (restart): register again
                    await self._register()
            except httpx.HTTPError as e:
                log.warning("heartbeat failed: %s", e)

    async def _forward_events(self) -> None:
        while True:
            ev = await self._events.get()
            delay = 0.2
            while True:
                try:
                    r = await self._http.post(
                        f"/agents/{self.config.name}/events", json=ev.model_dump()
                    )
                    if r.status_code < 500:
                        break
                except httpx.HTTPError as e:
                    log.warning("reporting a kernel exit failed: %s", e)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def run(self) -> None:
        await self.backend.start(on_exit=self._on_exit)
        app = create_agent_app(self.backend, self.config.token)
        server = uvicorn.Server(
            uvicorn.Config(
                app, host=self.config.listen_host, port=self.config.listen_port, log_level="warning"
            )
        )
        serve = asyncio.create_task(server.serve())
        tasks: list[asyncio.Task[None]] = []
        try:
            while not server.started:
                if serve.done():
                    await serve  # raises why it could not start
                    return
                await asyncio.sleep(0.05)
            await self._register()
            tasks = [
                asyncio.create_task(self._heartbeats()),
                asyncio.create_task(self._forward_events()),
            ]
            await serve
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await t
            await self._http.aclose()
            await self.backend.close()
