"""Kernel logs: saved copies after removal, and merging kernels into one prefixed stream."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path


def split_timestamp(line: str) -> tuple[str, str]:
    """Docker's ``2026-11-26T02:18:43.1234Z text`` -> (timestamp, text)."""
    ts, sep, text = line.partition(" ")
    if sep and ts[:2].isdigit() and ts.endswith("Z"):
        return ts, text
    return "", line


def strip(line: str) -> str:
    text = split_timestamp(line)[1]
    return text if text.endswith("\n") else text + "\n"


class LogStore:
    """Logs of removed kernels, one file per kernel: ``<dir>/<session id>/<hostname>.log``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def save(self, session_id: str, logs: Mapping[str, str]) -> None:
        d = self.root / session_id
        d.mkdir(parents=True, exist_ok=True)
        for host, text in logs.items():
            (d / f"{host}.log").write_text(text)

    def has(self, session_id: str, hostname: str) -> bool:
        return (self.root / session_id / f"{hostname}.log").exists()

    def lines(self, session_id: str, hostname: str) -> list[str]:
        p = self.root / session_id / f"{hostname}.log"
        return p.read_text().splitlines(keepends=True) if p.exists() else []


async def merged(streams: Mapping[str, AsyncIterator[str]], follow: bool) -> AsyncIterator[str]:
    """Lines of all kernels prefixed ``[host] ``; by timestamp, or as they come when following."""
    if not follow:
        rows: list[tuple[str, int, str]] = []
        failure: Exception | None = None
        for order, (host, stream) in enumerate(streams.items()):
            try:
                async for line in stream:
                    ts, _ = split_timestamp(line)
                    rows.append((ts, order, f"[{host}] {strip(line)}"))
            except Exception as e:  # keep the kernels that answer; say it at the end
                failure = failure or e
        for _, _, text in sorted(rows, key=lambda r: (r[0], r[1])):
            yield text
        if failure is not None:
            raise failure
        return
    queue: asyncio.Queue[str | None] = asyncio.Queue(maxsize=1000)

    async def pump(host: str, stream: AsyncIterator[str]) -> None:
        try:
            async for line in stream:
                await queue.put(f"[{host}] {strip(line)}")
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
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
