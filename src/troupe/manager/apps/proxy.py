"""The app proxy: every request to an app's origin, HTTP or WebSocket, relayed to the app's
port in main1 (manager -> agent -> kernel, :mod:`troupe.manager.apps.tunnel`).

:class:`AppOrigins` sits in front of the UI and the API: a request whose ``Host`` is the app
domain or under it goes to the proxy and nowhere else; every other request never reaches the
proxy. On an app's origin:

- ``GET /_troupe/enter?t=TOKEN`` uses a one-time link: sets the app cookie, redirects to ``/``;
- anything else is admitted by :mod:`troupe.manager.apps.gate` (refused: a short page, and
  nothing reaches the kernel), then relayed with its method, path, query, headers and body as
  they came, minus the hop-by-hop headers and minus troupe's own cookies (the UI's and the
  app's). ``Host`` and ``Origin`` stay the browser's (the app's origin), so an app that
  checks them (Jupyter) sees a same-origin request; ``X-Forwarded-For/-Host/-Proto`` say who
  asked. Bodies stream both ways, a chunk at a time: a 1 GB download keeps the manager's
  memory flat. Answers (redirects, cookies) come back unchanged: the app has the origin.

Each relayed request and WebSocket holds one of the session owner's stream slots
(:mod:`troupe.manager.streams`) while it runs, like an exec or a terminal: one over the limit
is refused with 429 (a WebSocket: closed with 4429 before it is accepted), never proxied.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
from collections.abc import AsyncIterator

import httpcore
from starlette.datastructures import State
from starlette.requests import HTTPConnection
from starlette.responses import HTMLResponse, RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from troupe.api.errors import TooMany, TroupeError
from troupe.manager import websessions
from troupe.manager.apps import secret, sockets
from troupe.manager.apps.gate import (
    REOPEN,
    Access,
    Refused,
    Sessions,
    admit,
    load_session,
    running,
)
from troupe.manager.apps.links import COOKIE, COOKIE_SECONDS, ENTER_PATH, links_of, make_cookie
from troupe.manager.apps.origins import AppTarget
from troupe.manager.apps.tunnel import Tunnels
from troupe.manager.streams import streams_of

#: Headers of one connection, not of the message (RFC 9110, 7.6.1): never forwarded.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
    }
)
#: troupe's cookies: never shown to an app.
OWN_COOKIES = frozenset({COOKIE, websessions.COOKIE})
#: Waits of a relayed request (seconds): opening a tunnel, waiting for a free one. Reading and
#: writing have none: long polls and slow downloads are the app's business.
TIMEOUTS = {"connect": 30.0, "pool": 30.0, "read": None, "write": None}
#: Methods retried once on a fresh tunnel when a kept one turned out closed (no body).
RETRY_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class ClientGone(Exception):
    """The browser left while its request's body was being relayed."""


