"""The app proxy's rules (issue 22), in-process: the manager over ASGI, a fake agent whose
tunnels reach a real HTTP/WebSocket server on loopback (standing in for an app in main1).

What is checked: an app's origin goes to the proxy only and the UI's never; one-time links;
the app cookie (host-only, HttpOnly, SameSite=Lax); requests without it, with another app's or
user's, after a key rotation or the session's destroy, or made by another origin's page are
refused and never reach the app; troupe's cookies and hop-by-hop headers are not forwarded;
bodies stream both ways in bounded memory; tunnels are kept and reused; WebSockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import time
import tracemalloc
from collections.abc import AsyncIterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from tests.inprocess.conftest import Harness, eventually
from tests.inprocess.helpers import running
from troupe.api.pipe import RUNNER_DIR
from troupe.manager.apps import tunnel
from troupe.manager.apps.links import COOKIE, LINK_SECONDS, issue_link, links_of
from troupe.manager.apps.origins import AppDomain, AppTarget
from troupe.manager.config import ServerConfig
from troupe.manager.store.models import Session, User
from troupe.manager.web import signin

PORT = 8888


# -- the app in "main1": a real server on loopback --------------------------------------------
@dataclass
class Upstream:
    """What the app received, and how to reach it."""

    port: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)


def upstream_app(seen: Upstream) -> Starlette:
    async def echo(request: Request) -> Response:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
        seen.requests.append({"path": request.url.path, "headers": request.headers.raw})
        return JSONResponse(
            {
                "method": request.method,
                "path": request.url.path,
                "query": request.url.query,
                "headers": [[k.decode(), v.decode()] for k, v in request.headers.raw],
                "size": size,
            },
            headers={
                "connection": "x-hop",
                "x-hop": "1",
                "keep-alive": "timeout=5",
                "proxy-authenticate": "Basic",
                "set-cookie": "app=1; Path=/",
            },
        )

    async def big(request: Request) -> Response:
        n = int(request.query_params["n"])
        seen.requests.append({"path": "/big"})

        async def chunks() -> AsyncIterator[bytes]:
            block = b"x" * 65536
            left = n
            while left > 0:
                yield block[: min(left, len(block))]
                left -= len(block)

        return StreamingResponse(chunks(), media_type="application/octet-stream")

    async def moved(request: Request) -> Response:
        seen.requests.append({"path": "/moved"})
        response = RedirectResponse("/lab?x=1", 302)
        response.set_cookie("_xsrf", "abc", path="/")
        return response

    async def socket(ws: WebSocket) -> None:
        seen.requests.append({"path": "/ws", "headers": ws.headers.raw})
        offered = ws.scope.get("subprotocols") or []
        await ws.accept(subprotocol=offered[-1] if offered else None)
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            if message.get("text") == "bye":
                await ws.close(code=4321)
                return
            if message.get("text") is not None:
                await ws.send_text("echo:" + message["text"])
            else:
                await ws.send_bytes(b"echo:" + (message.get("bytes") or b""))

    return Starlette(
        routes=[
            Route("/big", big),
            Route("/moved", moved),
            WebSocketRoute("/ws", socket),
            Route("/{path:path}", echo, methods=["GET", "POST", "PUT", "DELETE", "HEAD"]),
        ]
    )


class LoopbackPipe:
    """A tunnel (:class:`troupe.api.pipe.Pipe`) to the loopback app, like relay.sh's."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def read(self) -> tuple[int, bytes] | None:
        data = await self.reader.read(65536)
        return (1, data) if data else None

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def close_input(self) -> None:
        if self.writer.can_write_eof():
            self.writer.write_eof()

    async def exit_code(self) -> int:
        return 0


class RefusedPipe:
    """relay.sh when nothing listens on the port: a diagnostic, then the end."""

    def __init__(self) -> None:
        self.items: list[tuple[int, bytes] | None] = [
            (2, b"main1: nothing accepts connections on port 8888 (Connection refused)\n"),
            None,
        ]

    async def read(self) -> tuple[int, bytes] | None:
        return self.items.pop(0) if self.items else None

    async def write(self, data: bytes) -> None:
        pass

    async def close_input(self) -> None:
        pass

    async def exit_code(self) -> int:
        return 1


