"""Kernel logs: saved copies after removal, and merging kernels into one prefixed stream.

Every path streams: one kernel's lines pass through as they are read, kernels are merged by a
k-way merge holding one line per kernel, and saved copies are read in pieces in a thread, so
a logs request's memory does not grow with the size of the logs nor with the number of its
kernels beyond one line each (finding N1, docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import re
import shutil
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, NamedTuple

from troupe.api import defaults
from troupe.api.aio import cancel_all
from troupe.manager.log_positions import TIMESTAMP, Position, nanos
from troupe.manager.private_file import private_dir, write_private

#: Characters of a saved log read in one go (in a thread; a merge holds one such piece per
#: kernel), and the longest line passed on whole (longer ones go in pieces, as the agent
#: sends them).
CHUNK = 16 * 1024
MAX_LINE = 64 * 1024
#: Lines passed on between two yields to the event loop: a merge of sources that never wait
#: (saved copies read ahead, an agent's buffered answer) must not hold the loop.
FAIR_EVERY = 256
#: Seconds a merge may run before it pauses for :data:`FAIR_PAUSE`. A yield alone is not
#: enough: the database's worker threads need the interpreter lock too, and a busy loop thread
#: hands it over only every few milliseconds, so another user's list waited out a whole
#: merge (measured in-process: 0.85 s for a 0.9 s merge; with the pause, milliseconds).
FAIR_SLICE, FAIR_PAUSE = 0.01, 0.001


def split_timestamp(line: str) -> tuple[str, str]:
    """Docker's ``2026-11-26T02:18:43.1234Z text`` -> (timestamp, text)."""
    ts, sep, text = line.partition(" ")
    if sep and TIMESTAMP.fullmatch(ts):
        return ts, text
    return "", line


def strip(line: str) -> str:
    text = split_timestamp(line)[1]
    return text if text.endswith("\n") else text + "\n"


class LogLine(NamedTuple):
    """One line of one kernel: its hostname, the engine's timestamp (``""`` if none), the
    text ending in a newline, and where it is (:mod:`troupe.manager.log_positions`): the
    kernel's index in the view, its time in nanoseconds (a line without a timestamp takes its
    predecessor's) and its place in the run of its kernel's lines with that time."""

    host: str
    ts: str
    text: str
    kernel: int = 0
    at: int = 0
    run: int = 1

    def prefixed(self) -> str:
        return f"[{self.host}] {self.text}"


