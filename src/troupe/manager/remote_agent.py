"""The manager's handle on an agent of another host: :class:`AgentBackend` over HTTP.

Errors come back in the shared shape and are raised as the same domain errors the agent
raised (:func:`troupe.api.errors.from_wire`); a transport failure is :class:`AgentFailed`.
An agent that serves HTTPS (``troupe agent --tls-cert``) is verified with the manager's
``--agent-ca`` (:func:`tls_context`), for requests and terminals (``wss://``) alike.
"""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
from websockets.asyncio.client import ClientConnection, connect

from troupe.api import exec as wire_exec
from troupe.api.agent import (
    AGENT_PREFIX,
    AgentCapacity,
    ExitHandler,
    KernelRestarted,
    KernelSpec,
    KernelStarted,
    KernelState,
    NetworkSpec,
    ReadyTimes,
)
from troupe.api.errors import AgentFailed, from_wire
from troupe.api.exec import ExecItem
from troupe.api.metrics import AgentMetrics
from troupe.api.models import ImageInfo
from troupe.api.pipe import EOF_FRAME, STDERR, STDOUT, control
from troupe.api.registries import PullProgress, PullRequest


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


class RemotePipe:
    """The manager's end of an agent's pipe (:mod:`troupe.api.pipe`)."""

    def __init__(self, ws: ClientConnection) -> None:
        self._ws = ws
        self._code = -1

    async def read(self) -> tuple[int, bytes] | None:
        async for msg in self._ws:
            if isinstance(msg, bytes):
                return STDOUT, msg
            data = control(msg)
            if isinstance(data.get("stderr"), str):
                return STDERR, str(data["stderr"]).encode()
            with contextlib.suppress(ValueError, TypeError):
                self._code = int(data["exit_code"])
        return None

    async def write(self, data: bytes) -> None:
        await self._ws.send(data)

    async def close_input(self) -> None:
        await self._ws.send(EOF_FRAME)

    async def exit_code(self) -> int:
        return self._code


def _raise_for(agent: str, resp: httpx.Response) -> None:
    if resp.status_code < 400:
        return
    try:
        body = resp.json()
    except ValueError:
        body = None
    raise from_wire(resp.status_code, body, f"agent {agent}: HTTP {resp.status_code}")


def tls_context(ca_file: Path | None) -> ssl.SSLContext:
    """Verifies agents' certificates with ``ca_file`` (the system's CAs when None)."""
    return ssl.create_default_context(cafile=str(ca_file) if ca_file else None)


def verifying_with(ca_file: Path | None) -> Callable[[str, str, str], RemoteAgent]:
    """Makes :class:`RemoteAgent` handles that verify HTTPS agents with ``ca_file`` (read
    now: a missing file fails at start, not at an agent's first call)."""
    verify: ssl.SSLContext | bool = tls_context(ca_file) if ca_file else True

    def remote(name: str, address: str, token: str) -> RemoteAgent:
        return RemoteAgent(name, address, token, verify=verify)

    return remote


