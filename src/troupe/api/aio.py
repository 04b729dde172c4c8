"""asyncio helpers that manager and agent share."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Coroutine, Iterable
from typing import Any, TypeVar

T = TypeVar("T")


async def gather_all(aws: Iterable[Awaitable[T]]) -> list[T]:
    """Runs all at once and waits for all; then raises the first failure, if any.

    Unlike a plain gather, no step is left running behind a failure, so rollback never races
    a create still in flight.
    """
    results = await asyncio.gather(*aws, return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return [r for r in results if not isinstance(r, BaseException)]


async def heartbeat(items: AsyncIterator[T], interval: float) -> AsyncIterator[T | None]:
    """``items``, with a None after every ``interval`` seconds without one: a stream that is
    quiet for long still sends something (proxies and clients drop silent connections)."""
    pending: asyncio.Task[T] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(items))
            done, _ = await asyncio.wait({pending}, timeout=interval)
            if not done:
                yield None
                continue
            try:
                item = pending.result()
            except StopAsyncIteration:
                return
            finally:
                pending = None
            yield item
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pending


async def until_first(*coros: Coroutine[Any, Any, None]) -> None:
    """Runs the coroutines until the first of them ends, then cancels and awaits the rest,
    whatever they raise: the two pumps of a WebSocket bridge (a command's end, or the client
    leaving, ends both)."""
    tasks = [asyncio.create_task(c) for c in coros]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        await cancel_all(tasks)


async def cancel_all(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancels the tasks and waits for them to end, whatever they raise."""
    tasks = list(tasks)
    for t in tasks:
        t.cancel()
    for t in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await t
