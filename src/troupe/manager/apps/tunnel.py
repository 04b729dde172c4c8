"""Connections to a port in a kernel: the tunnel of ``troupe session forward`` (the agent's
pipe running the runner's ``relay.sh``, manager -> agent -> ``docker exec``), kept open.

Opening a tunnel costs an exec in the kernel (tens of milliseconds), so the proxy speaks
HTTP/1.1 with keep-alive over them through an :class:`httpcore.AsyncConnectionPool` per
(kernel, port) whose network backend opens tunnels instead of sockets: a request reuses an
idle tunnel, and a pool nobody used for :data:`IDLE_SECONDS` is closed with its tunnels (each
holds a relay process in the kernel). No port is published anywhere, and it works for a
kernel on any host, since the agent of that host runs the relay.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import httpcore

from troupe.api.agent import AgentBackend
from troupe.api.pipe import STDERR, Pipe, relay_command

#: A pool (and its tunnels) unused this long is closed.
IDLE_SECONDS = 60.0
#: An idle tunnel is closed after this long (httpcore's keep-alive expiry).
KEEPALIVE_SECONDS = 30.0
#: Tunnels open at once to one app (a browser opens about 6 per origin; long polls add some).
MAX_TUNNELS = 32
#: Chunks read ahead from a tunnel (each up to 64 KiB from the relay, 256 KiB from a socket in
#: the kernel's namespace, troupe.agent.netns): memory stays bounded.
READ_AHEAD = 4
#: Longest kept of a relay's diagnostics.
MAX_STDERR = 4096


class TunnelStream(httpcore.AsyncNetworkStream):
    """A tunnel as httpcore's byte stream. A reader task fills a small queue, so that
    httpcore can ask whether an idle tunnel was closed by the app (``is_readable``) before it
    reuses it, and a relay that found nothing listening fails with its own words."""

    def __init__(self, stack: contextlib.AsyncExitStack, pipe: Pipe) -> None:
        self._stack, self._pipe = stack, pipe
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue(READ_AHEAD)
        self._buffer = b""
        self._offset = 0  # (where the unread part of _buffer begins)
        self._eof = False
        self._received = False
        self.stderr = bytearray()
        self._reader = asyncio.ensure_future(self._pump())

    async def _pump(self) -> None:
        try:
            while (item := await self._pipe.read()) is not None:
                stream, data = item
                if stream == STDERR:
                    self.stderr += data[: MAX_STDERR - len(self.stderr)]
                elif data:
                    await self._queue.put(data)
        except Exception as e:  # the agent went away: the app's side ends here
            self.stderr += str(e).encode()[:MAX_STDERR]
        await self._queue.put(None)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if not self._buffer and not self._eof:
            try:
                item = await asyncio.wait_for(self._queue.get(), timeout)
            except TimeoutError as e:
                raise httpcore.ReadTimeout("no answer from the app in time") from e
            if item is None:
                self._eof = True
                if not self._received and self.stderr:
                    raise httpcore.ConnectError(self.stderr.decode(errors="replace").strip())
            else:
                self._buffer, self._offset, self._received = item, 0, True
        if self._offset == 0 and len(self._buffer) <= max_bytes:  # (the usual case: no copy)
            data, self._buffer = self._buffer, b""
            return data
        end = self._offset + max_bytes  # (a chunk larger than httpcore reads: one copy each)
        data = self._buffer[self._offset : end]
        if end >= len(self._buffer):
            self._buffer, self._offset = b"", 0
        else:
            self._offset = end
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if self._eof:
            raise httpcore.WriteError("the app closed the connection")
        try:
            await asyncio.wait_for(self._pipe.write(buffer), timeout)
        except TimeoutError as e:
            raise httpcore.WriteTimeout("the app did not take the request in time") from e
        except Exception as e:
            raise httpcore.WriteError(str(e)) from e

    async def send_eof(self) -> None:
        """Half-closes: the app reads the end of its input."""
        with contextlib.suppress(Exception):
            await self._pipe.close_input()

    async def aclose(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(BaseException):
            await self._reader
        with contextlib.suppress(Exception):
            await self._stack.aclose()

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # asked of idle tunnels: true when the app closed it
            return self._eof or len(self._buffer) > self._offset or not self._queue.empty()
        return None


async def open_tunnel(agent: AgentBackend, container_id: str, port: int) -> TunnelStream:
    """A tunnel to ``127.0.0.1:port`` in the container (the agent's refusal raised here)."""
    stack = contextlib.AsyncExitStack()
    try:
        pipe = await stack.enter_async_context(agent.pipe(container_id, relay_command(port)))
    except BaseException:
        await stack.aclose()
        raise
    return TunnelStream(stack, pipe)


class TunnelBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend for one app: every "TCP connection" is a tunnel."""

    def __init__(self, agent: AgentBackend, container_id: str, port: int) -> None:
        self.agent, self.container_id, self.port = agent, container_id, port

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            return await asyncio.wait_for(
                open_tunnel(self.agent, self.container_id, self.port), timeout
            )
        except TimeoutError as e:
            raise httpcore.ConnectTimeout("the agent did not open the tunnel in time") from e

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


@dataclass
class _Pool:
    pool: httpcore.AsyncConnectionPool
    used: float


@dataclass
class Tunnels:
    """The pools of kept-open tunnels, by (agent, container, port), of one manager; a sweep
    every :data:`IDLE_SECONDS` closes the pools nobody used since (the app's tab was closed)."""

    pools: dict[tuple[int, str, int], _Pool] = field(default_factory=dict)
    _sweeper: asyncio.Task[None] | None = None

    def pool(
        self, agent: AgentBackend, container_id: str, port: int
    ) -> httpcore.AsyncConnectionPool:
        now = time.monotonic()
        self._close_idle(now)
        if self._sweeper is None:
            self._sweeper = asyncio.ensure_future(self._sweep())
        key = (id(agent), container_id, port)
        entry = self.pools.get(key)
        if entry is None:
            backend = TunnelBackend(agent, container_id, port)
            pool = httpcore.AsyncConnectionPool(
                max_connections=MAX_TUNNELS,
                keepalive_expiry=KEEPALIVE_SECONDS,
                network_backend=backend,
            )
            entry = self.pools[key] = _Pool(pool, now)
        entry.used = now
        return entry.pool

    def _close_idle(self, now: float) -> None:
        for key in [k for k, p in self.pools.items() if now - p.used > IDLE_SECONDS]:
            pool = self.pools.pop(key).pool
            if not any(not c.is_idle() for c in pool.connections):
                _spawn_close(pool)
            else:  # still streaming (a long download): kept
                self.pools[key] = _Pool(pool, now)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(IDLE_SECONDS)
            self._close_idle(time.monotonic())

    async def aclose(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        pools, self.pools = list(self.pools.values()), {}
        for p in pools:
            with contextlib.suppress(Exception):
                await p.pool.aclose()


_closing: set[asyncio.Task[None]] = set()


def _spawn_close(pool: httpcore.AsyncConnectionPool) -> None:
    async def close() -> None:
        with contextlib.suppress(Exception):
            await pool.aclose()

    task = asyncio.ensure_future(close())
    _closing.add(task)
    task.add_done_callback(_closing.discard)