@dataclass
class App:
    """A running session with the loopback app on port :data:`PORT` of its main1."""

    h: Harness
    session_id: str
    owner_id: str
    upstream: Upstream
    tunnels: list[list[str]] = field(default_factory=list)
    listening: bool = True

    @property
    def host(self) -> str:
        return f"{PORT}-{self.session_id}.apps.localhost:8090"

    def client(self, cookie: str | None = None, **headers: str) -> httpx.AsyncClient:
        assert self.h.app is not None
        if cookie is not None:
            headers["cookie"] = f"{COOKIE}={cookie}"
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.h.app, client=("10.1.2.3", 5000)),
            base_url=f"http://{self.host}",
            headers=headers,
            timeout=30,
        )

    def link(self) -> str:
        assert self.h.app is not None
        return issue_link(self.h.app.state, self.session_id, self.owner_id, PORT)

    async def enter(self) -> str:
        """Opens a fresh link; the app cookie's value."""
        async with self.client() as c:
            r = await c.get(self.link())
        assert r.status_code == 303, r.text
        return str(r.cookies[COOKIE])


async def owner_of(h: Harness, session_id: str) -> str:
    assert h.app is not None
    async with h.app.state.db() as db:
        s = await db.get(Session, session_id)
        assert s is not None
        return str(s.owner_id)


@contextlib.asynccontextmanager
async def loopback_app() -> AsyncIterator[Upstream]:
    seen = Upstream()
    server = uvicorn.Server(
        uvicorn.Config(upstream_app(seen), host="127.0.0.1", port=0, log_level="warning")
    )
    server.config.lifespan = "off"
    task = asyncio.create_task(server.serve())
    await eventually(lambda: server.started)
    seen.port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield seen
    finally:
        server.should_exit = True
        await task


@pytest.fixture
async def app(manager: Harness) -> AsyncIterator[App]:
    async with loopback_app() as upstream:
        s = await running(manager, "nb")
        a = App(manager, s["id"], await owner_of(manager, s["id"]), upstream)

        @contextlib.asynccontextmanager
        async def pipe(
            container_id: str, command: list[str], user: str = "work"
        ) -> AsyncIterator[Any]:
            a.tunnels.append(command)
            if not a.listening:
                yield RefusedPipe()
                return
            reader, writer = await asyncio.open_connection("127.0.0.1", upstream.port)
            try:
                yield LoopbackPipe(reader, writer)
            finally:
                writer.close()

        manager.local.pipe = pipe  # type: ignore[method-assign]
        yield a


# -- links and cookies -------------------------------------------------------------------------
async def test_a_link_enters_once_and_sets_a_cookie_for_the_apps_host_only(app: App) -> None:
    link = app.link()
    assert link.startswith(f"http://{app.host}/_troupe/enter?t=")
    async with app.client() as c:
        r = await c.get(link)
        assert r.status_code == 303 and r.headers["location"] == "/"
        cookie = r.headers["set-cookie"]
        attributes = {a.strip().split("=")[0].lower() for a in cookie.split(";")[1:]}
        assert cookie.startswith(f"{COOKIE}=")
        assert {"httponly", "path", "max-age", "samesite"} <= attributes
        assert "domain" not in attributes and "secure" not in attributes  # host-only, http
        assert "samesite=lax" in cookie.lower()
        again = await c.get(link)  # used once already
        assert again.status_code == 403 and "used already" in again.text
    async with app.client(str(r.cookies[COOKIE])) as c:
        r = await c.get("/tree?a=1")
    assert r.status_code == 200, r.text
    assert r.json()["path"] == "/tree" and r.json()["query"] == "a=1"
    assert not any(req["path"] == "/_troupe/enter" for req in app.upstream.requests)


async def test_an_expired_link_or_one_of_another_app_is_refused(app: App) -> None:
    assert app.h.app is not None
    links = links_of(app.h.app.state)
    old = links.issue(app.session_id, app.owner_id, PORT, now=time.monotonic() - LINK_SECONDS - 1)
    other_port = links.issue(app.session_id, app.owner_id, 6006)
    async with app.client() as c:
        r = await c.get(old)
        assert r.status_code == 403 and "expired" in r.text
        token = other_port.partition("?t=")[2]  # a TensorBoard link used on Jupyter's origin
        r = await c.get(f"/_troupe/enter?t={token}")
        assert r.status_code == 403
        r = await c.get("/_troupe/enter?t=made-up")
        assert r.status_code == 403
    assert not app.tunnels


