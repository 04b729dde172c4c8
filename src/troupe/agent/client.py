"""The manager's handle on an agent of another host: :class:`AgentBackend` over HTTP."""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect

from troupe.agent.app import PREFIX
from troupe.agent.base import AgentError, ExecExit, ExecOutput, ExitHandler
from troupe.api.agent import AgentCapacity, KernelSpec, KernelStarted, NetworkSpec
from troupe.api.models import ImageInfo


class RemoteShell:
    def __init__(self, ws: ClientConnection) -> None:
        self._ws = ws
        self._code = -1

    async def read(self) -> bytes | None:
        async for msg in self._ws:
            if isinstance(msg, bytes):
                return msg
            with contextlib.suppress(ValueError, KeyError, TypeError):
                self._code = int(json.loads(msg)["exit_code"])
        return None

    async def write(self, data: bytes) -> None:
        await self._ws.send(data)

    async def resize(self, rows: int, cols: int) -> None:
        await self._ws.send(json.dumps({"resize": [rows, cols]}))

    async def exit_code(self) -> int:
        return self._code


class RemoteAgent:
    def __init__(self, name: str, address: str, token: str) -> None:
        self.name = name
        self.address = address.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self._http = httpx.AsyncClient(
            base_url=self.address + PREFIX, headers=self._headers, timeout=httpx.Timeout(30.0)
        )

    async def start(self, on_exit: ExitHandler | None = None) -> None:
        """Nothing to start: a remote agent reports kernel exits to the manager's API."""

    async def close(self) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, timeout: float | None = 30.0, **kw: Any) -> Any:
        try:
            resp = await self._http.request(method, path, timeout=timeout, **kw)
        except httpx.HTTPError as e:
            raise AgentError(f"agent {self.name} unreachable: {e!r}") from e
        if resp.status_code >= 400:
            try:
                err = resp.json()["error"]
                raise AgentError(err["message"], kernel=err.get("kernel"))
            except (ValueError, KeyError, TypeError):
                raise AgentError(
                    f"agent {self.name}: HTTP {resp.status_code} {resp.text}"
                ) from None
        return resp.json() if resp.content else None

    async def capacity(self) -> AgentCapacity:
        return AgentCapacity.model_validate(await self._call("GET", "/capacity"))

    async def images(self) -> list[ImageInfo]:
        return [ImageInfo.model_validate(x) for x in await self._call("GET", "/images")]

    async def has_image(self, name: str) -> bool:
        return bool(await self._call("GET", "/images/exists", params={"name": name}))

    async def used_subnets(self) -> list[str]:
        return list(await self._call("GET", "/subnets"))

    async def create_network(self, spec: NetworkSpec) -> None:
        await self._call("POST", "/networks", json=spec.model_dump())

    async def remove_session_networks(self, session_id: str) -> None:
        await self._call("DELETE", f"/sessions/{session_id}/networks", timeout=60)

    async def create_kernels(self, specs: Sequence[KernelSpec]) -> list[KernelStarted]:
        data = await self._call(
            "POST", "/kernels", json=[s.model_dump() for s in specs], timeout=300
        )
        return [KernelStarted.model_validate(x) for x in data]

    async def wait_ready(
        self, containers: dict[str, str], hosts: list[str], timeout: float
    ) -> None:
        await self._call(
            "POST",
            "/ready",
            timeout=timeout + 30,
            json={"containers": containers, "hosts": hosts, "timeout": timeout},
        )

    async def signal_go(self, container_id: str) -> None:
        await self._call("POST", "/go", json={"container_id": container_id})

    async def remove_kernels(self, session_id: str) -> dict[str, str]:
        return dict(await self._call("DELETE", f"/sessions/{session_id}/kernels", timeout=120))

    async def list_kernels(self) -> list[dict[str, Any]]:
        return list(await self._call("GET", "/kernels"))

    async def list_session_ids_with_networks(self) -> set[str]:
        return set(await self._call("GET", "/network-sessions"))

    async def logs(self, container_id: str, follow: bool = False) -> AsyncIterator[str]:
        async with self._http.stream(
            "GET", f"/containers/{container_id}/logs", params={"follow": follow}, timeout=None
        ) as resp:
            async for line in resp.aiter_lines():
                yield line + "\n"

    async def exec_stream(
        self, container_id: str, command: list[str], user: str = "work"
    ) -> AsyncIterator[ExecOutput | ExecExit]:
        async with self._http.stream(
            "POST",
            f"/containers/{container_id}/exec",
            json={"command": command, "user": user},
            timeout=None,
        ) as resp:
            if resp.status_code >= 400:
                await resp.aread()
                raise AgentError(f"agent {self.name}: exec failed: {resp.text}")
            async for line in resp.aiter_lines():
                if not line:
                    continue
                msg = json.loads(line)
                if "exit_code" in msg:
                    yield ExecExit(int(msg["exit_code"]))
                else:
                    yield ExecOutput(base64.b64decode(msg["data"]))

    @contextlib.asynccontextmanager
    async def shell(self, container_id: str, user: str = "work") -> AsyncIterator[RemoteShell]:
        url = self.address.replace("http", "ws", 1) + f"{PREFIX}/containers/{container_id}/shell"
        async with connect(f"{url}?user={user}", additional_headers=self._headers) as ws:
            yield RemoteShell(ws)
