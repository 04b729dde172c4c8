"""The two commands people run in loops, ``troupe session list`` and ``troupe session exec NAME
-- CMD``, answered without Typer, Rich or httpx.

Loading those three costs a short command about 300 ms on the 2-core machine, where the
targets are 150 ms for ``session list`` and twice ``docker exec`` for ``exec``
(docs/performance.md, CLI). :func:`run` answers the plainest forms of the two with the standard
library's ``http.client`` and hands everything else to the full command line (it returns
None): other options, ``--json``, ``--help``, anything it would not parse exactly as Typer
does (a unit test compares the two parsers), TLS or an HTTP proxy, more than one page of
sessions, and every error answer that comes before a command ran - so that the full command
(:mod:`troupe.client.cli.sessions`, :mod:`troupe.client.cli.session_exec`) reports errors in
its one way. Both print the same: the table of :mod:`troupe.client.cli.table`, the exec wire
format of :mod:`troupe.api.exec`.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from troupe.api import exec as exec_frames
from troupe.api.errors import TroupeError
from troupe.client.cli.table import SESSION_COLUMNS, print_table, session_row
from troupe.client.paths import session_path
from troupe.client.settings import load_settings, plain_http

if TYPE_CHECKING:
    from http.client import HTTPResponse

LIST_FLAGS = frozenset({"-a", "--all"})
#: ``session exec`` options that take a value, and the parameter each sets.
EXEC_OPTIONS = {"-k": "kernel", "--kernel": "kernel", "-u": "user", "--user": "user"}
#: Sessions asked for at once (as the SDK asks); a longer list is left to the SDK's pages.
PAGE = 500
#: What the full command says when the output ends without an exit code.
NO_EXIT_CODE = "the command's output ended without an exit code"


def run(argv: list[str]) -> int | None:
    """The exit code of a command answered here, or None when the full CLI must answer it."""
    code = None
    try:
        if argv[:2] == ["session", "list"] and set(argv[2:]) <= LIST_FLAGS:
            code = _list(all_=bool(argv[2:]))
        elif argv[:2] == ["session", "exec"]:
            parsed = exec_args(argv[2:])
            if parsed is not None:
                code = _exec(**parsed)
    except KeyboardInterrupt:  # as the full command: no traceback, 128 + SIGINT
        return 130
    if code is None and sys.modules.get("http.client") in _WITHOUT_TLS:
        del sys.modules["http.client"]  # the full command line gets the whole module
    return code


def exec_args(args: list[str]) -> dict[str, Any] | None:
    """``session exec``'s parameters (name, command, kernel, user) from what follows ``exec``,
    where the form is plain: options with a separate or ``=`` value, the name, ``--``, then a
    command; None for anything else."""
    params: dict[str, Any] = {"name": None, "kernel": "main1", "user": "work"}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            params["command"] = args[i + 1 :]
            break
        option, eq, value = arg.partition("=")
        if option in EXEC_OPTIONS and eq:
            params[EXEC_OPTIONS[option]] = value
            i += 1
        elif arg in EXEC_OPTIONS and i + 1 < len(args):
            params[EXEC_OPTIONS[arg]] = args[i + 1]
            i += 2
        elif not arg.startswith("-") and params["name"] is None:
            params["name"] = arg
            i += 1
        else:
            return None
    name, command = params["name"], params.get("command")
    if not name or not command:
        return None
    if exec_frames.plain_request(command, params["kernel"], params["user"]) is None:
        return None  # the full command reports what is wrong with it
    return params


#: The ``http.client`` loaded here without ``ssl``, if any.
_WITHOUT_TLS: list[ModuleType] = []


def _http_client() -> ModuleType:
    """``http.client`` without its HTTPS half: it imports ``ssl`` (OpenSSL: ~20 ms) only to
    define ``HTTPSConnection``, which plain HTTP never uses; ``ssl`` itself stays importable."""
    if "http.client" in sys.modules:
        return sys.modules["http.client"]
    blocked = "ssl" not in sys.modules
    if blocked:
        sys.modules["ssl"] = None  # type: ignore[assignment]  # import ssl -> ImportError
    try:
        import http.client
    finally:
        if blocked:
            del sys.modules["ssl"]
            _WITHOUT_TLS.append(http.client)
    return http.client


def _open(
    method: str, path: str, body: Any = None, timeout: float | None = 60.0
) -> tuple[str, HTTPResponse] | None:
    """``(url, response)`` of a request answered 200, or None (not reached, refused, not
    plain HTTP): the full command then makes it again and reports what it gets.

    The request goes out before ``http.client`` loads: its head is a few lines written here,
    its answer is read by ``http.client.HTTPResponse``, and the ~40 ms that loading takes
    overlap the server's work (an exec: ~80 ms) instead of coming before it."""
    url, key = load_settings()
    parts = urlsplit(url)
    data = b"" if body is None else json.dumps(body).encode()
    head = [
        f"{method} {parts.path.rstrip('/')}/v1{path} HTTP/1.1",
        f"Host: {parts.netloc}",
        "Accept-Encoding: identity",
        "Connection: close",
        *([f"Authorization: Bearer {key}"] if key else []),
        *(["Content-Type: application/json", f"Content-Length: {len(data)}"] if data else []),
    ]
    plain = all(h.isascii() and h.isprintable() for h in head)  # no CR/LF smuggled in
    if not plain or not plain_http(url) or parts.username:
        return None  # TLS, proxies and odd settings: the SDK's way
    try:
        sock = socket.create_connection((parts.hostname or "", parts.port or 80), timeout)
        with sock:  # closed once the response is too (the response holds its own reference)
            sock.sendall("\r\n".join(head).encode() + b"\r\n\r\n" + data)
            resp = _http_client().HTTPResponse(sock, method=method)
            resp.begin()
    except (OSError, ValueError, _http_client().HTTPException):
        return None
    if resp.status != 200:
        resp.close()
        return None
    return url, resp


