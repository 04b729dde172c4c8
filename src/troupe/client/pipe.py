"""The client end of :mod:`troupe.api.pipe`: tunnels to a kernel's ports and tar streams of its
files, over a WebSocket to the manager (synchronous, threads; ``websockets`` is imported when
first used, so the CLI pays for it only in the commands that need it).

- :func:`tunnel_stdio`: stdin/stdout to a port (``troupe session tunnel``, an OpenSSH
  ``ProxyCommand``);
- :func:`serve_forward`: a local listener whose every connection is one tunnel (``forward``);
- :func:`download` / :func:`upload`: ``troupe session cp``, streamed both ways (constant memory).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sys
import tarfile
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO
from urllib.parse import urlencode

from troupe.api.errors import TroupeError, from_wire
from troupe.api.pipe import control
from troupe.client import tarsafe

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection

#: Bytes per frame the client sends (the servers take frames up to 1 MiB).
CHUNK = 256 * 1024
EOF_FRAME = json.dumps({"eof": True})


class PipeFailed(TroupeError):
    """The command behind a pipe failed: its exit code and what it said on stderr."""

    code = "pipe_failed"

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def ws_url(api_url: str, route: str, /, **params: str | int) -> str:
    """``route`` (under /v1) of the manager at ``api_url`` as a ws:// or wss:// URL."""
    base = api_url.rstrip("/")
    if base.startswith("https://"):
        base = "wss://" + base.removeprefix("https://")
    elif base.startswith("http://"):
        base = "ws://" + base.removeprefix("http://")
    query = urlencode({k: str(v) for k, v in params.items()})
    return f"{base}/v1{route}" + (f"?{query}" if query else "")


class PipeClient:
    """One open pipe: send input, read output until the command's exit code arrives.

    ``on_stderr`` gets the command's diagnostics as they come (default: kept in
    :attr:`stderr`); a refusal before the command started raises the manager's domain error.
    """

    def __init__(
        self, url: str, key: str | None, on_stderr: Callable[[str], None] | None = None
    ) -> None:
        from websockets.exceptions import InvalidHandshake, InvalidURI
        from websockets.sync.client import connect

        headers = {"Authorization": f"Bearer {key}"} if key else {}
        try:
            # legacy=True: the connection outlives this call (closed by :meth:`close`), which
            # websockets 17 asks to be said explicitly
            # (no per-message deflate: the bytes are a program's, often compressed already,
            # and deflating every frame cost the manager more CPU than relaying it)
            self.conn: ClientConnection = connect(
                url,
                additional_headers=headers,
                open_timeout=30,
                max_size=4 * 1024 * 1024,
                legacy=True,
                compression=None,
            )
        except (OSError, InvalidHandshake, InvalidURI, TimeoutError) as e:
            raise PipeFailed(f"cannot connect to {url.split('?')[0]}: {e}") from None
        self.stderr: list[str] = []
        self._on_stderr = on_stderr or self.stderr.append
        self.exit_code: int | None = None

    def send(self, data: bytes) -> None:
        self.conn.send(data)

    def send_eof(self) -> None:
        self.conn.send(EOF_FRAME)

    def recv(self) -> bytes | None:
        """The next output chunk; None once the output ended (then :attr:`exit_code` is set,
        or stays None if the connection broke)."""
        from websockets.exceptions import ConnectionClosed

        while True:
            try:
                msg = self.conn.recv()
            except ConnectionClosed:
                return None
            if isinstance(msg, bytes):
                return msg
            data = control(msg)
            if isinstance(data.get("stderr"), str):
                self._on_stderr(data["stderr"])
            elif "exit_code" in data:
                with contextlib.suppress(TypeError, ValueError):
                    self.exit_code = int(data["exit_code"])
            elif isinstance(data.get("error"), dict):
                close = self.conn.close_code or 4500
                raise from_wire(close - 4000 if close >= 4000 else 500, data, "refused")

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> PipeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def failure(self, what: str) -> PipeFailed | None:
        """Why the command failed (None if it exited 0)."""
        if self.exit_code == 0:
            return None
        said = "".join(self.stderr).strip()
        if self.exit_code is None:
            return PipeFailed(f"{what}: the connection ended early" + (f": {said}" if said else ""))
        return PipeFailed(
            said or f"{what}: exit code {self.exit_code}", exit_code=self.exit_code or 1
        )


def _feed(pipe: PipeClient, read: Callable[[], bytes]) -> None:
    """Sends what ``read`` gives until it gives b"" (then half-closes) or fails."""
    from websockets.exceptions import ConnectionClosed

    try:
        while data := read():
            pipe.send(data)
        pipe.send_eof()
    except (OSError, ConnectionClosed):
        pass


def tunnel_stdio(url: str, key: str | None) -> int:
    """stdin -> the kernel's port -> stdout until the port's side closes: 0, or the relay's
    exit code (its message on stderr), or 255 when the connection broke."""

    def err(text: str) -> None:
        sys.stderr.write(text)
        sys.stderr.flush()

    with PipeClient(url, key, on_stderr=err) as pipe:
        stdin = sys.stdin.fileno()
        threading.Thread(
            target=_feed, args=(pipe, lambda: os.read(stdin, CHUNK)), daemon=True
        ).start()
        out = sys.stdout.fileno()
        while (data := pipe.recv()) is not None:
            while data:
                data = data[os.write(out, data) :]
    return 255 if pipe.exit_code is None else pipe.exit_code


