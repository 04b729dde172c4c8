"""The client end of a kernel terminal: the WebSocket protocol of troupe.api.shell on the
local terminal (raw mode, window size, piped stdin)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection


def shell_url(api_url: str, ref: str, kernel: str) -> str:
    from troupe.client.paths import session_path
    from troupe.client.pipe import ws_url

    return ws_url(api_url, session_path(ref, "shell"), kernel=kernel)


def _pump_stdin(conn: ClientConnection, fd: int, is_tty: bool) -> None:
    """Forwards stdin as binary frames; at the end of piped input, sends Ctrl-D (EOF)."""
    from websockets.exceptions import ConnectionClosed

    try:
        while True:
            data = os.read(fd, 65536)
            if not data:
                if not is_tty:
                    conn.send(b"\x04")
                return
            conn.send(data)
    except (OSError, ConnectionClosed):
        return


def _run_shell(conn: ClientConnection, is_tty: bool, resize: threading.Event) -> int | str:
    """The terminal loop: an exit code, or an error message. ``resize``: send the size."""
    from websockets.exceptions import ConnectionClosed

    out = sys.stdout.buffer
    threading.Thread(
        target=_pump_stdin, args=(conn, sys.stdin.fileno(), is_tty), daemon=True
    ).start()
    while True:
        if resize.is_set():
            resize.clear()
            size = shutil.get_terminal_size()
            with contextlib.suppress(ConnectionClosed):  # recv reports the closing
                conn.send(json.dumps({"resize": [size.lines, size.columns]}))
        try:
            msg = conn.recv(timeout=0.2)
        except TimeoutError:
            continue
        except ConnectionClosed as e:
            rcvd = e.rcvd
            detail = (
                f" (code {rcvd.code}{': ' + rcvd.reason if rcvd.reason else ''})" if rcvd else ""
            )
            return f"the shell connection closed without an exit code{detail}"
        if isinstance(msg, bytes):
            out.write(msg)
            out.flush()
            continue
        try:
            data = json.loads(msg)
        except ValueError:
            continue
        if isinstance(data, dict) and "exit_code" in data:
            return int(data["exit_code"])
        if isinstance(data, dict) and "error" in data:
            err = data["error"]
            return str(err.get("message", err) if isinstance(err, dict) else err)


def open_terminal(url: str, key: str | None) -> int | str:
    """Runs a terminal at ``url`` until it ends: its exit code, or an error message."""
    from websockets.exceptions import InvalidHandshake, InvalidURI
    from websockets.sync.client import connect

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        conn = connect(url, additional_headers=headers, open_timeout=30, legacy=True)
    except (OSError, InvalidHandshake, InvalidURI, TimeoutError) as e:
        return f"cannot open a shell at {url}: {e}"

    fd = sys.stdin.fileno()
    is_tty = os.isatty(fd)
    resize = threading.Event()
    resize.set()  # the size goes first
    old_handler = signal.signal(signal.SIGWINCH, lambda *_: resize.set())
    saved: list[Any] | None = None
    result: int | str
    try:
        if is_tty:
            import termios
            import tty

            saved = termios.tcgetattr(fd)
            tty.setraw(fd)
        result = _run_shell(conn, is_tty, resize)
    except KeyboardInterrupt:
        result = 130
    finally:
        if saved is not None:
            import termios

            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        signal.signal(signal.SIGWINCH, old_handler)
        conn.close()
    return result