async def test_a_request_without_the_cookie_is_refused_and_never_proxied(app: App) -> None:
    key = app.h.client.headers["authorization"]
    async with app.client(authorization=key) as c:  # the API key is no app cookie
        for method, path in [("GET", "/"), ("POST", "/api/kernels"), ("GET", "/v1/sessions")]:
            r = await c.request(method, path)
            assert r.status_code == 401, (method, path, r.text)
            assert "not signed in to this app" in r.text
            assert r.headers["content-type"].startswith("text/html")
    async with app.client(cookie="1700000000.deadbeef") as c:
        assert (await c.get("/")).status_code == 403
    assert not app.tunnels and not app.upstream.requests


async def test_another_users_cookie_is_refused(app: App) -> None:
    r = await app.h.client.post("/users", json={"name": "mallory"})
    assert r.status_code == 201, r.text
    mallory = app.h.user_client(r.json()["api_key"])
    r = await mallory.post("/sessions", json={"name": "hers", "image": "troupe/base:0.1.0"})
    assert r.status_code == 201, r.text
    hers = r.json()["id"]
    await app.h.wait_status(hers, "RUNNING")
    theirs = App(app.h, hers, await owner_of(app.h, hers), app.upstream)
    cookie = await theirs.enter()
    async with app.client(cookie) as c:  # mallory's valid cookie, on the admin's app
        r = await c.get("/")
    assert r.status_code == 403, r.text
    # a link of mallory's session used on the admin's origin
    token = theirs.link().partition("?t=")[2]
    async with app.client() as c:
        assert (await c.get(f"/_troupe/enter?t={token}")).status_code == 403
    assert not app.tunnels


async def test_key_rotation_and_destroy_end_access(app: App) -> None:
    cookie = await app.enter()
    async with app.client(cookie) as c:
        assert (await c.get("/")).status_code == 200
        r = await app.h.client.post("/users/me/rotate")
        assert r.status_code == 200, r.text
        await app.h.client.aclose()
        app.h.client = app.h.user_client(r.json()["api_key"])
        r = await c.get("/")
        assert r.status_code == 403 and "API key" in r.text, r.text
    async with app.client(await app.enter()) as c:  # a new link works with the new key
        assert (await c.get("/")).status_code == 200
        seen = len(app.upstream.requests)
        r = await app.h.client.delete(f"/sessions/{app.session_id}")
        assert r.status_code == 200, r.text
        r = await c.get("/")
        assert r.status_code == 409 and "not RUNNING" in r.text
        assert (await c.get(app.link())).status_code == 409  # a link of a destroyed session
    assert len(app.upstream.requests) == seen


async def test_pages_of_other_origins_are_refused(app: App) -> None:
    cookie = await app.enter()
    evil = "http://evil.example"
    other_app = f"http://6006-{app.session_id}.apps.localhost:8090"
    async with app.client(cookie) as c:
        for headers in (
            {"origin": evil},
            {"origin": other_app},
            {"origin": "null"},  # a sandboxed frame or a data: page
            {"sec-fetch-site": "same-site", "sec-fetch-mode": "cors"},
            {"sec-fetch-site": "cross-site", "sec-fetch-mode": "no-cors"},
        ):
            r = await c.post("/api/contents", headers=headers)
            assert r.status_code == 403, (headers, r.text)
        assert not app.upstream.requests
        ok = [
            {"origin": f"http://{app.host}"},
            {"sec-fetch-site": "same-origin", "sec-fetch-mode": "cors"},
            {"sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate"},  # a link from afar
        ]
        for headers in ok:
            r = await c.get("/", headers=headers)
            assert r.status_code == 200, (headers, r.text)


