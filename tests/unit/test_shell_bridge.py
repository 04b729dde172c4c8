"""The terminal bridge: a shell that ends while input still arrives still reports its exit
code (input for an ending shell used to end the bridge first: "closed without an exit code")."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from troupe.api.shell import serve_shell


class EndingShell:
    """Says one line, then has ended: writes fail, as an engine's closed stream does."""

    def __init__(self) -> None:
        self.said = False
        self.ended = asyncio.Event()

    async def read(self) -> bytes | None:
        if not self.said:
            self.said = True
            return b"bye\n"
        await asyncio.sleep(0.05)  # the exit code is fetched a moment after the end
        self.ended.set()
        return None

    async def write(self, data: bytes) -> None:
        raise ConnectionError("shell gone")

    async def resize(self, rows: int, cols: int) -> None:
        raise ConnectionError("shell gone")

    async def exit_code(self) -> int:
        return 4


class FakeWebSocket:
    def __init__(self, incoming: list[dict[str, Any]]) -> None:
        self.incoming = incoming
        self.sent: list[Any] = []
        self.closed = False

    async def receive(self) -> dict[str, Any]:
        if self.incoming:
            return self.incoming.pop(0)
        await asyncio.Event().wait()  # the client stays until the server closes
        raise AssertionError

    async def send_bytes(self, data: bytes) -> None:
        self.sent.append(data)

    async def send_text(self, text: str) -> None:
        self.sent.append(json.loads(text))

    async def close(self) -> None:
        self.closed = True


async def test_input_for_an_ending_shell_does_not_lose_its_exit_code() -> None:
    ws = FakeWebSocket(
        [
            {"type": "websocket.receive", "bytes": b"\x04"},
            {"type": "websocket.receive", "text": json.dumps({"resize": [24, 80]})},
        ]
    )
    await asyncio.wait_for(serve_shell(ws, EndingShell()), 5)  # type: ignore[arg-type]
    assert ws.sent == [b"bye\n", {"exit_code": 4}] and ws.closed
