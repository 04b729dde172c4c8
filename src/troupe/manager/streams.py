"""Per-user limit on concurrent long requests ("streams"): ``wait`` long-polls, logs
(followed or not: a merged log of many kernels takes a while), exec, terminals, and the
requests and WebSockets relayed to apps in main1 (:mod:`troupe.manager.apps.proxy`: each
counts against the session owner's limit while it runs).

Each one holds a :class:`Slot` from the moment its checks passed until it ends or its client
goes away; one over the user's limit is refused with 429 (``too_many``) before its answer
starts. The limit is the user's ``limits["streams"]`` if an admin set one, else
``ServerConfig.quota_streams``; admins are counted too (a stuck script of theirs holds
connections like anyone's). Counts live in this process only: a manager restart ends every
stream anyway. A stream into a session's kernels (exec, shell, tunnel) is also a connection to
that session (:mod:`troupe.manager.presence`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from starlette.requests import HTTPConnection
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from troupe.api.errors import TooMany
from troupe.manager.presence import Connection, Presence, presence_of
from troupe.manager.store.models import User

T = TypeVar("T")


class Slot:
    """One open stream of a user; :meth:`release` is idempotent."""

    def __init__(self, streams: Streams, user_id: str, to: Connection | None = None) -> None:
        self._streams, self._user_id, self._to = streams, user_id, to
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._streams._close(self._user_id)
            if self._to is not None:
                self._to.close()

    def __enter__(self) -> Slot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Streams:
    def __init__(self, default_limit: int, presence: Presence | None = None) -> None:
        self.default_limit = default_limit
        self.presence = presence or Presence()
        self._open: Counter[str] = Counter()

    def limit_of(self, user: User) -> int:
        value: Any = (user.limits or {}).get("streams")
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        return self.default_limit

    def open_count(self, user_id: str) -> int:
        return self._open[user_id]

    def open(self, user: User, session_id: str | None = None) -> Slot:
        """A slot for one more stream of ``user``, or :class:`TooMany`; with ``session_id``,
        a connection to that session too (it is not idle while the slot is held)."""
        limit = self.limit_of(user)
        n = self._open[user.id]
        if n >= limit:
            raise TooMany(
                f"too many concurrent streams: user {user.name!r} has {n} open (waits, logs,"
                f" execs, shells, app requests and WebSockets) and the limit is {limit}; end one"
                " or try again later"
            )
        self._open[user.id] = n + 1
        to = self.presence.hold(session_id) if session_id is not None else None
        return Slot(self, user.id, to)

    def _close(self, user_id: str) -> None:
        self._open[user_id] -= 1
        if self._open[user_id] <= 0:
            del self._open[user_id]


def streams_of(conn: HTTPConnection) -> Streams:
    """The app's stream counter, made on first use from the server's configuration."""
    state = conn.app.state
    streams: Streams | None = getattr(state, "streams", None)
    if streams is None:
        streams = Streams(state.registry.config.quota_streams, presence_of(state))
        state.streams = streams
    return streams


async def held(slot: Slot, body: AsyncIterator[T]) -> AsyncIterator[T]:
    """``body``, releasing ``slot`` when it ends, fails or is closed (the client went away)."""
    try:
        async for item in body:
            yield item
    finally:
        slot.release()
        aclose: Callable[[], Awaitable[None]] | None = getattr(body, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()


class SlotResponse(StreamingResponse):
    """A streamed answer that holds ``slot`` while it runs, released however it ends (also
    when the client left before the body began, so the body's own ``finally`` never ran)."""

    def __init__(self, slot: Slot, content: AsyncIterator[bytes], media_type: str) -> None:
        super().__init__(held(slot, content), media_type=media_type)
        self.slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.slot.release()


async def _disconnected(receive: Receive) -> None:
    """Returns once the client of a request whose body was read has gone away."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def unless_disconnected(receive: Receive, work: Awaitable[T]) -> T | None:
    """``work``'s result, or None as soon as the client goes away (``work`` is cancelled).

    For answers that are not streamed (the ``wait`` long-poll), whose server would otherwise
    keep waiting for a client that left.
    """
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        return None
    finally:
        # Not awaited: on Python 3.11 asyncio.wait_for (inside ``work``) can swallow a
        # cancellation that meets its own wake-up, and the caller must not wait for that.
        for t in (task, gone):
            if not t.done():
                t.cancel()
                t.add_done_callback(_retrieve)


def _retrieve(t: asyncio.Future[Any]) -> None:
    """Marks a task's outcome as seen (no "exception was never retrieved" at exit)."""
    if not t.cancelled():
        t.exception()
