"""Finding N5 (docs/reliability.md): the agent acts only on troupe kernels, as ``work`` or
``root``; checked through the agent's HTTP face against a fake engine (no Docker needed)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from aiodocker.exceptions import DockerError
from fastapi import FastAPI

from troupe.agent.app import create_agent_app
from troupe.agent.docker_backend import DockerAgent
from troupe.agent.ownership import Kernels, check_user
from troupe.api.errors import Invalid, NotFound

TOKEN = "t"
KERNEL = "a" * 64
OTHER = "b" * 64  # someone else's container on the same engine
LABELS = {KERNEL: {"troupe.session": "s", "troupe.kernel": "k"}, OTHER: {"app": "db"}}
NAMES = {"kernel-name": KERNEL, "other-name": OTHER}


class FakeExec:
    async def inspect(self) -> dict[str, Any]:
        return {"ExitCode": 0}

    @contextlib.asynccontextmanager
    async def _stream(self) -> AsyncIterator[Any]:
        class Stream:
            async def read_out(self) -> None:
                return None

        yield Stream()

    def start(self, detach: bool = False) -> Any:
        return self._stream()


class FakeContainer:
    def __init__(self, engine: FakeEngine, ref: str) -> None:
        self.engine, self.ref = engine, ref

    def _id(self) -> str:
        cid = NAMES.get(self.ref, self.ref)
        if cid not in self.engine.containers:
            raise DockerError(404, {"message": f"No such container: {self.ref}"})
        return cid

    async def show(self) -> dict[str, Any]:
        self.engine.shown.append(self.ref)
        cid = self._id()
        return {"Id": cid, "Config": {"Labels": LABELS[cid]}}

    async def exec(self, cmd: list[str], **kw: Any) -> FakeExec:
        self.engine.execs.append((self._id(), kw["user"]))
        return FakeExec()


class FakeEngine:
    def __init__(self) -> None:
        self.containers = {KERNEL, OTHER}
        self.shown: list[str] = []
        self.execs: list[tuple[str, str]] = []

    def container(self, ref: str) -> FakeContainer:
        return FakeContainer(self, ref)


class FakeDocker:
    def __init__(self) -> None:
        self.engine = FakeEngine()
        self.containers = self.engine


@pytest.fixture
def agent() -> Iterator[DockerAgent]:
    a = DockerAgent("x")
    a._docker = FakeDocker()  # type: ignore[assignment]
    yield a


def engine(a: DockerAgent) -> FakeEngine:
    return a.docker.engine  # type: ignore[attr-defined,no-any-return]


def test_only_work_and_root_may_run_commands() -> None:
    check_user("work")
    check_user("root")
    for user in ("nobody", "0", "1000", "root:root", "0:0", "work:0", "", "ROOT", " root"):
        with pytest.raises(Invalid, match="user: must be 'work' or 'root'"):
            check_user(user)


async def test_a_container_without_troupe_labels_is_not_a_kernel(agent: DockerAgent) -> None:
    kernels = agent.kernels
    assert await kernels.resolve(KERNEL) == KERNEL
    assert await kernels.resolve("kernel-name") == KERNEL  # a name: what the engine says it is
    for ref in (OTHER, "other-name", "c" * 64):
        with pytest.raises(NotFound):
            await kernels.resolve(ref)
    # a kernel's full id is cached, a name never (a name can be given to a new container)
    engine(agent).shown.clear()
    await kernels.resolve(KERNEL)
    await kernels.resolve("kernel-name")
    assert engine(agent).shown == ["kernel-name"]


async def test_a_removed_kernel_is_asked_about_again(agent: DockerAgent) -> None:
    kernels: Kernels = agent.kernels
    await kernels.resolve(KERNEL)
    engine(agent).containers.discard(KERNEL)
    with pytest.raises(NotFound):  # the engine refuses the exec: the kernel is forgotten
        await agent.open_exec(KERNEL, ["true"])
    assert KERNEL not in kernels
    with pytest.raises(NotFound):
        await kernels.resolve(KERNEL)


async def refused(app: FastAPI, path: str) -> int:
    """The HTTP status a WebSocket was refused with, before it was accepted."""
    url = httpx.URL(path)
    scope = {
        "type": "websocket",
        "asgi": {"version": "3.0"},
        "path": url.path,
        "raw_path": url.raw_path.split(b"?")[0],
        "query_string": url.query,
        "headers": [(b"authorization", f"Bearer {TOKEN}".encode())],
        "subprotocols": [],
        "extensions": {"websocket.http.response": {}},
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    async def send(msg: dict[str, Any]) -> None:
        sent.append(msg)

    await app(scope, receive, send)
    assert sent[0]["type"] == "websocket.http.response.start", sent
    return int(sent[0]["status"])


async def test_every_agent_endpoint_refuses_other_containers_and_users(
    agent: DockerAgent,
) -> None:
    app = create_agent_app(agent, TOKEN)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    prefix = "/agent/v1/containers"
    transport = httpx.ASGITransport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://a", headers=auth) as client:
        for ref in (OTHER, "other-name"):
            r = await client.get(f"{prefix}/{ref}/logs")
            assert r.status_code == 404 and "not a troupe kernel" in r.text, r.text
            r = await client.post(f"{prefix}/{ref}/exec", json={"command": ["id"], "user": "root"})
            assert r.status_code == 404 and "not a troupe kernel" in r.text, r.text
            r = await client.post("/agent/v1/go", json={"container_id": ref})
            assert r.status_code == 404 and "not a troupe kernel" in r.text, r.text
            r = await client.post(
                "/agent/v1/ready", json={"containers": {"main1": ref}, "hosts": [], "timeout": 1}
            )
            assert r.status_code == 404, r.text
            for path in (f"{ref}/pipe?cmd=id&user=root", f"{ref}/shell?user=root"):
                assert await refused(app, f"{prefix}/{path}") == 404
        for user in ("nobody", "0", "1000", "0:0"):
            r = await client.post(f"{prefix}/{KERNEL}/exec", json={"command": ["id"], "user": user})
            assert r.status_code == 422 and "user: must be" in r.text, r.text
            for path in (f"{KERNEL}/pipe?cmd=id&user={user}", f"{KERNEL}/shell?user={user}"):
                assert await refused(app, f"{prefix}/{path}") == 422
        r = await client.post(f"{prefix}/{KERNEL}/exec", json={"command": ["id"], "user": "root"})
        assert r.status_code == 200, r.text
    assert engine(agent).execs == [(KERNEL, "root")]  # nothing else ever reached the engine
