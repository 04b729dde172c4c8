"""Request dependencies: database session, registry, the authenticated user."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncSession

from troupe.manager.auth import user_for_key
from troupe.manager.errors import ApiError
from troupe.manager.registry import Registry
from troupe.manager.store.models import User


async def get_db(request: Request) -> AsyncIterator[AsyncSession]:
    async with request.app.state.db() as db:
        yield db


def get_registry(request: Request) -> Registry:
    registry: Registry = request.app.state.registry
    return registry


async def current_user(request: Request, db: Annotated[AsyncSession, Depends(get_db)]) -> User:
    auth = request.headers.get("authorization", "")
    key = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else ""
    key = key or request.headers.get("x-api-key", "") or request.query_params.get("api_key", "")
    if not key:
        raise ApiError(401, "unauthorized", "missing API key (Authorization: Bearer <key>)")
    user = await user_for_key(db, key)
    if user is None:
        raise ApiError(401, "unauthorized", "invalid API key")
    return user


async def admin_user(user: Annotated[User, Depends(current_user)]) -> User:
    if not user.admin:
        raise ApiError(403, "forbidden", "admin only")
    return user


DB = Annotated[AsyncSession, Depends(get_db)]
CurrentUser = Annotated[User, Depends(current_user)]
AdminUser = Annotated[User, Depends(admin_user)]
RegistryDep = Annotated[Registry, Depends(get_registry)]
