"""asyncio helpers that manager and agent share."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import TypeVar

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