def _relay_socket(sock: socket.socket, url: str, key: str | None) -> None:
    """One forwarded connection: the local socket <-> a tunnel, half-closes both ways."""

    def err(text: str) -> None:
        sys.stderr.write(text)

    try:
        with sock, PipeClient(url, key, on_stderr=err) as pipe:
            threading.Thread(
                target=_feed, args=(pipe, lambda: sock.recv(CHUNK)), daemon=True
            ).start()
            while (data := pipe.recv()) is not None:
                sock.sendall(data)
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
    except (OSError, TroupeError) as e:
        sys.stderr.write(f"forward: {e}\n")


def listen(local: int, host: str = "127.0.0.1") -> socket.socket:
    """A listening socket on ``host:local`` (0: any free port)."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, local))
    srv.listen(64)
    return srv


def serve_forward(srv: socket.socket, url: str, key: str | None) -> None:
    """Accepts on ``srv`` until it is closed; each connection gets its own tunnel to ``url``."""
    while True:
        try:
            sock, _ = srv.accept()
        except OSError:
            return
        threading.Thread(target=_relay_socket, args=(sock, url, key), daemon=True).start()


class _Reader:
    """A file-like ``read(n)`` over a pipe's output, for tarfile's stream mode."""

    def __init__(self, pipe: PipeClient) -> None:
        self._pipe, self._buf, self._done = pipe, bytearray(), False

    def read(self, n: int = -1) -> bytes:
        while not self._done and (n < 0 or len(self._buf) < n):
            data = self._pipe.recv()
            if data is None:
                self._done = True
            else:
                self._buf += data
        if n < 0:
            n = len(self._buf)
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out


class _Writer:
    """A file-like ``write`` that sends CHUNK-sized frames, for tarfile's stream mode."""

    def __init__(self, pipe: PipeClient) -> None:
        self._pipe, self._buf = pipe, bytearray()

    def write(self, data: bytes) -> int:
        self._buf += data
        while len(self._buf) >= CHUNK:
            self._pipe.send(bytes(self._buf[:CHUNK]))
            del self._buf[:CHUNK]
        return len(data)

    def flush(self) -> None:
        if self._buf:
            self._pipe.send(bytes(self._buf))
            self._buf.clear()


def download(url: str, key: str | None, remote_name: str, dest: Path) -> None:
    """Unpacks the archive at ``url`` (top entry ``remote_name``) into ``dest`` if that is a
    directory, else as ``dest``: into a fresh directory beside it first, checked entry by entry
    (:mod:`troupe.client.tarsafe`), then moved into place; a refused archive leaves nothing."""
    into = dest.is_dir()
    parent = dest if into else dest.parent
    if not parent.is_dir():
        raise PipeFailed(f"no such directory: {parent}")
    with PipeClient(url, key) as pipe:
        receive(_Reader(pipe), remote_name, dest, lambda: _finish(pipe))


def _finish(pipe: PipeClient) -> None:
    """Reads the pipe to its end (the archive's padding, then the exit code); the command's
    failure, if it failed."""
    while pipe.recv() is not None:
        pass
    why = pipe.failure("copy")
    if why is not None:
        raise why


def receive(
    stream: _Reader | BinaryIO, remote_name: str, dest: Path, finish: Callable[[], None]
) -> None:
    """:func:`download` once connected: unpacks the archive read from ``stream``, calls
    ``finish`` (which raises the sender's failure), then moves the result into place. A
    refused entry ends it at once: the rest of the archive is not read."""
    into = dest.is_dir()
    parent = dest if into else dest.parent
    tmp = Path(tempfile.mkdtemp(prefix=".troupe-cp.", dir=parent))
    try:
        try:
            with tarfile.open(fileobj=stream, mode="r|") as tar:  # type: ignore[call-overload]
                tarsafe.unpack(tar, tmp, remote_name)
        except tarfile.ReadError:
            finish()  # nothing came: the command's failure says why
            raise PipeFailed("copy: no archive came from the kernel") from None
        except tarsafe.BrokenArchive:
            finish()  # the command's failure, if it failed, says more than what it sent
            raise
        except OSError as e:
            raise PipeFailed(f"cannot write under {parent}: {e.strerror or e}") from None
        finish()
        got, target = tmp / remote_name, dest / remote_name if into else dest
        if not got.is_symlink() and not got.exists():
            raise PipeFailed(f"copy: the archive from the kernel holds no {remote_name!r}")
        try:
            if _real_dir(got) and _real_dir(target):
                # into an existing directory of that name: merged, as tar and docker cp do
                shutil.copytree(got, target, symlinks=True, dirs_exist_ok=True)
            else:
                os.replace(got, target)
        except OSError as e:
            raise PipeFailed(f"cannot write {target}: {e.strerror or e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _real_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def upload(url: str, key: str | None, src: Path) -> None:
    """Sends ``src`` (a file or a directory) as an archive whose top entry is its name."""
    from websockets.exceptions import ConnectionClosed

    if not src.exists():
        raise PipeFailed(f"no such file or directory: {src}")
    with PipeClient(url, key) as pipe:
        writer = _Writer(pipe)
        try:
            with tarfile.open(fileobj=writer, mode="w|", format=tarfile.GNU_FORMAT) as tar:  # type: ignore[call-overload]
                tar.add(src, arcname=src.name, filter=_plain)
            writer.flush()
            pipe.send_eof()
        except ConnectionClosed:
            pass  # the kernel's side ended early: its exit code and message say why
        while pipe.recv() is not None:
            pass
        why = pipe.failure("copy")
        if why is not None:
            raise why


def _plain(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Entries carry no owner: the kernel's tar makes them ``work``'s."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info