def _list(all_: bool) -> int | None:
    opened = _open("GET", f"/sessions?all={str(all_).lower()}&limit={PAGE}")
    if opened is None:
        return None
    _, resp = opened
    with resp:
        if 'rel="next"' in (resp.getheader("Link") or ""):
            return None
        try:
            sessions = json.loads(resp.read())
        except (OSError, _http_client().HTTPException, ValueError):
            return None
    try:
        print_table(SESSION_COLUMNS, [session_row(s) for s in sessions])
    except BrokenPipeError:
        quiet_stdout()
        return 141
    return 0


def _exec(name: str, command: list[str], kernel: str, user: str) -> int | None:
    body = exec_frames.plain_request(command, kernel, user)
    try:
        path = session_path(name, "exec")
    except TroupeError:
        return None  # the full command says what is wrong with the name
    # no time limit, as the SDK's exec: a command may be silent for hours
    opened = _open("POST", path, body, timeout=None)
    if opened is None:
        return None
    url, resp = opened
    return _stream(url, resp)


def _stream(url: str, resp: HTTPResponse) -> int:
    """Copies the command's output to stdout as it comes; its exit code."""
    out = sys.stdout.buffer
    code: int | None = None
    try:
        with resp:
            for line in resp:
                item = exec_frames.decode(line)
                if isinstance(item, exec_frames.ExecExit):
                    code = item.exit_code
                elif item is not None:
                    out.write(item.data)
                    out.flush()
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        quiet_stdout()
        return 141  # as if killed by SIGPIPE
    except TroupeError as e:  # the server's last line says what went wrong
        return _error(e.message)
    except (OSError, _http_client().HTTPException) as e:  # the SDK's words for a lost connection
        return _error(f"cannot reach troupe at {url}: {e}")
    if code is None:
        return _error(NO_EXIT_CODE)
    return code


def _error(message: str) -> int:
    from troupe.client.cli.output import print_error  # Rich: only when there is an error

    print_error(message)
    return 1


def quiet_stdout() -> None:
    """After a broken pipe (``| head``), keeps Python from complaining at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
