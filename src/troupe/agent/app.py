"""HTTP face of an agent on another host: the manager's requests, authenticated with the
agent token, served by the same :class:`DockerAgent` the embedded server uses in-process."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, HTTPException, Request, WebSocket
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel

from troupe.agent.base import AgentError, ExecExit
from troupe.agent.docker_backend import DockerAgent
from troupe.api.agent import AgentCapacity, KernelSpec, KernelStarted, NetworkSpec
from troupe.api.models import ImageInfo
from troupe.api.shell import serve_shell

PREFIX = "/agent/v1"


class ReadyRequest(BaseModel):
    containers: dict[str, str]
    hosts: list[str]
    timeout: float


class ContainerRequest(BaseModel):
    container_id: str


class AgentExecRequest(BaseModel):
    command: list[str]
    user: str = "work"


def create_agent_app(backend: DockerAgent, token: str) -> FastAPI:
    def auth(authorization: Annotated[str, Header()] = "") -> None:
        if authorization != f"Bearer {token}":
            raise HTTPException(401, "invalid agent token")

    app = FastAPI(title="troupe agent", dependencies=[Depends(auth)])

    @app.exception_handler(AgentError)
    async def _agent_error(_: Request, e: AgentError) -> JSONResponse:
        return JSONResponse({"error": {"message": str(e), "kernel": e.kernel}}, status_code=409)

    @app.get(f"{PREFIX}/capacity")
    async def capacity() -> AgentCapacity:
        return await backend.capacity()

    @app.get(f"{PREFIX}/images")
    async def images() -> list[ImageInfo]:
        return await backend.images()

    @app.get(f"{PREFIX}/images/exists")
    async def has_image(name: str) -> bool:
        return await backend.has_image(name)

    @app.get(f"{PREFIX}/subnets")
    async def subnets() -> list[str]:
        return await backend.used_subnets()

    @app.post(f"{PREFIX}/networks")
    async def create_network(spec: NetworkSpec) -> None:
        await backend.create_network(spec)

    @app.delete(f"{PREFIX}/sessions/{{session_id}}/networks")
    async def remove_networks(session_id: str) -> None:
        await backend.remove_session_networks(session_id)

    @app.post(f"{PREFIX}/kernels")
    async def create_kernels(specs: list[KernelSpec]) -> list[KernelStarted]:
        return await backend.create_kernels(specs)

    @app.post(f"{PREFIX}/ready")
    async def ready(req: ReadyRequest) -> None:
        await backend.wait_ready(req.containers, req.hosts, req.timeout)

    @app.post(f"{PREFIX}/go")
    async def go(req: ContainerRequest) -> None:
        await backend.signal_go(req.container_id)

    @app.delete(f"{PREFIX}/sessions/{{session_id}}/kernels")
    async def remove_kernels(session_id: str) -> dict[str, str]:
        return await backend.remove_kernels(session_id)

    @app.get(f"{PREFIX}/kernels")
    async def kernels() -> list[dict[str, Any]]:
        return await backend.list_kernels()

    @app.get(f"{PREFIX}/network-sessions")
    async def network_sessions() -> list[str]:
        return sorted(await backend.list_session_ids_with_networks())

    @app.get(f"{PREFIX}/containers/{{container_id}}/logs")
    async def logs(container_id: str, follow: bool = False) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            async for line in backend.logs(container_id, follow=follow):
                yield (line if line.endswith("\n") else line + "\n").encode()

        return StreamingResponse(body(), media_type="text/plain")

    @app.post(f"{PREFIX}/containers/{{container_id}}/exec")
    async def exec_(container_id: str, req: AgentExecRequest) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            async for item in backend.exec_stream(container_id, req.command, req.user):
                if isinstance(item, ExecExit):
                    msg: dict[str, Any] = {"exit_code": item.exit_code}
                else:
                    msg = {"data": base64.b64encode(item.data).decode()}
                yield json.dumps(msg).encode() + b"\n"

        return StreamingResponse(body(), media_type="application/x-ndjson")

    @app.websocket(f"{PREFIX}/containers/{{container_id}}/shell")
    async def shell(ws: WebSocket, container_id: str, user: str = "work") -> None:
        await ws.accept()
        async with backend.shell(container_id, user) as sh:
            await serve_shell(ws, sh)

    return app
