"""Kernel logs: saved copies after removal, and merging kernels into one prefixed stream."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import NamedTuple

from troupe.api import defaults
from troupe.api.aio import cancel_all


def split_timestamp(line: str) -> tuple[str, str]:
    """Docker's ``2026-11-26T02:18:43.1234Z text`` -> (timestamp, text)."""
    ts, sep, text = line.partition(" ")
    if sep and ts[:2].isdigit() and ts.endswith("Z"):
        return ts, text
    return "", line


def strip(line: str) -> str:
    text = split_timestamp(line)[1]
    return text if text.endswith("\n") else text + "\n"


class LogLine(NamedTuple):
    """One line of one kernel: its hostname, the engine's timestamp (``""`` if none) and the
    text, ending in a newline."""

    host: str
    ts: str
    text: str

    @classmethod
    def of(cls, host: str, raw: str) -> LogLine:
        ts, text = split_timestamp(raw)
        return cls(host, ts, text if text.endswith("\n") else text + "\n")

    def prefixed(self) -> str:
        return f"[{self.host}] {self.text}"


def after(lines: AsyncIterator[LogLine], since: str) -> AsyncIterator[LogLine]:
    """The lines later than ``since`` (a timestamp a client saw last): a follow that resumes
    after a reconnect repeats nothing. Timestamps are RFC 3339 in UTC with nanoseconds, so
    they compare as strings; lines without one are dropped when resuming."""

    async def gen() -> AsyncIterator[LogLine]:
        async for line in lines:
            if line.ts > since:
                yield line

    return gen() if since else lines


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


def _private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)


def _write_private(path: Path, text: str) -> None:
    """Writes ``path`` with mode 0600 from the start, whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
        f.write(text)


class LogStore:
    """Logs of removed kernels, one file per kernel: ``<dir>/<session id>/<hostname>.log``.

    They may hold secrets a program printed: directories are 0700, files 0600. Each file keeps
    the last ``limit`` bytes of its kernel's log (the agent caps them too).
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def save(
        self, session_id: str, logs: Mapping[str, str], limit: int = defaults.SAVED_LOG_BYTES
    ) -> None:
        _private_dir(self.root)
        d = self.root / session_id
        _private_dir(d)
        for host, text in logs.items():
            if _HOSTNAME.match(host):
                _write_private(d / f"{host}.log", tail(text, limit))

    def remove(self, session_id: str) -> None:
        """Deletes a session's saved logs (none: nothing to do)."""
        shutil.rmtree(self.root / session_id, ignore_errors=True)

    def has(self, session_id: str, hostname: str) -> bool:
        return (self.root / session_id / f"{hostname}.log").exists()

    def lines(self, session_id: str, hostname: str) -> list[str]:
        p = self.root / session_id / f"{hostname}.log"
        return p.read_text().splitlines(keepends=True) if p.exists() else []


async def merged(streams: Mapping[str, AsyncIterator[str]], follow: bool) -> AsyncIterator[LogLine]:
    """Lines of all kernels; by timestamp, or as they come when following. One kernel's
    lines stream through as they are read (constant memory)."""
    if len(streams) == 1:
        [(host, stream)] = streams.items()
        async for raw in stream:
            yield LogLine.of(host, raw)
        return
    if not follow:
        rows: list[tuple[str, int, LogLine]] = []
        failure: Exception | None = None
        for order, (host, stream) in enumerate(streams.items()):
            try:
                async for raw in stream:
                    line = LogLine.of(host, raw)
                    rows.append((line.ts, order, line))
            except Exception as e:  # keep the kernels that answer; say it at the end
                failure = failure or e
        for _, _, line in sorted(rows, key=lambda r: (r[0], r[1])):
            yield line
        if failure is not None:
            raise failure
        return
    queue: asyncio.Queue[LogLine | None] = asyncio.Queue(maxsize=1000)

    async def pump(host: str, stream: AsyncIterator[str]) -> None:
        try:
            async for raw in stream:
                await queue.put(LogLine.of(host, raw))
        finally:
            await queue.put(None)

    tasks = [asyncio.create_task(pump(h, s)) for h, s in streams.items()]
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
