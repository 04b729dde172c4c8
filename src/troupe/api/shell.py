"""The terminal protocol over a WebSocket, the same between client, manager and agent.

Binary frames carry terminal bytes both ways; the client may send text frames
``{"resize": [rows, cols]}``; at the end the server sends ``{"exit_code": N}`` and closes.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Protocol

from troupe.api.bridge import bridge

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

    async def on_text(text: str) -> None:
        rows, cols = json.loads(text)["resize"]
        await sh.resize(int(rows), int(cols))

    async def pump_out() -> None:
        while (data := await sh.read()) is not None:
            await ws.send_bytes(data)
        await ws.send_text(json.dumps({"exit_code": await sh.exit_code()}))
        await ws.close()

    await bridge(ws, sh.write, on_text, pump_out())