class AppOrigins:
    """ASGI middleware: app origins to the proxy, everything else to ``app``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            state: State = scope["app"].state
            domain = links_of(state).domain if hasattr(state, "registry") else None
            host = HTTPConnection(scope).headers.get("host", "")
            if domain is not None and domain.owns(host):
                await serve(state, domain.target(host), scope, receive, send)
                return
        await self.app(scope, receive, send)


def tunnels_of(state: State) -> Tunnels:
    tunnels: Tunnels | None = getattr(state, "app_tunnels", None)
    if tunnels is None:
        tunnels = state.app_tunnels = Tunnels()
    return tunnels


async def close_apps(state: State) -> None:
    """Closes every kept tunnel and the admission cache (at the manager's shutdown)."""
    tunnels: Tunnels | None = getattr(state, "app_tunnels", None)
    if tunnels is not None:
        await tunnels.aclose()
    sessions: Sessions | None = getattr(state, "app_sessions", None)
    if sessions is not None:
        await sessions.aclose()


async def serve(
    state: State, target: AppTarget | None, scope: Scope, receive: Receive, send: Send
) -> None:
    conn = HTTPConnection(scope)
    try:
        if target is None:
            raise Refused(404, "there is no app at this address")
        if scope["type"] == "http" and scope["path"] == ENTER_PATH:
            await enter(state, target, scope, receive, send)
            return
        access = await admit(state, conn, target)
        slot = streams_of(conn).open(access.owner, target.session_id)  # in use: not idle
    except Refused as e:
        await refuse(e, scope, receive, send)
        return
    except TooMany as e:
        await refuse(Refused(429, e.message), scope, receive, send)
        return
    with slot:
        if scope["type"] == "websocket":
            await sockets.relay(access, target, scope, receive, send, upstream_headers(scope))
        else:
            await relay_http(state, access, target, scope, receive, send)


async def refuse(e: Refused, scope: Scope, receive: Receive, send: Send) -> None:
    """The refusal's page; a WebSocket's handshake is answered with it too where the server
    can (the ASGI denial-response extension: the client sees the status, e.g. 429, and the
    sentence, not a bare 403), else it is closed with code 4000 + the status and the reason."""
    if scope["type"] == "websocket":
        if "websocket.http.response" in (scope.get("extensions") or {}):
            refusal = page(e.http_status, e.message)
            headers = [(k, v) for k, v in refusal.raw_headers if k != b"content-length"]
            start = {"type": "websocket.http.response.start", "status": e.http_status}
            await send({**start, "headers": headers})
            await send({"type": "websocket.http.response.body", "body": refusal.body})
            return
        await send({"type": "websocket.close", "code": 4000 + e.http_status, "reason": e.message})
        return
    await page(e.http_status, e.message)(scope, receive, send)


def page(status: int, message: str) -> HTMLResponse:
    """The short page of a refusal (the app's origin shows no troupe UI)."""
    text = html.escape(message)
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>troupe: app not available</title></head><body><main><h1>App not available"
        f"</h1><p>{text}</p></main></body></html>"
    )
    return HTMLResponse(body, status, headers={"cache-control": "no-store"})


async def enter(
    state: State, target: AppTarget, scope: Scope, receive: Receive, send: Send
) -> None:
    """A one-time link: checks it, sets the app cookie (this host only) and goes to ``/``."""
    conn = HTTPConnection(scope)
    links = links_of(state)
    link = links.consume(conn.query_params.get("t", ""), target)
    if link is None:
        raise Refused(403, f"this link was used already or has expired: {REOPEN}")
    s = await load_session(state, target)
    running(state, s)
    if link.owner_id != s.owner_id:
        raise Refused(403, "this link is not for this session's owner")
    value = make_cookie(secret.of(conn), target, s.owner_id, s.owner.key_hash)
    response = RedirectResponse("/", 303, headers={"cache-control": "no-store"})
    https = scope.get("scheme") == "https" or (links.domain is not None and links.domain.https)
    response.set_cookie(
        COOKIE,
        value,
        max_age=COOKIE_SECONDS,
        path="/",
        httponly=True,
        samesite="lax",
        secure=https,
    )
    response.headers["referrer-policy"] = "no-referrer"
    await response(scope, receive, send)


def forwarded_cookie(header: bytes) -> bytes | None:
    """A ``Cookie`` header without troupe's cookies (None when nothing is left)."""
    kept = [
        part.strip()
        for part in header.split(b";")
        if part.strip() and part.strip().partition(b"=")[0].decode("latin-1") not in OWN_COOKIES
    ]
    return b"; ".join(kept) if kept else None


def upstream_headers(scope: Scope) -> list[tuple[bytes, bytes]]:
    """The request's headers as the app gets them (see the module's docstring)."""
    raw: list[tuple[bytes, bytes]] = list(scope.get("headers") or [])
    named = {
        token.strip().lower()
        for name, value in raw
        if name.lower() == b"connection"
        for token in value.split(b",")
    }
    out: list[tuple[bytes, bytes]] = []
    host = b""
    prior_for: list[bytes] = []
    for name, value in raw:
        lower = name.lower()
        if lower in HOP_BY_HOP or lower in named or lower.startswith(b"x-forwarded-"):
            if lower == b"x-forwarded-for":
                prior_for.append(value)
            continue
        if lower == b"cookie":
            kept = forwarded_cookie(value)
            if kept is not None:
                out.append((name, kept))
            continue
        if lower.startswith(b"sec-websocket-"):
            continue  # (a WebSocket's handshake is made anew by sockets.relay)
        if lower == b"host":
            host = value
        out.append((name, value))
    client = scope.get("client")
    chain = [*prior_for, client[0].encode()] if client else prior_for
    if chain:
        out.append((b"x-forwarded-for", b", ".join(chain)))
    out.append((b"x-forwarded-host", host))
    secure = scope.get("scheme") in ("https", "wss")
    out.append((b"x-forwarded-proto", b"https" if secure else b"http"))
    return out