async def close_stream(it: object) -> None:
    aclose: Callable[[], Awaitable[object]] | None = getattr(it, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()


async def stamped(kernel: int, host: str, raw: AsyncIterator[str]) -> AsyncIterator[LogLine]:
    """One kernel's raw lines as :class:`LogLine` s with their positions."""
    at, run = 0, 0
    try:
        async for r in raw:
            ts, text = split_timestamp(r)
            new = nanos(ts) if ts else None
            if new is None or new == at:
                run += 1
            else:
                at, run = new, 1
            yield LogLine(host, ts, text if text.endswith("\n") else text + "\n", kernel, at, run)
    finally:
        await close_stream(raw)


async def resumed(lines: AsyncIterator[LogLine], pos: Position | None) -> AsyncIterator[LogLine]:
    """One kernel's lines after ``pos``: skipped up to and including the first line at that
    position, or up to the first line later than it (that one is sent); then all. Nothing
    after the delivered line is skipped, whatever order the timestamps come in."""
    try:
        if pos is not None:
            async for line in lines:
                if line.at > pos.at:
                    yield line
                    break
                if line.at == pos.at and line.run == pos.run:
                    break
        async for line in lines:
            yield line
    finally:
        await close_stream(lines)


async def fair(lines: AsyncIterator[LogLine], every: int = FAIR_EVERY) -> AsyncIterator[LogLine]:
    """``lines``, letting other tasks run after every ``every`` lines, and other threads after
    every :data:`FAIR_SLICE` of work (a short sleep leaves them the interpreter lock)."""
    n, since = 0, time.monotonic()
    try:
        async for line in lines:
            yield line
            n += 1
            if n % every == 0:
                if time.monotonic() - since < FAIR_SLICE:
                    await asyncio.sleep(0)
                else:
                    await asyncio.sleep(FAIR_PAUSE)
                    since = time.monotonic()
    finally:
        await close_stream(lines)


async def merged(streams: Sequence[AsyncIterator[LogLine]], follow: bool) -> AsyncIterator[LogLine]:
    """Lines of all kernels: by time when not following (a k-way merge of the kernels' streams,
    each already in time order: one line of look-ahead per kernel, ties by kernel order), as
    they come when following. A kernel whose stream fails is left out and the failure raised
    after the others ended."""
    if len(streams) == 1:
        try:
            async for line in streams[0]:
                yield line
        finally:
            await close_stream(streams[0])
        return
    if not follow:
        async for line in _by_time(streams):
            yield line
        return
    queue: asyncio.Queue[LogLine | None] = asyncio.Queue(maxsize=1000)

    async def pump(stream: AsyncIterator[LogLine]) -> None:
        try:
            async for line in stream:
                await queue.put(line)
        finally:
            await queue.put(None)

    tasks = [asyncio.create_task(pump(s)) for s in streams]
    try:
        remaining = len(tasks)
        while remaining:
            item = await queue.get()
            if item is None:
                remaining -= 1
            else:
                yield item
    finally:
        await cancel_all(tasks)
        for s in streams:
            await close_stream(s)


async def _by_time(streams: Sequence[AsyncIterator[LogLine]]) -> AsyncIterator[LogLine]:
    heap: list[tuple[int, int, LogLine]] = []
    failures: list[Exception] = []

    async def pull(order: int) -> None:
        try:
            line = await anext(streams[order])
        except StopAsyncIteration:
            return
        except Exception as e:  # keep the kernels that answer; say it at the end
            failures.append(e)
            return
        heapq.heappush(heap, (line.at, order, line))

    try:
        await asyncio.gather(*(pull(i) for i in range(len(streams))))  # opened together
        while heap:
            _, order, line = heapq.heappop(heap)
            yield line
            await pull(order)
    finally:
        for s in streams:
            await close_stream(s)
    if failures:
        raise failures[0]


#: What a saved log's hostname may look like (agents report them; never a path).
_HOSTNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}\Z")


def tail(text: str, limit: int) -> str:
    """The last ``limit`` bytes of ``text`` (UTF-8), from the first whole line in them."""
    if limit <= 0:
        return ""
    if len(text) * 4 <= limit:  # cannot be over the limit: no encoding needed
        return text
    data = text.encode(errors="replace")  # lone surrogates, if an agent sent any
    if len(data) <= limit:
        return text
    cut = data[-limit:]
    if data[-limit - 1 : -limit] != b"\n":  # starts inside a line: drop that part
        newline = cut.find(b"\n")
        cut = cut[newline + 1 :] if newline >= 0 else cut
    return cut.decode(errors="ignore")


def _open(path: Path) -> IO[str] | None:
    try:
        return path.open(encoding="utf-8", errors="replace", newline="")
    except FileNotFoundError:
        return None


def _read_some(f: IO[str]) -> list[str]:
    """The next lines, about :data:`CHUNK` characters of them; a line longer than
    :data:`MAX_LINE` in pieces."""
    out: list[str] = []
    size = 0
    while size < CHUNK:
        line = f.readline(MAX_LINE)
        if not line:
            break
        out.append(line)
        size += len(line)
    return out


async def read_lines(path: Path) -> AsyncIterator[str]:
    """The lines of a file, read in pieces in a thread (never whole, never on the loop)."""
    f = await asyncio.to_thread(_open, path)
    if f is None:
        return
    try:
        while batch := await asyncio.to_thread(_read_some, f):
            for line in batch:
                yield line
    finally:
        f.close()


#: Suffix of the empty file left for a session whose saved logs were deleted for the budget.
EVICTED = ".evicted"


