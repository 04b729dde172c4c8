"""The web UI's sign-in: an API key exchanged for a signed, HttpOnly, SameSite=Strict cookie.

The cookie holds ``user id . issued-at . HMAC(secret, user id, issued-at, key_hash)``: no key
and nothing to look up in a table. The user's *current* ``key_hash`` is part of the MAC, so
rotating or revoking the key (or deleting the user) ends every web session of that user at
once, and no migration is needed. The secret is per server, kept in the data dir (0600).

A request that authenticates with the cookie must come from the UI's own origin: WebSockets
and unsafe methods must send a matching ``Origin``; any request whose ``Sec-Fetch-Site`` or
``Origin`` names another site is refused (cross-site request forgery, WebSocket hijacking).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from pathlib import Path
from urllib.parse import urlsplit

from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import HTTPConnection
from starlette.responses import Response

from troupe.api.errors import Forbidden
from troupe.manager.store.models import User

COOKIE = "troupe_web"
#: How long a web session lasts without signing in again.
MAX_AGE = 7 * 24 * 3600
SECRET_FILE = "web-secret"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def load_secret(data_dir: Path) -> bytes:
    """The server's cookie secret, made on first use (mode 0600 from the start)."""
    path = data_dir / SECRET_FILE
    try:
        return bytes.fromhex(path.read_text().strip())
    except FileNotFoundError:
        pass
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    value = secrets.token_hex(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another worker made it first
        return bytes.fromhex(path.read_text().strip())
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    return bytes.fromhex(value)


def secret_of(conn: HTTPConnection) -> bytes:
    state = conn.app.state
    secret: bytes | None = getattr(state, "web_secret", None)
    if secret is None:
        secret = state.web_secret = load_secret(state.registry.config.data_dir)
    return secret


def _mac(secret: bytes, user_id: str, issued: int, key_hash: str) -> str:
    msg = f"{user_id}\n{issued}\n{key_hash}".encode()
    return hmac.new(secret, msg, hashlib.sha256).hexdigest()


def make_cookie(secret: bytes, user: User, now: float | None = None) -> str:
    issued = int(now if now is not None else time.time())
    return f"{user.id}.{issued}.{_mac(secret, user.id, issued, user.key_hash)}"


def cookie_user_id(value: str) -> str | None:
    """The user id a cookie claims (checked by :func:`cookie_valid` against the user)."""
    parts = value.split(".")
    return parts[0] if len(parts) == 3 and parts[0] else None


def cookie_valid(secret: bytes, value: str, user: User, now: float | None = None) -> bool:
    """True if ``value`` was made for ``user`` with its current key, and has not expired."""
    try:
        user_id, issued_text, mac = value.split(".")
        issued = int(issued_text)
    except ValueError:
        return False
    age = (now if now is not None else time.time()) - issued
    if user_id != user.id or not 0 <= age <= MAX_AGE or user.deleted_at is not None:
        return False
    return hmac.compare_digest(mac, _mac(secret, user.id, issued, user.key_hash))


async def user_of_cookie(db: AsyncSession, conn: HTTPConnection) -> User | None:
    """The user the request's cookie signs in (None: no cookie, or not valid any more)."""
    value = conn.cookies.get(COOKIE, "")
    user_id = cookie_user_id(value)
    if user_id is None:
        return None
    user = await db.get(User, user_id)
    if user is None or not cookie_valid(secret_of(conn), value, user):
        return None
    return user


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


def set_cookie(response: Response, value: str, secure: bool) -> None:
    response.set_cookie(
        COOKIE, value, max_age=MAX_AGE, httponly=True, samesite="strict", secure=secure, path="/"
    )


def clear_cookie(response: Response) -> None:
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
