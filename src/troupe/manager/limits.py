"""Request size limit as ASGI middleware: a body over the limit is refused with 413 before it
is parsed (by Content-Length, or as it streams in without one).

A client that sends its whole body before it reads (Python's urllib, most simple clients)
must still read that 413 (finding N11, docs/reliability.md): a server that closes a connection
with unread data in it makes the kernel answer with a reset, which throws the 413 away. So the
whole answer is sent first (with its length: a client that reads at once, curl, has it all) and
the rest of the body is then read and thrown away, up to :data:`DRAIN_BYTES` and for
:data:`DRAIN_SECONDS` at most, before the connection closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from troupe.api.errors import TooLarge

#: The most of a refused body read and thrown away so the client can read the 413; a body
#: that says it is larger is not read at all (the client may then see a reset instead).
DRAIN_BYTES = 64 * 1024**2
#: The longest a refused body is read for (a slow sender does not hold the connection).
DRAIN_SECONDS = 5.0


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None:
            if not length.isdigit() or int(length) > self.max_bytes:
                drain = length.isdigit() and int(length) <= DRAIN_BYTES
                await self._refuse(send, receive if drain else None)
                return
            await self.app(scope, receive, send)
            return
        # No length given (chunked): read the body up to the limit first, then replay it.
        chunks: list[bytes] = []
        seen = 0
        while True:
            msg = await receive()
            if msg["type"] != "http.request":
                await self.app(scope, _replay([msg], receive), send)
                return
            chunk = msg.get("body", b"")
            seen += len(chunk)
            if seen > self.max_bytes:
                more = msg.get("more_body", False)
                await self._refuse(send, receive if more else None)
                return
            chunks.append(chunk)
            if not msg.get("more_body", False):
                break
        body: Message = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        await self.app(scope, _replay([body], receive), send)

    async def _refuse(self, send: Send, drain: Receive | None) -> None:
        """Answers 413 and closes the connection; given ``drain``, reads the rest of the body
        (bounded) between the answer and the close."""
        err = TooLarge(f"request body over the limit of {self.max_bytes} bytes")
        body = json.dumps(err.to_wire()).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body, "more_body": drain is not None})
        if drain is None:
            return
        try:
            await _discard(drain, DRAIN_BYTES)
        finally:
            await send({"type": "http.response.body", "body": b""})


async def _discard(receive: Receive, limit: int) -> None:
    """Reads and drops request body until it ends, the client leaves, ``limit`` bytes or
    :data:`DRAIN_SECONDS` passed."""
    seen = 0
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(DRAIN_SECONDS):
            while seen <= limit:
                msg = await receive()
                if msg["type"] != "http.request":
                    return
                seen += len(msg.get("body", b""))
                if not msg.get("more_body", False):
                    return


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replay() -> Message:
        return pending.pop(0) if pending else await receive()

    return replay
