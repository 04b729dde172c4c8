"""The one WebSocket bridge of terminals (:mod:`troupe.api.shell`) and pipes
(:mod:`troupe.api.pipe`): a pump that feeds the client's frames to a command, a pump that sends
the command's output back, and whichever ends first ends both (the command's end, or the client
leaving: a quiet abandoned command must not live on until its next output)."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from troupe.api.aio import until_first

if TYPE_CHECKING:
    from starlette.websockets import WebSocket


async def pump_in(
    ws: WebSocket,
    on_bytes: Callable[[bytes], Awaitable[None]],
    on_text: Callable[[str], Awaitable[None]],
) -> None:
    """Hands each binary frame to ``on_bytes`` and each text frame to ``on_text`` until the
    client leaves. Input for a command that is ending (its last Ctrl-D, a resize, the end of
    a tunnel's input) may fail to arrive: that must not end the bridge before the output pump
    has sent the rest of the output and the exit code, so such a failure is dropped."""
    while True:
        msg = await ws.receive()
        if msg["type"] == "websocket.disconnect":
            return
        with contextlib.suppress(Exception):
            if msg.get("bytes"):
                await on_bytes(msg["bytes"])
            elif msg.get("text"):
                await on_text(msg["text"])


async def bridge(
    ws: WebSocket,
    on_bytes: Callable[[bytes], Awaitable[None]],
    on_text: Callable[[str], Awaitable[None]],
    pump_out: Coroutine[Any, Any, None],
) -> None:
    """Runs :func:`pump_in` and ``pump_out`` until the first of them ends."""
    await until_first(pump_in(ws, on_bytes, on_text), pump_out)