class LogStore:
    """Logs of removed kernels, one file per kernel: ``<dir>/<session id>/<hostname>.log``.

    They may hold secrets a program printed: directories are 0700, files 0600. Each file keeps
    the last ``limit`` bytes of its kernel's log (the agent caps them too). All of them
    together stay within ``total`` bytes (0: no cap; finding N9, docs/reliability.md): after
    each save, whole sessions' logs are deleted oldest saved first until they fit (the one
    just saved last of all), leaving an empty ``<session id>.evicted`` so that reading them
    says why they are gone. :meth:`save`, :meth:`trim`, :meth:`used` and :meth:`remove` do
    file work: call them in a thread.
    """

    def __init__(self, root: Path, total: int = defaults.SAVED_LOGS_TOTAL) -> None:
        self.root = root
        self.total = total
        self._lock = threading.Lock()
        #: session id -> (when saved, bytes); read from the disk at first need
        self._index: dict[str, tuple[float, int]] | None = None

    def save(
        self,
        session_id: str,
        logs: Mapping[str, str],
        limit: int = defaults.SAVED_LOG_BYTES,
        attempt: int | None = None,
    ) -> None:
        """Saves kernels' logs: of the last attempt, or (with ``attempt``) of a failed attempt
        of a session that restarted (docs/policies.md)."""
        private_dir(self.root)
        d = self.root / session_id
        private_dir(d)
        for host, text in logs.items():
            if _HOSTNAME.match(host):
                write_private(d / _name(host, attempt), tail(text, limit))
        with self._lock:
            index = self._scanned()
            index[session_id] = (time.time(), _size(d))
            self._trim(index)

    def trim(self) -> list[str]:
        """Deletes the oldest sessions' logs until all fit in ``total``; returns their ids."""
        with self._lock:
            return self._trim(self._scanned())

    def used(self) -> int:
        """Bytes of all saved logs (as this store counts them)."""
        with self._lock:
            return sum(size for _, size in self._scanned().values())

    def remove(self, session_id: str) -> None:
        """Deletes a session's saved logs (none: nothing to do)."""
        shutil.rmtree(self.root / session_id, ignore_errors=True)
        (self.root / f"{session_id}{EVICTED}").unlink(missing_ok=True)
        with self._lock:
            if self._index is not None:
                self._index.pop(session_id, None)

    def has(self, session_id: str, hostname: str) -> bool:
        return (self.root / session_id / f"{hostname}.log").exists()

    def evicted(self, session_id: str) -> bool:
        """Whether the session's logs were deleted to keep within ``total``."""
        return (self.root / f"{session_id}{EVICTED}").exists()

    def lines(
        self, session_id: str, hostname: str, attempt: int | None = None
    ) -> AsyncIterator[str]:
        """A saved log's lines, streamed (none if there is no such log): the last attempt's,
        or those of the failed ``attempt``."""
        return read_lines(self.root / session_id / _name(hostname, attempt))

    def _scanned(self) -> dict[str, tuple[float, int]]:
        if self._index is None:
            index: dict[str, tuple[float, int]] = {}
            with contextlib.suppress(FileNotFoundError):
                for d in self.root.iterdir():
                    if d.is_dir():
                        index[d.name] = (d.stat().st_mtime, _size(d))
            self._index = index
        return self._index

    def _trim(self, index: dict[str, tuple[float, int]]) -> list[str]:
        if self.total <= 0:
            return []
        used = sum(size for _, size in index.values())
        gone: list[str] = []
        while used > self.total and index:
            oldest = min(index, key=lambda sid: index[sid])
            used -= index.pop(oldest)[1]
            shutil.rmtree(self.root / oldest, ignore_errors=True)
            write_private(self.root / f"{oldest}{EVICTED}", "")  # to say so, not to fail
            gone.append(oldest)
        return gone


def _name(host: str, attempt: int | None) -> str:
    """A saved log's file name: ``main1.log``, or ``main1.attempt0.log`` for a failed one."""
    return f"{host}.log" if attempt is None else f"{host}.attempt{attempt}.log"


def _size(d: Path) -> int:
    total = 0
    with contextlib.suppress(FileNotFoundError):
        for f in d.iterdir():
            with contextlib.suppress(FileNotFoundError):
                total += f.stat().st_size
    return total