async def test_the_ui_host_never_reaches_the_proxy_nor_an_app_host_the_ui(app: App) -> None:
    ui = app.h.client
    r = await ui.get(f"http://troupe.test/_troupe/enter?t={app.link().partition('?t=')[2]}")
    assert r.status_code == 404
    cookie = await app.enter()
    async with app.client(cookie, authorization=ui.headers["authorization"]) as c:
        r = await c.get("/v1/sessions")  # the app's own /v1, never the API
        assert r.status_code == 200 and r.json()["path"] == "/v1/sessions"
    async with app.client(authorization=ui.headers["authorization"]) as c:
        c.base_url = httpx.URL("http://apps.localhost:8090")
        r = await c.get("/v1/sessions")
        assert r.status_code == 404 and "no app at this address" in r.text


# -- what is forwarded -------------------------------------------------------------------------
async def test_troupe_cookies_and_hop_by_hop_headers_are_not_forwarded(app: App) -> None:
    cookie = await app.enter()
    async with app.client() as c:
        r = await c.put(
            "/api/contents/x?y=2",
            content=b"hello",
            headers={
                "cookie": f"_xsrf=1; {signin.COOKIE}=secret-ui; {COOKIE}={cookie}; theme=dark",
                "connection": "keep-alive, x-private",
                "x-private": "drop me",
                "keep-alive": "timeout=5",
                "te": "trailers",
                "trailer": "x-sum",
                "upgrade": "h2c",
                "proxy-authorization": "Basic Zm9v",
                "x-forwarded-host": "spoofed.example",
                "x-custom": "kept",
                "authorization": "Bearer app-token",
            },
        )
    assert r.status_code == 200, r.text
    got = r.json()
    headers = {k.lower(): v for k, v in got["headers"]}
    assert got["method"] == "PUT" and got["size"] == 5 and got["query"] == "y=2"
    assert headers["cookie"] == "_xsrf=1; theme=dark"
    assert "secret-ui" not in json.dumps(got) and cookie not in json.dumps(got)
    for hop in ("x-private", "keep-alive", "te", "trailer", "upgrade", "proxy-authorization"):
        assert hop not in headers, hop
    assert headers["host"] == app.host  # the app's origin, as the browser sent it
    assert headers["x-forwarded-host"] == app.host
    assert headers["x-forwarded-proto"] == "http"
    assert headers["x-forwarded-for"] == "10.1.2.3"
    assert headers["x-custom"] == "kept" and headers["authorization"] == "Bearer app-token"
    # the answer: the app's headers and cookies, less its hop-by-hop ones
    for hop in ("x-hop", "keep-alive", "proxy-authenticate"):
        assert hop not in r.headers, hop
    assert r.headers["set-cookie"] == "app=1; Path=/"


async def test_redirects_and_cookies_of_the_app_pass_unchanged(app: App) -> None:
    async with app.client(await app.enter()) as c:
        r = await c.get("/moved")
    assert r.status_code == 302 and r.headers["location"] == "/lab?x=1"
    assert r.headers["set-cookie"].startswith("_xsrf=abc")


async def test_tunnels_are_kept_and_reused(app: App) -> None:
    async with app.client(await app.enter()) as c:
        for _ in range(5):
            assert (await c.get("/")).status_code == 200
    assert app.tunnels == [["/bin/sh", f"{RUNNER_DIR}/relay.sh", str(PORT)]]


async def test_tunnels_of_an_app_nobody_uses_are_closed(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tunnel, "IDLE_SECONDS", 0.2)
    assert app.h.app is not None
    async with app.client(await app.enter()) as c:
        assert (await c.get("/")).status_code == 200
        state = app.h.app.state
        await eventually(lambda: not state.app_tunnels.pools)  # (by the sweep: no request)
        assert (await c.get("/")).status_code == 200  # a new tunnel
    assert len(app.tunnels) == 2


async def test_nothing_listening_is_a_502_with_the_relays_words(app: App) -> None:
    app.listening = False
    async with app.client(await app.enter()) as c:
        r = await c.get("/")
    assert r.status_code == 502
    assert "nothing accepts connections on port 8888" in r.text


