"""Output of a command run in a kernel, and its one wire format (NDJSON, lossless).

Each line is ``{"data": "<base64 bytes>"}`` or, last, ``{"exit_code": N}``; a failure after
the answer started (its status already sent) ends the stream with the error shape
``{"error": {...}}`` instead. The agent's API, the manager's API and the SDK all use
:func:`encode` / :func:`decode`.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any, NamedTuple

from troupe.api.errors import TroupeError, from_wire

MEDIA_TYPE = "application/x-ndjson"
#: The kernels an exec may name (:class:`~troupe.api.models.ExecRequest` checks the same):
#: hostnames ``<role><idx>`` (main1, sub1, worker2, ...; a role is a lowercase word), and of
#: ``main`` only main1. Spelled without look-ahead: pydantic's regex engine has none.
_NOT_MAIN = r"[a-z]{1,3}|[a-z]{5,16}|[a-ln-z][a-z]{3}|m[b-z][a-z]{2}|ma[a-hj-z][a-z]|mai[a-mo-z]"
#: The same without anchors or capturing groups, to build into other patterns (the CLI's cp).
KERNEL_NAME = rf"main1|(?:{_NOT_MAIN})[1-9][0-9]{{0,5}}"
KERNEL_PATTERN = rf"^(?:{KERNEL_NAME})$"
_KERNEL = re.compile(KERNEL_PATTERN)
#: Whom a command may run as (:data:`~troupe.api.models.ExecUser`).
USERS = ("work", "root")


def plain_request(command: list[str], kernel: str, user: str) -> dict[str, Any] | None:
    """The body of an exec request that is plainly valid, built without pydantic (clients'
    short path); None for anything :class:`~troupe.api.models.ExecRequest` must judge."""
    if (
        command
        and all(type(arg) is str and "\0" not in arg for arg in command)
        and type(kernel) is str
        and _KERNEL.fullmatch(kernel)
        and user in USERS
    ):
        return {"command": list(command), "kernel": kernel, "user": user}
    return None


# NamedTuples rather than dataclasses: importing dataclasses costs a short command ~20 ms


class ExecOutput(NamedTuple):
    data: bytes


class ExecExit(NamedTuple):
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
