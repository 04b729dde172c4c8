"""A command's raw byte streams over a WebSocket, the same between client, manager and agent.

Used by ``troupe session tunnel`` (a relay to a port in a kernel, as an OpenSSH
``ProxyCommand``), ``forward`` and ``cp`` (``tar`` in the kernel). Unlike the terminal
protocol (:mod:`troupe.api.shell`) there is no TTY, so bytes pass unchanged and the input can
end on its own (half-close) while the output goes on:

- binary frames: the command's stdin (client to server) and stdout (server to client);
- client text frame ``{"eof": true}``: the input ended (the command's stdin is closed);
- server text frames ``{"stderr": TEXT}`` (the command's diagnostics), then ``{"exit_code": N}``
  once the output ended, then the server closes;
- before the command starts: ``{"error": {...}}`` and close code 4000 + HTTP status.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Protocol

from troupe.api.bridge import bridge

if TYPE_CHECKING:
    from starlette.websockets import WebSocket

STDOUT, STDERR = 1, 2
EOF_FRAME = json.dumps({"eof": True})


class Pipe(Protocol):
    """A running command without a TTY: output chunks tagged with their stream, input that can
    be closed while the output goes on, the exit code."""

    async def read(self) -> tuple[int, bytes] | None: ...
    async def write(self, data: bytes) -> None: ...
    async def close_input(self) -> None: ...
    async def exit_code(self) -> int: ...


def control(text: str) -> dict[str, Any]:
    """A text frame as a dict (an empty one when it is no JSON object)."""
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


async def serve_pipe(ws: WebSocket, pipe: Pipe) -> None:
    """Bridges an accepted WebSocket and a command until its output ends or the client leaves."""

    async def on_text(text: str) -> None:
        if control(text).get("eof"):
            await pipe.close_input()

    async def pump_out() -> None:
        while (item := await pipe.read()) is not None:
            stream, data = item
            if stream == STDERR:
                await ws.send_text(json.dumps({"stderr": data.decode(errors="replace")}))
            else:
                await ws.send_bytes(data)
        await ws.send_text(json.dumps({"exit_code": await pipe.exit_code()}))
        await ws.close()

    await bridge(ws, pipe.write, on_text, pump_out())


#: Where the runner's scripts are in every kernel (the agent mounts them there:
#: ``troupe.agent.kernel.RUNNER_MOUNT``).
RUNNER_DIR = "/opt/troupe"


def relay_command(port: int) -> list[str]:
    """Joins the command's stdin/stdout to ``127.0.0.1:port`` inside the kernel."""
    if not 1 <= port <= 65535:
        raise ValueError(f"invalid port: {port}")
    return ["/bin/sh", f"{RUNNER_DIR}/relay.sh", str(port)]


def copy_command(op: str, path: str, name: str = "") -> list[str]:
    """``tar`` in the kernel: ``get`` writes ``path`` as an archive to stdout, ``put`` unpacks
    stdin at ``path`` (into it when it is a directory, else as it, ``name`` being the archive's
    top entry)."""
    if op not in ("get", "put"):
        raise ValueError(f"invalid copy operation: {op!r}")
    return ["/bin/sh", f"{RUNNER_DIR}/cp.sh", op, path, name]
