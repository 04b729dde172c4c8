"""The web UI's sign-in, page side: an API key exchanged for a web session whose random token
goes in an HttpOnly, SameSite=Strict cookie; sign-out ends that web session on the server.

The web sessions themselves, and the Origin checks of every cookie request, are
:mod:`troupe.manager.websessions` (outside this package: the API's dependencies use them too).
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import HTTPConnection
from starlette.responses import Response

from troupe.manager import websessions
from troupe.manager.auth import user_for_key
from troupe.manager.websessions import COOKIE, MAX_AGE


async def sign_in(db: AsyncSession, key: str) -> str | None:
    """A new web session for the holder of ``key``: its cookie value (None: not a valid key)."""
    user = await user_for_key(db, key) if key else None
    if user is None:
        return None
    token = await websessions.start(db, user)
    await db.commit()
    return token


async def sign_out(db: AsyncSession, conn: HTTPConnection) -> None:
    """Ends the request's web session on the server: a copy of its cookie signs no one in."""
    await websessions.end(db, conn.cookies.get(COOKIE, ""))
    await db.commit()


def set_cookie(response: Response, value: str, secure: bool) -> None:
    response.set_cookie(
        COOKIE, value, max_age=MAX_AGE, httponly=True, samesite="strict", secure=secure, path="/"
    )


def clear_cookie(response: Response) -> None:
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
