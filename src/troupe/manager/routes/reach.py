"""Reaching into a session like a machine: byte tunnels to a kernel's ports (SSH, notebooks,
web apps) and file copies, all relayed manager -> agent -> ``docker exec`` in the kernel, so no
port is ever published on a host.

Each is a WebSocket carrying :mod:`troupe.api.pipe`; like the terminal it is authenticated by
the ``Authorization`` header, finds the session among the caller's own (another user's
session is "not found"), needs it RUNNING and holds one of the user's stream slots while open.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from typing import Literal

from fastapi import APIRouter, WebSocket

from troupe.api.errors import Invalid, TroupeError
from troupe.api.exec import KERNEL_PATTERN
from troupe.api.models import SessionSSH
from troupe.api.pipe import copy_command, relay_command, serve_pipe
from troupe.cluster.contract import SSH_PORT
from troupe.manager import kernel_io
from troupe.manager.deps import DB, CurrentUser, authenticate
from troupe.manager.reads.sessions import find_session, lookup
from troupe.manager.streams import streams_of

router = APIRouter(tags=["sessions"])

KERNEL = re.compile(KERNEL_PATTERN)
#: Longest path ``cp`` takes (Linux's PATH_MAX).
MAX_PATH = 4096


@router.get("/sessions/{ref}/ssh", response_model=SessionSSH)
async def session_ssh(ref: str, db: DB, user: CurrentUser) -> SessionSSH:
    """What an OpenSSH client needs to log into main1 through the tunnel: the user, main1's
    host key (to pin it: no prompt, no ``StrictHostKeyChecking no``) and the user's own public
    key the session was created with (``--ssh-key``), to find the matching private key."""
    s = await find_session(db, user, ref)
    main = next((k for k in s.kernels if k.hostname == "main1"), None)
    host_key = " ".join(main.host_public_key.split()[:2]) if main is not None else ""
    return SessionSSH(
        id=s.id, name=s.name, user="work", host_key=host_key, user_key=s.user_ssh_key or ""
    )


async def _serve(ws: WebSocket, ref: str, kernel: str, command: Callable[[], list[str]]) -> None:
    """Checks (key, arguments, session, kernel, slot), then runs the command in the kernel as
    ``work``; a refusal is the error body, then close code 4000 + HTTP status."""
    from troupe.api.edge import http_status

    await ws.accept()
    async with contextlib.AsyncExitStack() as stack:
        try:
            user = await authenticate(ws.app.state.db, ws)
            argv = command()
            s = await lookup(ws, user, ref)
            agent, container_id = kernel_io.kernel_target(ws.app.state.registry.fleet, s, kernel)
            stack.enter_context(streams_of(ws).open(user, s.id))
            pipe = await stack.enter_async_context(agent.pipe(container_id, argv))
        except TroupeError as e:
            await ws.send_text(json.dumps(e.to_wire()))
            await ws.close(code=4000 + http_status(e))
            return
        await serve_pipe(ws, pipe)


@router.websocket("/sessions/{ref}/tunnel")
async def session_tunnel(
    ws: WebSocket,
    ref: str,
    kernel: str = "main1",
    port: int = SSH_PORT,
) -> None:
    """A byte stream to ``127.0.0.1:port`` inside a kernel (main1, sshd's port by default):
    what ``troupe session tunnel`` (an OpenSSH ``ProxyCommand``) and ``forward`` use.

    Protocol: :mod:`troupe.api.pipe`; the stream ends when the kernel's side closes, and a
    client's ``{"eof": true}`` half-closes it (the port's program reads EOF). Nothing listening
    on the port: ``{"stderr": ...}`` then ``{"exit_code": 1}``.
    """

    def command() -> list[str]:
        _check_kernel(kernel)
        if not 1 <= port <= 65535:
            raise Invalid.field_rule("port", "a port number, 1-65535")
        return relay_command(port)

    await _serve(ws, ref, kernel, command)


@router.websocket("/sessions/{ref}/archive")
async def session_archive(
    ws: WebSocket,
    ref: str,
    path: str,
    op: Literal["get", "put"] = "get",
    kernel: str = "main1",
    name: str = "",
) -> None:
    """Files of a kernel as a tar stream, as user ``work`` (what ``troupe session cp`` uses).

    ``op=get``: the server sends ``path`` (a file or a directory, relative to /home/work) as an
    archive. ``op=put``: the client sends an archive whose top entry is ``name``; it is
    unpacked into ``path`` if that is a directory, else it becomes ``path``. Protocol:
    :mod:`troupe.api.pipe`; failures come as ``{"stderr": ...}`` and a non-zero exit code.
    """

    def command() -> list[str]:
        _check_kernel(kernel)
        if not path or len(path) > MAX_PATH or "\0" in path:
            raise Invalid.field_rule("path", f"a path of 1 to {MAX_PATH} characters, no NUL")
        if op == "put" and (not name or "/" in name or name in (".", "..") or "\0" in name):
            raise Invalid.field_rule("name", "the archive's top entry: a plain file name")
        return copy_command(op, path, name)

    await _serve(ws, ref, kernel, command)


def _check_kernel(kernel: str) -> None:
    if not KERNEL.fullmatch(kernel):
        raise Invalid.field_rule("kernel", "a kernel's hostname: main1, sub1, worker2, ...")
