"""The two shapes of a logs answer: plain text (the CLI, ``curl``) and server-sent events
(browsers, and any client that wants keep-alives and resuming).

Events: ``id`` says where the stream is in every kernel (:mod:`troupe.manager.log_positions`;
a client that reconnects sends it back as ``Last-Event-ID`` and gets exactly the lines it had
not got), ``data`` a JSON object ``{"kernel", "ts", "text"}`` (``ts``: the engine's RFC 3339
timestamp, ``""`` if the line has none); an ``end`` event says why a stream stopped early; a
comment line (``: keep-alive``) goes out whenever nothing was sent for a while, so proxies and
clients keep a quiet follow open. A plain-text stream cannot carry keep-alives without adding
bytes to the log: followers that need them ask for events.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from troupe.api.aio import heartbeat
from troupe.api.errors import TroupeError
from troupe.manager.log_positions import Cursor
from troupe.manager.logs import LogLine

MEDIA_TYPE = "text/event-stream"
KEEPALIVE = b": keep-alive\n\n"
#: Bytes of a log that is not followed sent in one piece (not one message per line).
BATCH = 32 * 1024


async def plain(lines: AsyncIterator[LogLine], prefixed: bool) -> AsyncIterator[bytes]:
    try:
        async for line in lines:
            yield (line.prefixed() if prefixed else line.text).encode()
    except TroupeError as e:  # the status is sent already: the last line says it
        yield f"troupe: logs ended: {e.message}\n".encode()


def event(line: LogLine, ident: str) -> bytes:
    data = json.dumps({"kernel": line.host, "ts": line.ts, "text": line.text.rstrip("\n")})
    return f"id: {ident}\ndata: {data}\n\n".encode()


async def events(
    lines: AsyncIterator[LogLine], cursor: Cursor, keepalive: float
) -> AsyncIterator[bytes]:
    yield b": logs\n\n"  # something at once: headers and a first byte
    try:
        async for line in heartbeat(lines, keepalive):
            if line is None:
                yield KEEPALIVE
            else:
                yield event(line, cursor.advance(line.kernel, line.at, line.run))
    except TroupeError as e:
        yield f"event: end\ndata: {json.dumps({'error': e.message})}\n\n".encode()
        return
    yield b"event: end\ndata: {}\n\n"


async def batched(chunks: AsyncIterator[bytes], size: int = BATCH) -> AsyncIterator[bytes]:
    """``chunks`` joined into pieces of about ``size`` bytes (for answers that are not
    followed: a followed line must go out at once)."""
    buf: list[bytes] = []
    n = 0
    async for chunk in chunks:
        buf.append(chunk)
        n += len(chunk)
        if n >= size:
            yield b"".join(buf)
            buf, n = [], 0
    if buf:
        yield b"".join(buf)