# -- streaming: bounded memory -----------------------------------------------------------------
async def asgi_call(
    h: Harness, scope: dict[str, Any], body: AsyncIterator[bytes] | None
) -> tuple[int, int]:
    """Runs one request through the app; (status, bytes of the answer), nothing kept."""
    assert h.app is not None
    status, size = 0, 0
    done = asyncio.Event()

    sent_all = body is None

    async def receive() -> dict[str, Any]:
        nonlocal sent_all
        if not sent_all:
            assert body is not None
            chunk = await anext(body, None)
            if chunk is not None:
                return {"type": "http.request", "body": chunk, "more_body": True}
            sent_all = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        nonlocal status, size
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            size += len(message.get("body", b""))
            if not message.get("more_body"):
                done.set()

    await h.app(scope, receive, send)
    return status, size


def scope_of(
    app: App, method: str, path: str, query: str, headers: list[tuple[bytes, bytes]]
) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", app.host.encode()), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8090),
    }


async def test_bodies_stream_both_ways_in_bounded_memory(app: App) -> None:
    cookie = (b"cookie", f"{COOKIE}={await app.enter()}".encode())
    size = 64 * 1024**2

    async def upload() -> AsyncIterator[bytes]:
        block = b"u" * 65536
        for _ in range(size // len(block)):
            yield block

    gc.collect()
    tracemalloc.start()
    try:
        status, got = await asgi_call(
            app.h, scope_of(app, "GET", "/big", f"n={size}", [cookie]), None
        )
        assert (status, got) == (200, size)
        _, peak_down = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        headers = [cookie, (b"transfer-encoding", b"chunked")]
        status, got = await asgi_call(app.h, scope_of(app, "POST", "/sink", "", headers), upload())
        _, peak_up = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert status == 200
    assert app.upstream.requests[-1]["path"] == "/sink"
    # 64 MiB went each way; the manager (and the app, same process) held a few chunks at once
    assert peak_down < 8 * 1024**2, peak_down
    assert peak_up < 8 * 1024**2, peak_up


# -- WebSockets --------------------------------------------------------------------------------
class Socket:
    """A browser's WebSocket to an app's origin, run by the app itself over ASGI."""

    def __init__(
        self,
        app: App,
        path: str,
        headers: list[tuple[bytes, bytes]],
        protocols: list[str],
        extensions: dict[str, Any] | None = None,
    ) -> None:
        assert app.h.app is not None
        self.scope: dict[str, Any] = {
            "extensions": extensions or {},
            "type": "websocket",
            "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": "1.1",
            "scheme": "ws",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"session=1",
            "root_path": "",
            "headers": [(b"host", app.host.encode()), *headers],
            "client": ("127.0.0.1", 50001),
            "server": ("127.0.0.1", 8090),
            "subprotocols": protocols,
        }
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.inbox.put_nowait({"type": "websocket.connect"})
        self.outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.task = asyncio.create_task(app.h.app(self.scope, self.inbox.get, self._send))

    async def _send(self, message: MutableMapping[str, Any]) -> None:
        await self.outbox.put(dict(message))

    async def next(self) -> dict[str, Any]:
        return await asyncio.wait_for(self.outbox.get(), 5)


async def test_websockets_relay_both_ways_with_the_subprotocol(app: App) -> None:
    cookie = (b"cookie", f"{COOKIE}={await app.enter()}; {signin.COOKIE}=ui; k=v".encode())
    origin = (b"origin", f"http://{app.host}".encode())
    ws = Socket(app, "/ws", [cookie, origin], ["v1.kernel.websocket.jupyter.org", "other"])
    accepted = await ws.next()
    assert accepted["type"] == "websocket.accept" and accepted["subprotocol"] == "other"
    ws.inbox.put_nowait({"type": "websocket.receive", "text": "hi"})
    assert (await ws.next())["text"] == "echo:hi"
    blob = bytes(range(256)) * 1000
    ws.inbox.put_nowait({"type": "websocket.receive", "bytes": blob})
    assert (await ws.next())["bytes"] == b"echo:" + blob
    ws.inbox.put_nowait({"type": "websocket.receive", "text": "bye"})
    closed = await ws.next()
    assert closed["type"] == "websocket.close" and closed["code"] == 4321
    await asyncio.wait_for(ws.task, 5)
    handshake = {k.lower(): v for k, v in app.upstream.requests[-1]["headers"]}
    assert handshake[b"cookie"] == b"k=v"
    assert handshake[b"host"] == app.host.encode() and handshake[b"origin"] == origin[1]


async def test_a_websocket_without_the_cookie_is_refused_before_the_app(app: App) -> None:
    ws = Socket(app, "/ws", [], [])
    closed = await ws.next()
    assert closed["type"] == "websocket.close" and closed["code"] == 4401
    other = Socket(app, "/ws", [(b"origin", b"http://evil.example")], [])
    assert (await other.next())["code"] == 4403
    assert not app.tunnels and not app.upstream.requests


# -- the app domain ----------------------------------------------------------------------------
def test_app_domain_names_one_app_per_host_and_owns_everything_under_it() -> None:
    sid = "3f0c1d2e-aaaa-4bbb-8ccc-0123456789ab"
    domain = AppDomain.of("apps.localhost:8090")
    assert domain is not None
    assert domain.origin(sid, 8888) == f"http://8888-{sid}.apps.localhost:8090"
    assert domain.target(f"8888-{sid}.Apps.LocalHost:8090") == AppTarget(sid, 8888)
    for host in (
        f"8888-{sid}.apps.localhost",  # another port than the app domain's
        f"8888-{sid}.x.apps.localhost:8090",
        f"70000-{sid}.apps.localhost:8090",
        "8888-not-a-session.apps.localhost:8090",
        "apps.localhost:8090",
    ):
        assert domain.target(host) is None, host
        assert domain.owns(host), host  # still the proxy's (a refusal), never the UI's
    assert not domain.owns("127.0.0.1:8090") and not domain.owns("localhost:8090")
    assert not domain.owns("evilapps.localhost:8090")
    assert AppDomain.of("") is None
    assert ServerConfig(port=9000).app_domain == "apps.localhost:9000"
    with pytest.raises(ValueError, match="invalid app domain"):
        ServerConfig(app_domain="apps_example.com")


# -- stream slots ------------------------------------------------------------------------------
async def test_app_requests_and_websockets_hold_the_owners_stream_slots(app: App) -> None:
    """Each relayed WebSocket and request holds one of the owner's stream slots while it
    runs (like exec and terminals); one over the limit is refused clearly, never proxied."""
    assert app.h.app is not None
    async with app.h.app.state.db() as db:
        owner = await db.get(User, app.owner_id)
        assert owner is not None
        owner.limits = {**(owner.limits or {}), "streams": 1}
        await db.commit()
    cookie = f"{COOKIE}={await app.enter()}"
    headers = [(b"cookie", cookie.encode()), (b"origin", f"http://{app.host}".encode())]
    first = Socket(app, "/ws", headers, [])
    assert (await first.next())["type"] == "websocket.accept"
    streams = app.h.app.state.streams
    assert streams.open_count(app.owner_id) == 1
    tunnels, seen = len(app.tunnels), len(app.upstream.requests)

    second = Socket(app, "/ws", headers, [])
    closed = await second.next()
    assert closed["type"] == "websocket.close" and closed["code"] == 4429, closed
    assert "too many concurrent streams" in closed["reason"]
    assert "limit is 1" in closed["reason"] and "app requests" in closed["reason"]
    await asyncio.wait_for(second.task, 5)
    # a server with the denial-response extension (uvicorn) answers the handshake with a 429
    denied = Socket(app, "/ws", headers, [], {"websocket.http.response": {}})
    start = await denied.next()
    assert start["type"] == "websocket.http.response.start" and start["status"] == 429, start
    assert b"limit is 1" in (await denied.next())["body"]
    await asyncio.wait_for(denied.task, 5)
    async with app.client(cookie=cookie.split("=", 1)[1]) as c:
        r = await c.get("/api/status")
        assert r.status_code == 429 and "limit is 1" in r.text, r.text
        assert len(app.tunnels) == tunnels and len(app.upstream.requests) == seen

        first.inbox.put_nowait({"type": "websocket.receive", "text": "bye"})
        assert (await first.next())["code"] == 4321
        await asyncio.wait_for(first.task, 5)
        assert streams.open_count(app.owner_id) == 0
        r = await c.get("/api/status")
        assert r.status_code == 200, r.text
    assert streams.open_count(app.owner_id) == 0  # (the request's slot went when it ended)
