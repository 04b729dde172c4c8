"""The WebSocket bridge of terminals and pipes (one input pump, :mod:`troupe.api.bridge`): a
command that ends while input still arrives still reports its exit code (input for an ending
shell used to end the bridge first: "closed without an exit code"), and a client that leaves
ends a command that stays quiet."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from troupe.api.bridge import pump_in
from troupe.api.pipe import EOF_FRAME, STDERR, STDOUT, serve_pipe
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


class EndingPipe:
    """Says a line on each stream, then has ended: input fails, as an engine's closed stream."""

    def __init__(self) -> None:
        self.out = [(STDOUT, b"data"), (STDERR, b"oops\n")]

    async def read(self) -> tuple[int, bytes] | None:
        if self.out:
            return self.out.pop(0)
        await asyncio.sleep(0.05)
        return None

    async def write(self, data: bytes) -> None:
        raise ConnectionError("pipe gone")

    async def close_input(self) -> None:
        raise ConnectionError("pipe gone")

    async def exit_code(self) -> int:
        return 3


async def test_input_for_an_ending_pipe_does_not_lose_its_exit_code() -> None:
    ws = FakeWebSocket(
        [
            {"type": "websocket.receive", "bytes": b"more"},
            {"type": "websocket.receive", "text": EOF_FRAME},
        ]
    )
    await asyncio.wait_for(serve_pipe(ws, EndingPipe()), 5)  # type: ignore[arg-type]
    assert ws.sent == [b"data", {"stderr": "oops\n"}, {"exit_code": 3}] and ws.closed


class QuietPipe(EndingPipe):
    """Never says anything: only the client leaving ends its bridge."""

    async def read(self) -> tuple[int, bytes] | None:
        await asyncio.Event().wait()
        raise AssertionError


async def test_a_client_that_leaves_ends_a_quiet_command() -> None:
    ws = FakeWebSocket([{"type": "websocket.disconnect", "code": 1000}])
    await asyncio.wait_for(serve_pipe(ws, QuietPipe()), 5)  # type: ignore[arg-type]
    assert ws.sent == []


async def test_the_input_pump_hands_frames_on_by_kind_until_the_client_leaves() -> None:
    got: list[object] = []

    async def on_bytes(data: bytes) -> None:
        got.append(data)

    async def on_text(text: str) -> None:
        if text == "bad":
            raise ValueError(text)  # dropped: the pump goes on
        got.append(text)

    ws = FakeWebSocket(
        [
            {"type": "websocket.receive", "bytes": b"a"},
            {"type": "websocket.receive", "text": "bad"},
            {"type": "websocket.receive", "text": "t"},
            {"type": "websocket.receive", "bytes": b""},  # an empty frame is no input
            {"type": "websocket.disconnect", "code": 1000},
            {"type": "websocket.receive", "bytes": b"never"},
        ]
    )
    await asyncio.wait_for(pump_in(ws, on_bytes, on_text), 5)  # type: ignore[arg-type]
    assert got == [b"a", "t"]
