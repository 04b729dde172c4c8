"""WebSockets of an app (Jupyter's kernels and terminals), relayed message by message.

The browser's WebSocket ends at the manager (the ASGI server speaks its framing); a tunnel
of its own (not a pooled one: it stays open as long as the socket) carries a second
WebSocket to the app, spoken with the ``websockets`` library's sans-I/O client. The app's
handshake gets the browser's headers (``Host``, ``Origin``, cookies without troupe's) and
subprotocols; the subprotocol the app picks is the one the browser is told. Messages pass
both ways whole (fragments joined), pings are answered on each side, and a close on either
side closes the other with its code.
"""

from __future__ import annotations

import asyncio
import contextlib

from starlette.types import Message, Receive, Scope, Send
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Request, Response
from websockets.protocol import State
from websockets.typing import Origin, Subprotocol
from websockets.uri import parse_uri

from troupe.api.errors import TroupeError
from troupe.manager.apps.gate import Access
from troupe.manager.apps.origins import AppTarget
from troupe.manager.apps.tunnel import TunnelStream, open_tunnel

#: Read size from the tunnel.
CHUNK = 65536
#: Close codes a server may send (1005, 1006 and 1015 are only ever reported).
UNSENDABLE = frozenset({1005, 1006, 1015})


async def relay(
    access: Access,
    target: AppTarget,
    scope: Scope,
    receive: Receive,
    send: Send,
    headers: list[tuple[bytes, bytes]],
) -> None:
    """Serves one browser WebSocket on an app's origin until either side closes."""
    if (await receive())["type"] != "websocket.connect":
        return
    try:
        stream = await open_tunnel(access.agent, access.container_id, target.port)
    except TroupeError as e:
        await send({"type": "websocket.close", "code": 4502, "reason": e.message[:120]})
        return
    try:
        proto = await _handshake(stream, target, scope, headers)
        if proto is None:
            await send({"type": "websocket.close", "code": 4502, "reason": "the app refused"})
            return
        accept: Message = {"type": "websocket.accept", "subprotocol": proto.subprotocol}
        await send(accept)
        await _pump(stream, proto, receive, send)
    finally:
        await stream.aclose()


async def _flush(stream: TunnelStream, proto: ClientProtocol) -> None:
    for data in proto.data_to_send():
        if data:
            await stream.write(data)
        else:
            await stream.send_eof()


async def _handshake(
    stream: TunnelStream, target: AppTarget, scope: Scope, headers: list[tuple[bytes, bytes]]
) -> ClientProtocol | None:
    """The app's side of the handshake; None if the app did not accept it."""
    host = next((v.decode("latin-1") for k, v in headers if k.lower() == b"host"), "app")
    origin = next((v.decode("latin-1") for k, v in headers if k.lower() == b"origin"), None)
    protocols = [Subprotocol(p) for p in scope.get("subprotocols") or []]
    proto = ClientProtocol(
        parse_uri(f"ws://127.0.0.1:{target.port}/"),
        origin=Origin(origin) if origin else None,
        subprotocols=protocols or None,
        max_size=None,
    )
    request = proto.connect()
    del request.headers["Host"]
    for name, value in headers:
        if name.lower() not in (b"origin",):
            request.headers[name.decode("latin-1")] = value.decode("latin-1")
    if "host" not in request.headers:
        request.headers["Host"] = host
    path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
    query = (scope.get("query_string") or b"").decode("latin-1")
    proto.send_request(Request(path + (f"?{query}" if query else ""), request.headers))
    await _flush(stream, proto)
    while proto.state is State.CONNECTING:
        data = await stream.read(CHUNK)
        if data:
            proto.receive_data(data)
        else:
            proto.receive_eof()
            break
    events = proto.events_received()
    ok = proto.state is State.OPEN and proto.handshake_exc is None
    if ok and events and isinstance(events[0], Response):
        pending = events[1:]
        proto.events.extend(pending)  # (frames that came with the handshake's answer)
        return proto
    return None


async def _pump(stream: TunnelStream, proto: ClientProtocol, receive: Receive, send: Send) -> None:
    async def up() -> None:
        while True:
            message = await receive()
            if message["type"] == "websocket.receive":
                if message.get("text") is not None:
                    proto.send_text(message["text"].encode())
                else:
                    proto.send_binary(message.get("bytes") or b"")
                await _flush(stream, proto)
            elif message["type"] == "websocket.disconnect":
                code = int(message.get("code", 1000))
                with contextlib.suppress(Exception):
                    proto.send_close(1000 if code in UNSENDABLE else code)
                    await _flush(stream, proto)
                return

    async def down() -> None:
        parts: list[bytes] = []
        opcode = Opcode.BINARY
        while True:
            for event in proto.events_received():
                if not isinstance(event, Frame):
                    continue
                if event.opcode in (Opcode.TEXT, Opcode.BINARY):
                    opcode, parts = event.opcode, [bytes(event.data)]
                elif event.opcode is Opcode.CONT:
                    parts.append(bytes(event.data))
                else:
                    continue  # (pings are answered by the protocol: flushed below)
                if event.fin:
                    data = b"".join(parts)
                    if opcode is Opcode.TEXT:
                        await send({"type": "websocket.send", "text": data.decode()})
                    else:
                        await send({"type": "websocket.send", "bytes": data})
            await _flush(stream, proto)
            if proto.state is State.CLOSED or proto.close_expected():
                break
            data = await stream.read(CHUNK)
            if not data:
                proto.receive_eof()
                break
            proto.receive_data(data)
        got = proto.close_rcvd  # (None: the app's side ended without a close frame)
        code = 1011 if got is None else 1000 if got.code in UNSENDABLE else got.code
        reason = "" if got is None else got.reason
        await send({"type": "websocket.close", "code": code, "reason": reason})

    tasks = [asyncio.ensure_future(up()), asyncio.ensure_future(down())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t
