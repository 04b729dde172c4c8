"""Requests run by the app itself over ASGI, with a client that can "go away" mid-answer
(httpx's ASGI transport cannot: it reads whole answers)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from typing import Any

import httpx

from tests.inprocess.conftest import Harness


def key_of(client: httpx.AsyncClient) -> str:
    return str(client.headers["authorization"]).removeprefix("Bearer ")


class AsgiHttp:
    """One HTTP request run by the app itself; the client "goes away" on :meth:`leave`."""

    def __init__(
        self,
        h: Harness,
        method: str,
        path: str,
        query: str = "",
        key: str | None = None,
        accept: str | None = None,
    ) -> None:
        assert h.app is not None
        headers = [(b"host", b"troupe.test")]
        if accept:
            headers.append((b"accept", accept.encode()))
        if key:
            headers.append((b"authorization", f"Bearer {key}".encode()))
        self.scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 50000),
            "server": ("troupe.test", 80),
        }
        self.app = h.app
        self.sent: list[dict[str, Any]] = []
        self._gone = asyncio.Event()
        self._body_sent = False
        self.task: asyncio.Task[None] | None = None

    async def _receive(self) -> dict[str, Any]:
        if not self._body_sent:
            self._body_sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: MutableMapping[str, Any]) -> None:
        self.sent.append(dict(message))

    def start(self) -> AsgiHttp:
        self.task = asyncio.create_task(self.app(self.scope, self._receive, self._send))
        return self

    def leave(self) -> None:
        self._gone.set()

    @property
    def started(self) -> dict[str, Any] | None:
        return next((m for m in self.sent if m["type"] == "http.response.start"), None)

    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")


class AsgiWebSocket:
    """One WebSocket session run by the app itself."""

    def __init__(self, h: Harness, path: str, query: str = "", key: str | None = None) -> None:
        assert h.app is not None
        headers = [(b"host", b"troupe.test")]
        if key:
            headers.append((b"authorization", f"Bearer {key}".encode()))
        self.scope: dict[str, Any] = {
            "type": "websocket",
            "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": "1.1",
            "scheme": "ws",
            "path": path,
            "raw_path": path.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 50001),
            "server": ("troupe.test", 80),
            "subprotocols": [],
        }
        self.app = h.app
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.inbox.put_nowait({"type": "websocket.connect"})
        self.sent: list[dict[str, Any]] = []
        self.closed = asyncio.Event()
        self.task = asyncio.create_task(self.app(self.scope, self.inbox.get, self._send))

    async def _send(self, message: MutableMapping[str, Any]) -> None:
        self.sent.append(dict(message))
        if message["type"] == "websocket.close":
            self.closed.set()

    def send_bytes(self, data: bytes) -> None:
        self.inbox.put_nowait({"type": "websocket.receive", "bytes": data})

    async def close_code(self, timeout: float = 5) -> int:
        await asyncio.wait_for(self.closed.wait(), timeout)
        await asyncio.wait_for(self.task, timeout)
        return int(next(m for m in self.sent if m["type"] == "websocket.close").get("code", 1000))

    def texts(self) -> list[Any]:
        return [json.loads(m["text"]) for m in self.sent if m.get("text")]


# -- L1: long requests and the per-user stream limit ------------------------------------------
