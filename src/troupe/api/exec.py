"""Output of a command run in a kernel, and its one wire format (NDJSON, lossless).

Each line is ``{"data": "<base64 bytes>"}`` or, last, ``{"exit_code": N}``; a failure after
the answer started (its status already sent) ends the stream with the error shape
``{"error": {...}}`` instead. The agent's API, the manager's API and the SDK all use
:func:`encode` / :func:`decode`.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

from troupe.api.errors import TroupeError, from_wire

MEDIA_TYPE = "application/x-ndjson"


@dataclass(frozen=True)
class ExecOutput:
    data: bytes


@dataclass(frozen=True)
class ExecExit:
    exit_code: int


ExecItem = ExecOutput | ExecExit


def encode(item: ExecItem | TroupeError) -> bytes:
    if isinstance(item, TroupeError):
        return json.dumps(item.to_wire()).encode() + b"\n"
    if isinstance(item, ExecExit):
        return json.dumps({"exit_code": item.exit_code}).encode() + b"\n"
    return json.dumps({"data": base64.b64encode(item.data).decode()}).encode() + b"\n"


def decode(line: str | bytes) -> ExecItem | None:
    """One line back into an item; None for a blank line; an error line is raised."""
    if not line.strip():
        return None
    msg = json.loads(line)
    if "error" in msg:
        raise from_wire(0, msg)
    if "exit_code" in msg:
        return ExecExit(int(msg["exit_code"]))
    return ExecOutput(base64.b64decode(msg["data"]))
