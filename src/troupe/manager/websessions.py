"""Web sessions: the web UI's sign-ins, kept server-side so that signing out ends one.

The cookie :data:`COOKIE` holds a random token (256 bits); the table ``web_sessions`` keeps
its SHA-256 (a copy of the database signs no one in), the user, the user's ``key_hash`` at
sign-in and when it expires. A request with the cookie costs one look-up by primary key,
joined with its user by primary key (what the signed cookie of before cost too). Sign-out
deletes the row, so a copied cookie stops working at once; rotating or revoking the user's
key (or deleting the user) changes ``key_hash``, which ends every web session of that user at
once. Expired and ended rows are pruned at each sign-in and by retention
(:func:`troupe.manager.life.retention.prune_web_sessions`).

A request that authenticates with the cookie must come from the UI's own origin: WebSockets
and unsafe methods must send a matching ``Origin``; any request whose ``Sec-Fetch-Site`` or
``Origin`` names another site is refused (cross-site request forgery, WebSocket hijacking).
The page side (the form, setting and clearing the cookie) is :mod:`troupe.manager.web.signin`.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from sqlalchemy import delete, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import HTTPConnection

from troupe.api.errors import Forbidden
from troupe.api.lifecycle import utcnow
from troupe.manager.store.models import User, WebSession

COOKIE = "troupe_web"
#: How long a web session lasts without signing in again (seconds).
MAX_AGE = 7 * 24 * 3600
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def start(db: AsyncSession, user: User, now: datetime | None = None) -> str:
    """A new web session of ``user``; returns the cookie's token (the caller commits)."""
    now = now or utcnow()
    await prune(db, now)
    token = secrets.token_urlsafe(32)
    db.add(
        WebSession(
            id=_hash(token),
            user_id=user.id,
            key_hash=user.key_hash,
            created_at=now,
            expires_at=now + timedelta(seconds=MAX_AGE),
        )
    )
    await db.flush()
    return token


async def user_of(db: AsyncSession, token: str, now: datetime | None = None) -> User | None:
    """The user ``token`` signs in: None if it was never issued, has ended or expired, or
    the user's key changed since (revoked, rotated, user deleted)."""
    if not token:
        return None
    row = await db.execute(
        select(User)
        .join(WebSession, WebSession.user_id == User.id)
        .where(
            WebSession.id == _hash(token),
            WebSession.expires_at > (now or utcnow()),
            WebSession.key_hash == User.key_hash,
            User.deleted_at.is_(None),
        )
    )
    return row.scalar_one_or_none()


async def user_of_cookie(db: AsyncSession, conn: HTTPConnection) -> User | None:
    """The user the request's cookie signs in (None: no cookie, or not valid any more)."""
    return await user_of(db, conn.cookies.get(COOKIE, ""))


async def end(db: AsyncSession, token: str) -> None:
    """Ends the web session of ``token`` (sign-out; the caller commits)."""
    if token:
        await db.execute(delete(WebSession).where(WebSession.id == _hash(token)))


async def prune(db: AsyncSession, now: datetime | None = None) -> int:
    """Deletes the web sessions that can no longer sign anyone in; returns how many."""
    current_key = select(User.key_hash).where(User.id == WebSession.user_id).scalar_subquery()
    result = await db.execute(
        delete(WebSession)
        .where(or_(WebSession.expires_at <= (now or utcnow()), WebSession.key_hash != current_key))
        .execution_options(synchronize_session=False)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def same_origin(conn: HTTPConnection, origin: str) -> bool:
    """True if ``origin`` (an Origin header) names the host the request was sent to."""
    host = conn.headers.get("host", "")
    parts = urlsplit(origin)
    return bool(host) and parts.scheme in ("http", "https") and parts.netloc == host


def check_origin(conn: HTTPConnection) -> None:
    """Refuses a cookie-authenticated request that another site may have made."""
    origin = conn.headers.get("origin")
    site = conn.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        raise Forbidden(f"cross-site request refused (Sec-Fetch-Site: {site})")
    if origin is not None and not same_origin(conn, origin):
        raise Forbidden("request from another origin refused")
    unsafe = conn.scope["type"] == "websocket" or conn.scope.get("method") not in SAFE_METHODS
    if unsafe and origin is None:
        raise Forbidden("missing Origin header (required with the web sign-in cookie)")