def downstream_headers(raw: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The app's answer headers as the browser gets them: all but the hop-by-hop ones."""
    named = {
        token.strip().lower()
        for name, value in raw
        if name.lower() == b"connection"
        for token in value.split(b",")
    }
    return [
        (name.lower(), value)
        for name, value in raw
        if name.lower() not in HOP_BY_HOP and name.lower() not in named
    ]


def has_body(scope: Scope) -> bool:
    headers = dict((k.lower(), v) for k, v in scope.get("headers") or [])
    length = headers.get(b"content-length")
    if length is not None:
        return length.strip() not in (b"", b"0")
    return b"transfer-encoding" in headers


async def relay_http(
    state: State, access: Access, target: AppTarget, scope: Scope, receive: Receive, send: Send
) -> None:
    """Relays one HTTP request and its answer, both streamed; the client going away ends
    it (the tunnel is closed, not kept: the answer was not read to its end)."""
    body_done = asyncio.Event()

    async def body() -> AsyncIterator[bytes]:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientGone
            chunk = message.get("body", b"")
            if chunk:
                yield chunk
            if not message.get("more_body", False):
                body_done.set()
                return

    async def gone() -> None:
        await body_done.wait()
        while (await receive())["type"] != "http.disconnect":
            pass

    content = body() if has_body(scope) else None
    if content is None:
        body_done.set()
    pool = tunnels_of(state).pool(access.agent, access.container_id, target.port)
    work = asyncio.ensure_future(_exchange(pool, target, scope, send, content))
    watch = asyncio.ensure_future(gone())
    try:
        await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (work, watch):
            if not t.done():
                t.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        if work.done() or work.cancelled():
            with contextlib.suppress(asyncio.CancelledError):
                await work


async def _exchange(
    pool: httpcore.AsyncConnectionPool,
    target: AppTarget,
    scope: Scope,
    send: Send,
    content: AsyncIterator[bytes] | None,
) -> None:
    path = scope.get("raw_path") or scope["path"].encode()
    query = scope.get("query_string") or b""
    url = httpcore.URL(
        scheme=b"http",
        host=b"127.0.0.1",
        port=target.port,
        target=path + (b"?" + query if query else b""),
    )
    method = scope["method"]
    tries = 2 if content is None and method in RETRY_METHODS else 1
    for attempt in range(tries):
        started = False
        try:
            async with pool.stream(
                method.encode(),
                url,
                headers=upstream_headers(scope),
                content=content,
                extensions={"timeout": TIMEOUTS},
            ) as response:
                await send(
                    {
                        "type": "http.response.start",
                        "status": response.status,
                        "headers": downstream_headers(response.headers),
                    }
                )
                started = True
                async for chunk in response.aiter_stream():
                    if chunk:
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
        except (httpcore.RemoteProtocolError, httpcore.ReadError) as e:
            if started:
                raise  # (the answer is cut: the connection to the browser must end too)
            if attempt + 1 < tries:
                continue  # a kept tunnel the app had closed: once more on a new one
            await _failed(scope, send, f"the app's connection ended before an answer ({e})")
            return
        except (httpcore.ConnectError, httpcore.ConnectTimeout, httpcore.PoolTimeout) as e:
            await _failed(scope, send, f"cannot reach port {target.port} in main1: {e}")
            return
        except TroupeError as e:
            await _failed(scope, send, f"cannot reach port {target.port} in main1: {e.message}")
            return
        except ClientGone:
            return


async def _failed(scope: Scope, send: Send, message: str) -> None:
    async def nothing() -> dict[str, str]:
        return {"type": "http.disconnect"}

    await page(502, message)(scope, nothing, send)
