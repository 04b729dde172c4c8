"""HTTP face of an agent on another host: the manager's requests, authenticated with the
agent token, served by the same :class:`DockerAgent` the embedded server uses in process.

Paths and bodies are what :mod:`troupe.manager.remote_agent` sends; errors leave in the shared
shape (:mod:`troupe.api.edge`), so the manager raises the very domain error raised here.
Streams (logs, exec) are opened before the response starts, so an unknown container is a 404,
not a broken 200. A terminal that cannot open is refused the same way, before the WebSocket is
accepted (an HTTP answer with the shared body).
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Callable
from typing import Annotated

from fastapi import Depends, FastAPI, Header, Query, WebSocket
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from troupe.agent.docker_backend import DockerAgent
from troupe.api import edge
from troupe.api import exec as wire_exec
from troupe.api.agent import (
    AGENT_PREFIX,
    AgentCapacity,
    KernelRestarted,
    KernelSpec,
    KernelStarted,
    KernelState,
    NetworkSpec,
    ReadyTimes,
)
from troupe.api.errors import TroupeError, Unauthorized
from troupe.api.metrics import AgentMetrics
from troupe.api.models import ImageInfo
from troupe.api.pipe import serve_pipe
from troupe.api.registries import PullRequest
from troupe.api.shell import serve_shell


class ReadyRequest(BaseModel):
    containers: dict[str, str]
    hosts: list[str]
    timeout: float


class ContainerRequest(BaseModel):
    container_id: str


class AgentExecRequest(BaseModel):
    command: list[str]
    user: str = "work"


def token_check(token: str) -> Callable[[str], None]:
    """A dependency that lets through only ``Authorization: Bearer <token>``.

    Compared in constant time on the UTF-8 bytes (``compare_digest`` refuses non-ASCII
    text): a header that is not ASCII is simply a wrong one.
    """
    expected = f"Bearer {token}".encode()

    def auth(authorization: Annotated[str, Header()] = "") -> None:
        if not hmac.compare_digest(authorization.encode(), expected):
            raise Unauthorized("invalid agent token")

    return auth


async def _lines(lines: AsyncIterator[str]) -> AsyncIterator[bytes]:
    """One log line per text line, whatever the engine ended it with."""
    async for line in lines:
        yield (line if line.endswith("\n") else line + "\n").encode()


def create_agent_app(backend: DockerAgent, token: str) -> FastAPI:
    app = FastAPI(title="troupe agent", dependencies=[Depends(token_check(token))])
    edge.install(app)

    @app.get(f"{AGENT_PREFIX}/capacity")
    async def capacity() -> AgentCapacity:
        return await backend.capacity()

    @app.get(f"{AGENT_PREFIX}/images")
    async def images() -> list[ImageInfo]:
        return await backend.images()

    @app.get(f"{AGENT_PREFIX}/images/exists")
    async def has_image(name: str) -> bool:
        return await backend.has_image(name)

    @app.get(f"{AGENT_PREFIX}/images/labels")
    async def image_labels(name: str) -> dict[str, str]:
        return await backend.image_labels(name)

    @app.post(f"{AGENT_PREFIX}/images/pull")
    async def pull_image(req: PullRequest) -> StreamingResponse:
        """NDJSON: one progress object a line; a failure ends it with the error shape."""

        async def body() -> AsyncIterator[bytes]:
            try:
                async for p in backend.pull_image(req):
                    yield p.model_dump_json().encode() + b"\n"
            except TroupeError as e:
                yield wire_exec.encode(e)

        return StreamingResponse(body(), media_type=wire_exec.MEDIA_TYPE)

    @app.get(f"{AGENT_PREFIX}/subnets")
    async def subnets() -> list[str]:
        return await backend.used_subnets()

    @app.post(f"{AGENT_PREFIX}/networks")
    async def create_network(spec: NetworkSpec) -> None:
        await backend.create_network(spec)

    @app.delete(f"{AGENT_PREFIX}/sessions/{{session_id}}/networks")
    async def remove_networks(session_id: str) -> None:
        await backend.remove_session_networks(session_id)

    @app.post(f"{AGENT_PREFIX}/kernels")
    async def create_kernels(specs: list[KernelSpec]) -> list[KernelStarted]:
        return await backend.create_kernels(specs)

    @app.post(f"{AGENT_PREFIX}/kernels/restart")
    async def restart_kernels(specs: list[KernelSpec]) -> list[KernelRestarted]:
        return await backend.restart_kernels(specs)

    @app.post(f"{AGENT_PREFIX}/ready")
    async def ready(req: ReadyRequest) -> dict[str, ReadyTimes]:
        return await backend.wait_ready(req.containers, req.hosts, req.timeout)

    @app.post(f"{AGENT_PREFIX}/go")
    async def go(req: ContainerRequest) -> None:
        await backend.signal_go(req.container_id)

    @app.delete(f"{AGENT_PREFIX}/sessions/{{session_id}}/kernels")
    async def remove_kernels(session_id: str) -> dict[str, str]:
        return await backend.remove_kernels(session_id)

    @app.get(f"{AGENT_PREFIX}/kernels")
    async def kernels() -> list[KernelState]:
        return await backend.list_kernels()

    @app.get(f"{AGENT_PREFIX}/metrics")
    async def metrics(since: float | None = None) -> AgentMetrics:
        return await backend.metrics(since)

    @app.get(f"{AGENT_PREFIX}/network-sessions")
    async def network_sessions() -> list[str]:
        return sorted(await backend.list_session_ids_with_networks())

    @app.get(f"{AGENT_PREFIX}/containers/{{container_id}}/logs")
    async def logs(container_id: str, follow: bool = False) -> StreamingResponse:
        lines = await backend.open_logs(container_id, follow=follow)
        return StreamingResponse(_lines(lines), media_type="text/plain")

    @app.post(f"{AGENT_PREFIX}/containers/{{container_id}}/exec")
    async def exec_(container_id: str, req: AgentExecRequest) -> StreamingResponse:
        items = await backend.open_exec(container_id, req.command, req.user)

        async def body() -> AsyncIterator[bytes]:
            try:
                async for item in items:
                    yield wire_exec.encode(item)
            except TroupeError as e:  # the status is sent already: the last line says it
                yield wire_exec.encode(e)

        return StreamingResponse(body(), media_type=wire_exec.MEDIA_TYPE)

    @app.websocket(f"{AGENT_PREFIX}/containers/{{container_id}}/shell")
    async def shell(ws: WebSocket, container_id: str, user: str = "work") -> None:
        async with backend.shell(container_id, user) as sh:
            await ws.accept()
            await serve_shell(ws, sh)

    @app.websocket(f"{AGENT_PREFIX}/containers/{{container_id}}/pipe")
    async def pipe(
        ws: WebSocket, container_id: str, cmd: Annotated[list[str], Query()], user: str = "work"
    ) -> None:
        async with backend.pipe(container_id, cmd, user) as p:
            await ws.accept()
            await serve_pipe(ws, p)

    return app