class RemoteAgent:
    def __init__(
        self, name: str, address: str, token: str, verify: ssl.SSLContext | bool = True
    ) -> None:
        """``verify``: how an ``https://`` agent's certificate is checked (httpx's meaning:
        an SSL context, True for the system's CAs)."""
        self.name = name
        self.address = address.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self._verify = verify
        self._http = httpx.AsyncClient(
            base_url=self.address + AGENT_PREFIX,
            headers=self._headers,
            timeout=httpx.Timeout(30.0),
            verify=verify,
        )

    async def start(self, on_exit: ExitHandler | None = None) -> None:
        """Nothing to start: a remote agent reports kernel exits to the manager's API."""

    async def close(self) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, timeout: float | None = 30.0, **kw: Any) -> Any:
        try:
            resp = await self._http.request(method, path, timeout=timeout, **kw)
        except httpx.HTTPError as e:
            raise AgentFailed(f"agent {self.name} unreachable: {e!r}") from e
        _raise_for(self.name, resp)
        return resp.json() if resp.content else None

    async def capacity(self) -> AgentCapacity:
        return AgentCapacity.model_validate(await self._call("GET", "/capacity"))

    async def images(self) -> list[ImageInfo]:
        return [ImageInfo.model_validate(x) for x in await self._call("GET", "/images")]

    async def has_image(self, name: str) -> bool:
        return bool(await self._call("GET", "/images/exists", params={"name": name}))

    async def image_labels(self, name: str) -> dict[str, str]:
        labels = await self._call("GET", "/images/labels", params={"name": name})
        return {str(k): str(v) for k, v in (labels or {}).items()}

    async def pull_image(self, req: PullRequest) -> AsyncIterator[PullProgress]:
        """The agent's progress lines; an error line is raised as its domain error."""
        try:
            async with self._http.stream(
                "POST", "/images/pull", json=req.model_dump(), timeout=None
            ) as resp:
                if resp.status_code >= 400:
                    await resp.aread()
                    _raise_for(self.name, resp)
                async for line in resp.aiter_lines():
                    if not line.strip():
                        continue
                    msg = json.loads(line)
                    if "error" in msg:
                        raise from_wire(0, msg)
                    yield PullProgress.model_validate(msg)
        except httpx.HTTPError as e:
            raise AgentFailed(f"agent {self.name} unreachable: {e!r}") from e

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

    async def restart_kernels(self, specs: Sequence[KernelSpec]) -> list[KernelRestarted]:
        data = await self._call(
            "POST", "/kernels/restart", json=[s.model_dump() for s in specs], timeout=300
        )
        return [KernelRestarted.model_validate(x) for x in data]

    async def wait_ready(
        self, containers: dict[str, str], hosts: list[str], timeout: float
    ) -> dict[str, ReadyTimes]:
        data = await self._call(
            "POST",
            "/ready",
            timeout=timeout + 30,
            json={"containers": containers, "hosts": hosts, "timeout": timeout},
        )
        return {str(h): {str(k): str(v) for k, v in t.items()} for h, t in (data or {}).items()}

    async def signal_go(self, container_id: str) -> None:
        await self._call("POST", "/go", json={"container_id": container_id})

    async def remove_kernels(self, session_id: str) -> dict[str, str]:
        return dict(await self._call("DELETE", f"/sessions/{session_id}/kernels", timeout=120))

    async def list_kernels(self) -> list[KernelState]:
        return [KernelState.model_validate(x) for x in await self._call("GET", "/kernels")]

    async def list_session_ids_with_networks(self) -> set[str]:
        return set(await self._call("GET", "/network-sessions"))

    async def metrics(self, since: float | None = None) -> AgentMetrics:
        params = {"since": repr(since)} if since is not None else {}
        return AgentMetrics.model_validate(await self._call("GET", "/metrics", params=params))

    async def logs(self, container_id: str, follow: bool = False) -> AsyncIterator[str]:
        try:
            async with self._http.stream(
                "GET", f"/containers/{container_id}/logs", params={"follow": follow}, timeout=None
            ) as resp:
                if resp.status_code >= 400:
                    await resp.aread()
                    _raise_for(self.name, resp)
                async for line in resp.aiter_lines():
                    yield line + "\n"
        except httpx.HTTPError as e:
            raise AgentFailed(f"agent {self.name} unreachable: {e!r}") from e

    async def exec_stream(
        self, container_id: str, command: list[str], user: str = "work"
    ) -> AsyncIterator[ExecItem]:
        try:
            async with self._http.stream(
                "POST",
                f"/containers/{container_id}/exec",
                json={"command": command, "user": user},
                timeout=None,
            ) as resp:
                if resp.status_code >= 400:
                    await resp.aread()
                    _raise_for(self.name, resp)
                async for line in resp.aiter_lines():
                    item = wire_exec.decode(line)
                    if item is not None:
                        yield item
        except httpx.HTTPError as e:
            raise AgentFailed(f"agent {self.name} unreachable: {e!r}") from e

    @contextlib.asynccontextmanager
    async def shell(self, container_id: str, user: str = "work") -> AsyncIterator[RemoteShell]:
        url, tls = self._ws_url(f"/containers/{container_id}/shell")
        async with connect(f"{url}?user={user}", additional_headers=self._headers, **tls) as ws:
            yield RemoteShell(ws)

    def _ws_url(self, path: str) -> tuple[str, dict[str, Any]]:
        """``path``'s WebSocket URL on the agent and the TLS arguments of ``connect``."""
        url = self.address.replace("http", "ws", 1) + AGENT_PREFIX + path
        tls: dict[str, Any] = {}
        if url.startswith("wss://"):
            if isinstance(self._verify, ssl.SSLContext):
                tls["ssl"] = self._verify
            elif not self._verify:
                tls["ssl"] = ssl._create_unverified_context()
        return url, tls

    @contextlib.asynccontextmanager
    async def pipe(
        self, container_id: str, command: list[str], user: str = "work"
    ) -> AsyncIterator[RemotePipe]:
        """The agent's refusal (no such container: 404, ...) is raised as its domain error."""
        from websockets.exceptions import InvalidStatus, WebSocketException

        url, tls = self._ws_url(f"/containers/{container_id}/pipe")
        query = urlencode([("user", user), *(("cmd", c) for c in command)])
        try:
            # (no per-message compression: a tunnel's bytes are the app's, often compressed
            # already; deflating every frame costs CPU on both ends for little gain)
            ws = await connect(
                f"{url}?{query}", additional_headers=self._headers, compression=None, **tls
            )
        except InvalidStatus as e:
            body: Any = None
            with contextlib.suppress(ValueError):
                body = json.loads(e.response.body or b"")
            status = e.response.status_code
            raise from_wire(status, body, f"agent {self.name}: HTTP {status}") from None
        except (OSError, WebSocketException, TimeoutError) as e:
            raise AgentFailed(f"agent {self.name} unreachable: {e!r}") from e
        async with ws:
            yield RemotePipe(ws)
