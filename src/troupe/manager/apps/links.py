"""Getting into an app: a one-time link, then a cookie of the app's origin alone.

Opening an app (``POST /v1/sessions/{ref}/apps/{app}``) answers a link
``<app origin>/_troupe/enter?t=<token>``. The token is random, kept in this process's memory
(one manager serves the API; a restart forgets pending links, which last :data:`LINK_SECONDS`
anyway), good once. Entering with it sets the app cookie (:data:`COOKIE`) for the app's host
only (no ``Domain``), HttpOnly, SameSite=Lax (so that the top-level navigation from the UI,
another site, carries it), Secure under https.

The cookie's value is ``<issued>.<HMAC(server secret, session, port, owner, owner's key hash,
issued)>``: it names one app of one session for its owner, and stops working when the owner's
API key is rotated or revoked (its hash changes) or after :data:`COOKIE_SECONDS`. Nothing is
stored per cookie, so a manager restart keeps people in their apps. The secret is the web
sign-in's (:mod:`troupe.manager.web.signin`); the message starts with ``app`` so that no UI
cookie is ever an app cookie or the other way round.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass, field

from starlette.datastructures import State

from troupe.api.errors import Invalid
from troupe.manager.apps.origins import AppDomain, AppTarget
from troupe.manager.config import ServerConfig

#: The app cookie's name (on every app's origin, each its own).
COOKIE = "troupe_app"
#: Where a link enters an app (on the app's origin; never forwarded to the app).
ENTER_PATH = "/_troupe/enter"
#: How long a link can be opened.
LINK_SECONDS = 60.0
#: How long an app cookie lasts without opening the app again.
COOKIE_SECONDS = 7 * 24 * 3600
#: The most links pending at once (a flood of opens cannot grow memory without end).
MAX_PENDING = 10_000


@dataclass(frozen=True)
class Pending:
    session_id: str
    owner_id: str
    port: int
    expires: float


@dataclass
class Links:
    """The app domain and the links not yet used (one per manager app)."""

    domain: AppDomain | None
    pending: dict[str, Pending] = field(default_factory=dict)

    def issue(self, session_id: str, owner_id: str, port: int, now: float | None = None) -> str:
        if self.domain is None:
            raise Invalid(
                "this server serves no apps: it was started with --app-domain ''"
                " (see docs/apps.md, Deploying: the app domain)"
            )
        now = time.monotonic() if now is None else now
        self._forget_expired(now)
        if len(self.pending) >= MAX_PENDING:
            self.pending.pop(next(iter(self.pending)))
        token = secrets.token_urlsafe(32)
        self.pending[token] = Pending(session_id, owner_id, port, now + LINK_SECONDS)
        return f"{self.domain.origin(session_id, port)}{ENTER_PATH}?t={token}"

    def consume(self, token: str, target: AppTarget, now: float | None = None) -> Pending | None:
        """The link ``token`` was issued as, if it is for ``target`` and still good; it is
        used up either way (a link shown on the wrong origin is not tried again)."""
        now = time.monotonic() if now is None else now
        link = self.pending.pop(token, None)
        if link is None or link.expires < now:
            return None
        if (link.session_id, link.port) != (target.session_id, target.port):
            return None
        return link

    def _forget_expired(self, now: float) -> None:
        for token in [t for t, p in self.pending.items() if p.expires < now]:
            del self.pending[token]


def links_of(state: State) -> Links:
    """The app's :class:`Links`, made on first use from the server's configuration."""
    links: Links | None = getattr(state, "app_links", None)
    if links is None:
        config: ServerConfig = state.registry.config
        domain = AppDomain.of(config.app_domain or "", config.app_https)
        links = state.app_links = Links(domain)
    return links


def issue_link(state: State, session_id: str, owner_id: str, port: int) -> str:
    """A one-time link into app ``port`` of the session, for its owner: an absolute URL on
    the app's origin, good for :data:`LINK_SECONDS`. ``state``: ``request.app.state``.
    :class:`Invalid` if the server serves no apps (``--app-domain ''``)."""
    return links_of(state).issue(session_id, owner_id, port)


def app_origin(state: State, session_id: str, port: int) -> str | None:
    """The app's origin URL (no token: opening it without the cookie is refused), or None
    if the server serves no apps."""
    domain = links_of(state).domain
    return None if domain is None else domain.origin(session_id, port)


def _mac(secret: bytes, target: AppTarget, owner_id: str, key_hash: str, issued: int) -> str:
    msg = f"app\n{target.session_id}\n{target.port}\n{owner_id}\n{key_hash}\n{issued}".encode()
    return hmac.new(secret, msg, hashlib.sha256).hexdigest()


def make_cookie(
    secret: bytes, target: AppTarget, owner_id: str, key_hash: str, now: float | None = None
) -> str:
    issued = int(time.time() if now is None else now)
    return f"{issued}.{_mac(secret, target, owner_id, key_hash, issued)}"


def cookie_valid(
    secret: bytes,
    value: str,
    target: AppTarget,
    owner_id: str,
    key_hash: str,
    now: float | None = None,
) -> bool:
    """True if ``value`` was made for this app of this session, its owner and the owner's
    current key, and has not expired."""
    issued_text, _, mac = value.partition(".")
    if not issued_text.isdigit() or not mac:
        return False
    issued = int(issued_text)
    age = (time.time() if now is None else now) - issued
    if not 0 <= age <= COOKIE_SECONDS:
        return False
    return hmac.compare_digest(mac, _mac(secret, target, owner_id, key_hash, issued))
