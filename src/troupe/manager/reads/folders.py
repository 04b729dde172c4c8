"""A user's data folders, as ``/v1/folders`` and the web pages show them."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.errors import NotFound
from troupe.manager.store.models import Folder, User


async def own_folders(db: AsyncSession, user: User) -> list[Folder]:
    """The user's folders by name (folders are only ever their owner's, admins included)."""
    rows = await db.execute(select(Folder).where(Folder.owner_id == user.id).order_by(Folder.name))
    return list(rows.scalars())


async def find_folder(db: AsyncSession, user: User, name: str) -> Folder:
    """The user's folder ``name``; :class:`~troupe.api.errors.NotFound` if none."""
    q = select(Folder).where(Folder.owner_id == user.id, Folder.name == name)
    f = (await db.execute(q)).scalar_one_or_none()
    if f is None:
        raise NotFound.of("folder", name)
    return f
