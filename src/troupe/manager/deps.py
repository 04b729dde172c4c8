"""Request dependencies: database session, registry, the authenticated user, the stream
counter.

API keys are taken from the ``Authorization: Bearer <key>`` header only, never from the URL
(query strings end up in access logs, proxies and browser history). Without that header, the
web UI's sign-in cookie is accepted from the UI's own origin (:mod:`troupe.manager.websessions`,
outside the web package, which this module never imports).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import HTTPConnection

from troupe.api.errors import Forbidden, Unauthorized
from troupe.manager import websessions
from troupe.manager.auth import KeyCache
from troupe.manager.registry import Registry
from troupe.manager.store.models import User
from troupe.manager.store.unit import Store
from troupe.manager.streams import Streams, streams_of


async def get_db(request: Request) -> AsyncIterator[AsyncSession]:
    async with request.app.state.db() as db:
        yield db


def get_registry(request: Request) -> Registry:
    registry: Registry = request.app.state.registry
    return registry


def bearer(conn: HTTPConnection) -> str:
    """The credential of ``Authorization: Bearer <credential>`` ("" if there is none)."""
    scheme, _, value = conn.headers.get("authorization", "").strip().partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


async def authenticate(store: Store, conn: HTTPConnection) -> User:
    """The user of a request or WebSocket, from its API key (or the web UI's cookie)."""
    key = bearer(conn)
    if not key and websessions.COOKIE in conn.cookies:
        websessions.check_origin(conn)
        async with store() as db:
            by_cookie = await websessions.user_of_cookie(db, conn)
        if by_cookie is None:
            raise Unauthorized("web sign-in expired or revoked: sign in again")
        return by_cookie
    if not key:
        if "api_key" in conn.query_params or "x-api-key" in conn.headers:
            raise Unauthorized(
                "API keys are accepted only in the Authorization header (Bearer <key>),"
                " not in the URL or X-Api-Key"
            )
        raise Unauthorized("missing API key (Authorization: Bearer <key>)")
    keys: KeyCache = conn.app.state.keys
    async with store() as db:
        user = await keys.user(db, key)
    if user is None:
        raise Unauthorized("invalid API key")
    return user


async def current_user(request: Request) -> User:
    return await authenticate(request.app.state.db, request)


async def admin_user(user: Annotated[User, Depends(current_user)]) -> User:
    if not user.admin:
        raise Forbidden("admin only")
    return user


def get_streams(request: Request) -> Streams:
    return streams_of(request)


DB = Annotated[AsyncSession, Depends(get_db)]
CurrentUser = Annotated[User, Depends(current_user)]
AdminUser = Annotated[User, Depends(admin_user)]
RegistryDep = Annotated[Registry, Depends(get_registry)]
StreamsDep = Annotated[Streams, Depends(get_streams)]
