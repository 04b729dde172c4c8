"""Who may reach an app, checked on every request before a byte goes to the kernel.

A request to an app's origin passes if it carries a valid app cookie for that app
(:mod:`troupe.manager.apps.links`), made for the session's owner with the owner's current API
key, and the session is RUNNING. Anything else is refused and never proxied: no cookie
(401), a cookie of another app, user or key (403), a session that ended (409), one that does
not exist (404). The session, its owner and kernels are read by id and kept until they
change (:class:`Sessions`): a destroyed session or a rotated key takes effect on the very next
request.

Pages of other sites (and of other apps: all app origins are one *site*, so SameSite does not
keep their requests from carrying the cookie) are kept out too: a request whose ``Origin``
names another origin, or whose ``Sec-Fetch-Site`` says it came from another origin and is not
a top-level navigation, is refused (403). A link from elsewhere to an app still opens it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from sqlalchemy.orm import joinedload
from starlette.datastructures import State
from starlette.requests import HTTPConnection

from troupe.api.agent import AgentBackend
from troupe.api.errors import AgentFailed, TroupeError
from troupe.api.lifecycle import Change, SessionStatus
from troupe.manager import kernel_io, websessions
from troupe.manager.apps import secret
from troupe.manager.apps.links import COOKIE, cookie_valid
from troupe.manager.apps.origins import AppTarget
from troupe.manager.store.models import Session, User


class Refused(Exception):
    """A request the proxy does not forward: its status and a sentence for the person."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.http_status, self.message = status, message


@dataclass(frozen=True)
class Access:
    """Where an allowed request goes: the agent of main1 and its container; ``owner`` is
    whose stream slot the request holds while it runs."""

    agent: AgentBackend
    container_id: str
    owner: User


REOPEN = "open the app again from its session page (or troupe session open)"


def cookie_values(conn: HTTPConnection, name: str) -> list[str]:
    """Every value of cookie ``name`` the request carries (a page of another app can plant
    one more under the parent domain; each is checked, none trusted for being first)."""
    values = []
    for header in conn.headers.getlist("cookie"):
        for part in header.split(";"):
            key, eq, value = part.strip().partition("=")
            if eq and key == name:
                values.append(value.strip().strip('"'))
    return values


def check_site(conn: HTTPConnection) -> None:
    """Refuses requests that pages of other origins made (see the module's docstring)."""
    origin = conn.headers.get("origin")
    if origin is not None and not websessions.same_origin(conn, origin):  # ("null" too)
        raise Refused(403, "a request from another origin is not let into this app")
    site = conn.headers.get("sec-fetch-site")
    navigation = conn.scope["type"] == "http" and conn.headers.get("sec-fetch-mode") in (
        "navigate",
        None,
    )
    if site not in (None, "same-origin", "none") and not (
        navigation and conn.scope.get("method") in ("GET", "HEAD")
    ):
        raise Refused(403, f"a request from another site is not let into this app ({site})")


class Sessions:
    """Sessions read for admission, kept until they change: a request to an app then costs
    no database read (1.5 ms of a request's 4). An entry goes on any change of the session or
    its kernels (the change bus: status, destroy), on any change of a user (the key cache's
    generation: a rotated or revoked key), on any change of an agent, and after :attr:`TTL`
    seconds at most. A read that began before a change does not put its answer in."""

    TTL = 5.0
    MAX = 10_000

    def __init__(self, state: State) -> None:
        self._state = state
        self._entries: dict[str, tuple[float, int, Session]] = {}
        self.generation = 0
        self._changes = state.db.bus.subscribe()
        queue = self._changes.__enter__()  # (subscribed now: no change is missed)
        self._task = asyncio.ensure_future(self._watch(queue))

    async def _watch(self, queue: asyncio.Queue[Change]) -> None:
        try:
            while True:
                change = await queue.get()
                self.generation += 1
                if change.kind == "agent":
                    self._entries.clear()
                else:
                    self._entries.pop(change.session_id or change.id, None)
        finally:
            self._changes.__exit__(None, None, None)

    async def get(self, target: AppTarget) -> Session | None:
        keys = self._state.keys.generation
        hit = self._entries.get(target.session_id)
        now = time.monotonic()
        if hit is not None and now - hit[0] < self.TTL and hit[1] == keys:
            return hit[2]
        generation = self.generation
        async with self._state.db() as db:
            s: Session | None = await db.get(
                Session,
                target.session_id,
                options=[joinedload(Session.owner), joinedload(Session.kernels)],
            )
        unchanged = generation == self.generation and keys == self._state.keys.generation
        if s is not None and unchanged:
            if len(self._entries) >= self.MAX:
                self._entries.clear()
            self._entries[target.session_id] = (now, keys, s)
        return s

    async def aclose(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def sessions_of(state: State) -> Sessions:
    sessions: Sessions | None = getattr(state, "app_sessions", None)
    if sessions is None:
        sessions = state.app_sessions = Sessions(state)
    return sessions


async def load_session(state: State, target: AppTarget) -> Session:
    """The session an app's origin names, with its owner and kernels (404 if none)."""
    s = await sessions_of(state).get(target)
    if s is None:
        raise Refused(404, "there is no app at this address (no such session)")
    return s


def running(state: State, s: Session) -> Access:
    """main1 of a RUNNING session, or a refusal that says why not."""
    if s.status != SessionStatus.RUNNING:
        raise Refused(409, f"session {s.name!r} is {s.status}, not RUNNING: its apps are closed")
    if s.owner.deleted_at is not None:
        raise Refused(403, "the session's owner was deleted")
    try:
        agent, container_id = kernel_io.kernel_target(state.registry.fleet, s, "main1")
    except AgentFailed as e:
        raise Refused(502, e.message) from e
    except TroupeError as e:
        raise Refused(409, e.message) from e
    return Access(agent, container_id, s.owner)


async def admit(state: State, conn: HTTPConnection, target: AppTarget) -> Access:
    """Where a request to an app goes, or :class:`Refused`."""
    check_site(conn)
    values = cookie_values(conn, COOKIE)
    if not values:
        raise Refused(401, f"you are not signed in to this app: {REOPEN}")
    s = await load_session(state, target)
    key = secret.of(conn)
    key_hash = s.owner.key_hash
    if not any(cookie_valid(key, v, target, s.owner_id, key_hash) for v in values):
        raise Refused(
            403,
            "this app's cookie is not valid (another app's or user's, expired, or the API key"
            f" was changed): {REOPEN}",
        )
    return running(state, s)
