"""Request dependencies: database session, registry, the authenticated user."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import HTTPConnection

from troupe.api.errors import Forbidden, Unauthorized
from troupe.manager.auth import user_for_key
from troupe.manager.registry import Registry
from troupe.manager.store.models import User
from troupe.manager.store.unit import Store


async def get_db(request: Request) -> AsyncIterator[AsyncSession]:
    async with request.app.state.db() as db:
        yield db


def get_registry(request: Request) -> Registry:
    registry: Registry = request.app.state.registry
    return registry


def api_key(conn: HTTPConnection) -> str:
    auth = conn.headers.get("authorization", "")
    key = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else ""
    return key or conn.headers.get("x-api-key", "") or conn.query_params.get("api_key", "")


async def authenticate(store: Store, conn: HTTPConnection) -> User:
    """The user of a request or WebSocket, from its API key."""
    key = api_key(conn)
    if not key:
        raise Unauthorized("missing API key (Authorization: Bearer <key>)")
    async with store() as db:
        user = await user_for_key(db, key)
    if user is None:
        raise Unauthorized("invalid API key")
    return user


async def current_user(request: Request) -> User:
    return await authenticate(request.app.state.db, request)


async def admin_user(user: Annotated[User, Depends(current_user)]) -> User:
    if not user.admin:
        raise Forbidden("admin only")
    return user


DB = Annotated[AsyncSession, Depends(get_db)]
CurrentUser = Annotated[User, Depends(current_user)]
AdminUser = Annotated[User, Depends(admin_user)]
RegistryDep = Annotated[Registry, Depends(get_registry)]
