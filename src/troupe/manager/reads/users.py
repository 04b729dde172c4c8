"""Users as ``/v1/users`` shows them: deleted users keep their (renamed) rows but are not
listed or found."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.errors import NotFound
from troupe.manager.store.models import User


async def live_users(db: AsyncSession) -> list[User]:
    """Every user not deleted, by name."""
    rows = await db.execute(select(User).where(User.deleted_at.is_(None)).order_by(User.name))
    return list(rows.scalars())


async def find_user(db: AsyncSession, name: str) -> User:
    """The user ``name`` (not deleted); :class:`~troupe.api.errors.NotFound` if none."""
    row = await db.execute(select(User).where(User.name == name, User.deleted_at.is_(None)))
    user = row.scalar_one_or_none()
    if user is None:
        raise NotFound.of("user", name)
    return user
