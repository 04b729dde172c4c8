"""The manager in-process: the real FastAPI app driven through httpx's ASGI transport, with
:class:`FakeAgent` agents and SQLite in a temporary directory. No Docker engine is used:
``DOCKER_HOST`` points at nothing while these tests run."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tests.inprocess.fake_agent import FakeAgent
from troupe.api.agent import AgentBackend
from troupe.manager.app import create_app
from troupe.manager.config import ServerConfig

IMAGE = "troupe/base:0.1.0"


class Harness:
    def __init__(self, tmp: Path, **config: Any) -> None:
        settings: dict[str, Any] = {
            "data_dir": tmp / "data",
            "config_dir": tmp / "config",
            "subnet_pool": "10.99.0.0/16",
            "create_timeout": 5.0,
            "agent_timeout": 1.0,
            "agent_token": "agent-secret",
        }
        self.config = ServerConfig(**{**settings, **config})
        self.local = FakeAgent("local")
        self.agents: dict[str, AgentBackend] = {"local": self.local}
        #: fakes standing in for agents on other hosts, made when they register
        self.remotes: dict[str, FakeAgent] = {}
        #: agent name -> the credential its last registration answered
        self.credentials: dict[str, str] = {}
        self.app: FastAPI | None = None
        self._life: Any = None
        self.client: httpx.AsyncClient = httpx.AsyncClient()

    def remote(self, name: str, address: str, token: str) -> AgentBackend:
        agent = self.remotes.setdefault(name, FakeAgent(name, address=address))
        agent.address = address
        return agent

    async def start(self) -> None:
        self.app = create_app(self.config, self.agents, remote=self.remote)
        self._life = self.app.router.lifespan_context(self.app)
        await self._life.__aenter__()
        key = json.loads(self.config.credentials_file.read_text())["api_key"]
        self.client = self.user_client(key)

    def user_client(self, key: str) -> httpx.AsyncClient:
        assert self.app is not None
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app),
            base_url="http://troupe.test/v1",
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        )

    def agent_client(self, token: str = "agent-secret") -> httpx.AsyncClient:
        return self.user_client(token)

    def credential_client(self, name: str) -> httpx.AsyncClient:
        """A client speaking for agent ``name`` (its credential, for heartbeats and events)."""
        return self.user_client(self.credentials[name])

    async def stop(self) -> None:
        await self.client.aclose()
        if self._life is not None:
            await self._life.__aexit__(None, None, None)
            self._life = None

    async def settle(self, timeout: float = 2) -> None:
        """Waits until the scheduler took its last wake-up (e.g. of a registration). Stopping
        the manager at that very moment can hang: Python 3.11's ``asyncio.wait_for`` in the
        scheduler loop swallows a cancellation that meets a wake-up."""
        assert self.app is not None
        wake: asyncio.Event = self.app.state.registry._wake
        await eventually(lambda: not wake.is_set(), timeout)

    async def restart(self) -> None:
        """A manager restart: the same database and agents, a new app and registry."""
        await self.stop()
        await self.start()

    # -- helpers ---------------------------------------------------------------------
    async def create(self, name: str = "s", expect: int = 201, **body: Any) -> dict[str, Any]:
        body = {"name": name, "image": IMAGE, **body}
        r = await self.client.post("/sessions", json=body)
        assert r.status_code == expect, r.text
        return dict(r.json())

    async def get(self, ref: str) -> dict[str, Any]:
        r = await self.client.get(f"/sessions/{ref}")
        assert r.status_code == 200, r.text
        return dict(r.json())

    async def wait(self, ref: str, until: str = "running", timeout: float = 10) -> dict[str, Any]:
        r = await self.client.get(
            f"/sessions/{ref}/wait", params={"until": until, "timeout": timeout}
        )
        assert r.status_code == 200, r.text
        return dict(r.json())

    async def wait_status(self, ref: str, *statuses: str, timeout: float = 10) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            s = await self.get(ref)
            if s["status"] in statuses or time.monotonic() > deadline:
                assert s["status"] in statuses, s
                return s
            await asyncio.sleep(0.02)

    async def register(self, name: str, **cap: Any) -> httpx.AsyncClient:
        """Registers an agent of another host (a fake behind the remote factory); returns a
        client that speaks for it (its new credential) for heartbeats and events."""
        c = self.agent_client()
        body = {
            "name": name,
            "cpu": 4,
            "mem": 8 * 1024**3,
            "swarm_manager": True,
            "data_marker": "shared",
            "address": f"http://{name}.test:6011",
            **cap,
        }
        held = self.credentials.get(name)
        headers = {"X-Troupe-Agent-Credential": held} if held else {}
        r = await c.post("/agents/register", json=body, headers=headers)
        assert r.status_code == 200, r.text
        self.credentials[name] = r.json()["credential"]
        self.remotes[name].image_names.add(IMAGE)
        await c.aclose()
        return self.credential_client(name)


async def eventually(check: Callable[[], bool], timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


#: The ``make_manager`` fixture's type.
MakeManager = Callable[..., Awaitable[Harness]]


@pytest.fixture
async def make_manager(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Callable[..., Awaitable[Harness]]]:
    """A factory of started harnesses with other settings (e.g. ``create_timeout=1.0``)."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    made: list[Harness] = []

    async def make(**config: Any) -> Harness:
        h = Harness(tmp_path / f"h{len(made)}", **config)
        made.append(h)
        await h.start()
        return h

    try:
        yield make
    finally:
        for h in made:
            await h.stop()


@pytest.fixture
async def manager(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Harness]:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    h = Harness(tmp_path)
    await h.start()
    try:
        yield h
    finally:
        await h.stop()
