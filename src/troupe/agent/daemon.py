"""``troupe agent``: serves one host's Docker engine to a manager on another host.

It registers, heartbeats, forwards kernel exits, and serves the manager's requests over HTTP
(HTTPS with ``--tls-cert``/``--tls-key``). The manager's requests carry the agent token. The
agent registers with the shared token too; the manager answers with a credential of this agent
alone (``{"credential": ...}``), which then authenticates its heartbeats and events and is shown
again on each later registration (a manager restart keeps the agent's identity). A manager that
answers 204 gives none: the shared token goes on serving.
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

#: Header of a registration that shows the credential the manager gave this agent before.
CREDENTIAL_HEADER = "X-Troupe-Agent-Credential"


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
    #: Serve HTTPS with this certificate (PEM) and key; both or neither.
    tls_cert: Path | None = None
    tls_key: Path | None = None
    pids_limit: int = defaults.PIDS_LIMIT
    saved_log_bytes: int = defaults.SAVED_LOG_BYTES
    #: ``--gpus``: auto, none or indices such as 0,2; ``--nvidia-smi``: its path
    gpus: str = "auto"
    nvidia_smi: str | None = None
    #: ``--metrics-interval``: seconds between two samples of the kernels (0: none)
    metrics_interval: float = 5.0

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    @property
    def address(self) -> str:
        scheme = "https" if self.tls else "http"
        return self.advertise or f"{scheme}://{self.listen_host}:{self.listen_port}"


class AgentDaemon:
    """Runs :class:`DockerAgent` behind its HTTP face and keeps the manager informed: it
    registers (again, whenever the manager forgot it), heartbeats while the engine answers, and
    forwards kernel exits, retrying until the manager has them."""

    def __init__(
        self, config: AgentConfig, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        """``transport``: how to reach the manager (tests hand in a mock)."""
        self.config = config
        self.backend = DockerAgent(
            config.name,
            docker_url=config.docker_url,
            cpu=config.cpu,
            mem=config.mem,
            group=config.group,
            data_root=config.data_root,
            pids_limit=config.pids_limit,
            saved_log_bytes=config.saved_log_bytes,
            gpus=config.gpus,
            nvidia_smi=config.nvidia_smi,
            metrics_interval=config.metrics_interval,
        )
        self._http = httpx.AsyncClient(
            base_url=config.manager.rstrip("/") + "/v1", timeout=10, transport=transport
        )
        self._events: asyncio.Queue[KernelExit] = asyncio.Queue()
        #: This agent's own secret, from the manager's answer to its registration.
        self.credential: str | None = None
        self._registering = asyncio.Lock()

    def _auth(self) -> dict[str, str]:
        """Heartbeats and events: this agent's credential (the shared token while it has
        none)."""
        return {"Authorization": f"Bearer {self.credential or self.config.token}"}

    async def _on_exit(self, ev: KernelExit) -> None:
        await self._events.put(ev)

    async def _register(self) -> None:
        """Registers until the manager accepts, keeping the credential it answers with."""
        cap = await self.backend.capacity()
        body = {**cap.model_dump(), "address": self.config.address}
        delay = 0.2
        while True:
            headers = {"Authorization": f"Bearer {self.config.token}"}
            if self.credential:
                headers[CREDENTIAL_HEADER] = self.credential
            try:
                r = await self._http.post("/agents/register", json=body, headers=headers)
                if r.status_code < 300:
                    self._keep_credential(r)
                    log.info("registered with %s as %s", self.config.manager, self.config.name)
                    return
                log.warning("registration refused: %s %s", r.status_code, r.text)
                if r.status_code == 401 and self.credential:
                    # The manager does not know our credential (its state was lost): only a
                    # fresh registration, with the shared token alone, can go on.
                    log.warning("manager refused this agent's credential; registering anew")
                    self.credential = None
            except httpx.HTTPError as e:
                log.warning("manager unreachable: %s", e)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    def _keep_credential(self, r: httpx.Response) -> None:
        """The credential of a registration's answer: ``{"credential": ...}`` (200), or none
        from a manager that gives none (204): then the shared token goes on serving."""
        if r.status_code == 204 or not r.content:
            return
        try:
            credential = r.json().get("credential")
        except (ValueError, AttributeError):
            credential = None
        if isinstance(credential, str) and credential:
            self.credential = credential
        else:
            log.warning("registration answer without a credential: %.200s", r.text)

    async def _reregister(self, credential: str | None) -> None:
        """Registers again after a request with ``credential`` was refused, unless another
        task did so meanwhile."""
        async with self._registering:
            if self.credential == credential:
                await self._register()

    async def _heartbeat(self) -> None:
        """One heartbeat; registers again when the manager forgot this agent (404) or does not
        accept its credential (401)."""
        credential = self.credential
        try:
            r = await self._http.post(f"/agents/{self.config.name}/heartbeat", headers=self._auth())
        except httpx.HTTPError as e:
            log.warning("heartbeat failed: %s", e)
            return
        if r.status_code in (401, 404):  # e.g. the manager restarted
            log.info("heartbeat answered %s: registering again", r.status_code)
            await self._reregister(credential)
        elif r.status_code >= 300:
            log.warning("heartbeat refused: %s %.200s", r.status_code, r.text)

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat)
            if not await self.backend.ping():
                # Without its engine this agent can neither run nor stop kernels: going silent
                # lets the manager declare it LOST and fail its sessions.
                log.warning("Docker engine not answering; heartbeat withheld")
                continue
            await self._heartbeat()

    async def _report(self, ev: KernelExit) -> None:
        """Hands one kernel exit to the manager, retrying until it has it (registering again
        when it does not accept this agent's credential)."""
        delay = 0.2
        while True:
            credential = self.credential
            try:
                r = await self._http.post(
                    f"/agents/{self.config.name}/events", json=ev.model_dump(), headers=self._auth()
                )
                if r.status_code in (401, 404):  # then try again
                    await self._reregister(credential)
                elif r.status_code < 500:
                    if r.status_code >= 300:
                        log.warning("kernel exit refused: %s %.200s", r.status_code, r.text)
                    return
            except httpx.HTTPError as e:
                log.warning("reporting a kernel exit failed: %s", e)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _forward_events(self) -> None:
        while True:
            await self._report(await self._events.get())

    async def run(self) -> None:
        await self.backend.start(on_exit=self._on_exit)
        app = create_agent_app(self.backend, self.config.token)
        server = uvicorn.Server(
            uvicorn.Config(
                app,
                host=self.config.listen_host,
                port=self.config.listen_port,
                log_level="warning",
                ssl_certfile=str(self.config.tls_cert) if self.config.tls_cert else None,
                ssl_keyfile=str(self.config.tls_key) if self.config.tls_key else None,
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
