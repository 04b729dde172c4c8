"""The two shapes of a logs answer: plain text (the CLI, ``curl``) and server-sent events
(browsers, and any client that wants keep-alives and resuming).

Events: ``id`` is the line's engine timestamp (RFC 3339, UTC, nanoseconds), ``data`` a JSON
object ``{"kernel", "ts", "text"}``; an ``end`` event says why a stream stopped early; a
comment line (``: keep-alive``) goes out whenever nothing was sent for a while, so proxies and
clients keep a quiet follow open. A plain-text stream cannot carry keep-alives without adding
bytes to the log: followers that need them ask for events.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from troupe.api.aio import heartbeat
from troupe.api.errors import TroupeError
from troupe.manager.logs import LogLine

MEDIA_TYPE = "text/event-stream"
KEEPALIVE = b": keep-alive\n\n"


async def plain(lines: AsyncIterator[LogLine], prefixed: bool) -> AsyncIterator[bytes]:
    try:
        async for line in lines:
            yield (line.prefixed() if prefixed else line.text).encode()
    except TroupeError as e:  # the status is sent already: the last line says it
        yield f"troupe: logs ended: {e.message}\n".encode()


def event(line: LogLine) -> bytes:
    data = json.dumps({"kernel": line.host, "ts": line.ts, "text": line.text.rstrip("\n")})
    return (f"id: {line.ts}\n" if line.ts else "").encode() + f"data: {data}\n\n".encode()


async def events(lines: AsyncIterator[LogLine], keepalive: float) -> AsyncIterator[bytes]:
    yield b": logs\n\n"  # something at once: headers and a first byte
    try:
        async for line in heartbeat(lines, keepalive):
            yield KEEPALIVE if line is None else event(line)
    except TroupeError as e:
        yield f"event: end\ndata: {json.dumps({'error': e.message})}\n\n".encode()
        return
    yield b"event: end\ndata: {}\n\n"
