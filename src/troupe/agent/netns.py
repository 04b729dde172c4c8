"""Tunnels to a port in a kernel without ``docker exec``: a TCP connection to
``127.0.0.1:PORT`` made inside the kernel's network namespace (Linux ``setns``).

The runner's ``relay.sh`` (``docker exec``) is the portable way, but every byte then crosses
the engine's multiplexed exec stream (dockerd and containerd's shim copy it in 32 KiB frames)
and a relay process in the kernel: the app proxy's throughput was 24-75% of direct access. An
agent that may enter namespaces (root, as with the engine's socket it usually is) instead
connects from a short-lived thread of its own that joins the kernel's network namespace only
for ``connect``; the socket stays in that namespace and the agent reads and writes it
directly. What the app sees is the same: a connection from ``127.0.0.1`` in ``main1``.

Whenever this cannot be done for sure, :class:`Unavailable` is raised and the caller uses the
relay: not Linux, no right to ``setns``, no ``/proc`` of the engine's processes, or a process
whose cgroup does not name the container (another PID namespace than the engine's: its pid
could be another process), so a tunnel never lands in the wrong namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import socket
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import aiodocker
from aiodocker.exceptions import DockerError

from troupe.agent import exec as execs
from troupe.api.pipe import RUNNER_DIR, STDERR, STDOUT, Pipe

T = TypeVar("T")
CLONE_NEWNET = 0x40000000
#: Read size from the app's socket (a few of the engine's 32 KiB frames at once).
CHUNK = 256 * 1024
CONNECT_SECONDS = 10.0


class Unavailable(Exception):
    """This agent cannot enter the kernel's network namespace (use the relay)."""


def relay_port(command: list[str]) -> int | None:
    """The port of a relay command (:func:`troupe.api.pipe.relay_command`), else None."""
    if len(command) == 3 and command[:2] == ["/bin/sh", f"{RUNNER_DIR}/relay.sh"]:
        return int(command[2]) if command[2].isdigit() else None
    return None


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise Unavailable(f"setns: {os.strerror(errno)}")


def _connect_in(pid: int, container_id: str, port: int) -> socket.socket | OSError:
    """Run in a thread of its own: a socket connected to ``127.0.0.1:port`` in the network
    namespace of process ``pid`` (checked to be the container's), or the connect's error."""
    try:
        target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    except OSError as e:
        raise Unavailable(f"/proc/{pid}/ns/net: {e.strerror}") from e
    try:
        try:
            with open(f"/proc/{pid}/cgroup", encoding="utf-8") as f:
                ours = container_id in f.read()
        except OSError as e:
            raise Unavailable(f"/proc/{pid}/cgroup: {e.strerror}") from e
        if not ours:  # (opened first, checked after: the fd is the container's namespace)
            raise Unavailable(f"process {pid} is not the container's here")
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            _setns(target)
            try:
                return socket.create_connection(("127.0.0.1", port), CONNECT_SECONDS)
            except OSError as e:
                return e
            finally:
                _setns(own)  # (if this failed, the thread ends with the error: it is ours)
        finally:
            os.close(own)
    finally:
        os.close(target)


async def _in_own_thread(fn: Callable[[], T]) -> T:
    """``fn()`` in a new thread, not the shared pool's: a thread that changed namespaces
    never runs anything else."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if done.done():  # (the caller gave up: a socket made meanwhile is closed)
            if isinstance(result, socket.socket):
                result.close()
        elif error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)

    def run() -> None:
        try:
            result = fn()
        except BaseException as e:
            loop.call_soon_threadsafe(settle, None, e)
        else:
            loop.call_soon_threadsafe(settle, result, None)

    threading.Thread(target=run, name="troupe-netns", daemon=True).start()
    return await done


class SocketPipe:
    """A :class:`troupe.api.pipe.Pipe` over a connected socket: what ``relay.sh`` does, in
    the agent. ``error`` set: nothing accepted the connection; the pipe says so on stderr
    (relay.sh's words) and ends with code 1."""

    def __init__(
        self,
        reader: asyncio.StreamReader | None,
        writer: asyncio.StreamWriter | None,
        error: str | None = None,
    ) -> None:
        self._reader, self._writer = reader, writer
        self._error = error

    async def read(self) -> tuple[int, bytes] | None:
        if self._error is not None:
            error, self._error = self._error, ""
            return (STDERR, error.encode()) if error else None
        assert self._reader is not None
        try:
            data = await self._reader.read(CHUNK)
        except OSError:
            return None
        return (STDOUT, data) if data else None

    async def write(self, data: bytes) -> None:
        if self._writer is None:
            return
        self._writer.write(data)
        await self._writer.drain()

    async def close_input(self) -> None:
        if self._writer is not None and self._writer.can_write_eof():
            with contextlib.suppress(OSError):
                self._writer.write_eof()

    async def exit_code(self) -> int:
        return 0 if self._writer is not None else 1

    async def aclose(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()


@contextlib.asynccontextmanager
async def relay_socket(
    pid: int, container_id: str, hostname: str, port: int
) -> AsyncIterator[SocketPipe]:
    """A pipe to ``127.0.0.1:port`` of the container whose first process is ``pid``;
    :class:`Unavailable` when this agent cannot make it (the caller then execs the relay)."""
    if not pid:
        raise Unavailable("the container has no process")
    got = await _in_own_thread(lambda: _connect_in(pid, container_id, port))
    if isinstance(got, OSError):
        why = got.strerror or str(got)
        yield SocketPipe(None, None, f"{hostname}: nothing accepts connections on port {port}"
                                     f" ({why})\n")  # fmt: skip
        return
    got.setblocking(False)
    reader, writer = await asyncio.open_connection(sock=got, limit=CHUNK)
    pipe = SocketPipe(reader, writer)
    try:
        yield pipe
    finally:
        await pipe.aclose()


#: ``TROUPE_TUNNEL_NETNS=0`` in the agent's environment: tunnels always exec the relay.
ENABLED = os.environ.get("TROUPE_TUNNEL_NETNS", "1") != "0"
log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def open_pipe(
    docker: aiodocker.Docker, container_id: str, command: list[str], user: str = "work"
) -> AsyncIterator[Pipe]:
    """``command`` in the container (:func:`troupe.agent.exec.open_pipe`), except a relay,
    which becomes a socket in the kernel's network namespace when this agent can make one."""
    async with contextlib.AsyncExitStack() as stack:
        pipe: Pipe | None = None
        port = relay_port(command) if ENABLED else None
        if port is not None:
            try:
                info = await docker.containers.container(container_id).show()
                state, config = info.get("State") or {}, info.get("Config") or {}
                where = (int(state.get("Pid") or 0), container_id, config.get("Hostname", ""))
                pipe = await stack.enter_async_context(relay_socket(*where, port))
            except (Unavailable, DockerError, OSError) as e:
                log.debug("tunnel to port %s of %s: exec's relay (%s)", port, container_id, e)
        if pipe is None:
            pipe = await stack.enter_async_context(
                execs.open_pipe(docker, container_id, command, user)
            )
        yield pipe
