"""The terminal protocol over a WebSocket, the same between client, manager and agent.

Binary frames carry terminal bytes both ways; the client may send text frames
``{"resize": [rows, cols]}``; at the end the server sends ``{"exit_code": N}`` and closes.
"""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Protocol

from troupe.api.aio import until_first

if TYPE_CHECKING:
    from starlette.websockets import WebSocket


class Shell(Protocol):
    """Both ends of an interactive terminal: bytes in and out, resize, exit code."""

    async def read(self) -> bytes | None: ...
    async def write(self, data: bytes) -> None: ...
    async def resize(self, rows: int, cols: int) -> None: ...
    async def exit_code(self) -> int: ...


async def serve_shell(ws: WebSocket, sh: Shell) -> None:
    """Bridges an accepted WebSocket and a shell until the shell ends or the client leaves."""

    async def pump_in() -> None:
        while True:
            msg = await ws.receive()
            if msg["type"] == "websocket.disconnect":
                return
            # Input for a shell that is ending (its last Ctrl-D, a resize) may fail to arrive:
            # that must not end the bridge before pump_out has sent the exit code.
            with contextlib.suppress(Exception):
                if msg.get("bytes"):
                    await sh.write(msg["bytes"])
                elif msg.get("text"):
                    rows, cols = json.loads(msg["text"])["resize"]
                    await sh.resize(int(rows), int(cols))

    async def pump_out() -> None:
        while (data := await sh.read()) is not None:
            await ws.send_bytes(data)
        await ws.send_text(json.dumps({"exit_code": await sh.exit_code()}))
        await ws.close()

    # Whichever ends first ends both: the shell's exit, or the client leaving (a quiet
    # abandoned shell must not live on until its next output).
    await until_first(pump_in(), pump_out())
