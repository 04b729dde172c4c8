"""API keys: random, shown once, stored as SHA-256 (they carry 256 bits, so no slow hash).

A revoked key is replaced by a marker no key hashes to (:data:`REVOKED`); rotating gives a new
key and forgets the old one. A deleted user keeps its row (its sessions name it) but never
authenticates again.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import uuid
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from troupe.manager.store.models import User

KEY_PREFIX = "trp_"
#: ``key_hash`` of a user without a valid key: not hex, so no SHA-256 digest equals it.
REVOKED = "!"


def new_api_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


async def create_user(db: AsyncSession, name: str, admin: bool) -> tuple[User, str]:
    key = new_api_key()
    user = User(id=str(uuid.uuid4()), name=name, admin=admin, key_hash=hash_key(key))
    db.add(user)
    await db.flush()
    return user, key


def revoked_hash() -> str:
    """A unique ``key_hash`` that no key matches (the column is unique)."""
    return REVOKED + secrets.token_hex(31)


def is_revoked(user: User) -> bool:
    return user.key_hash.startswith(REVOKED)


def revoke_key(user: User) -> None:
    user.key_hash = revoked_hash()


def rotate_key(user: User) -> str:
    """A new key for ``user`` (returned, to be shown once); the old one stops working."""
    key = new_api_key()
    user.key_hash = hash_key(key)
    return key


async def user_for_key(db: AsyncSession, key: str) -> User | None:
    """The user of ``key``; None for an unknown, revoked or rotated key or a deleted user."""
    result = await db.execute(
        select(User).where(User.key_hash == hash_key(key), User.deleted_at.is_(None))
    )
    return result.scalar_one_or_none()


def write_credentials(path: Path, api_url: str, api_key: str) -> None:
    """Writes the client credentials file with mode 0600 from the start (no window)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"api_url": api_url, "api_key": api_key}, f)
        f.write("\n")
    os.replace(tmp, path)


async def ensure_admin(db: AsyncSession, credentials: Path, api_url: str) -> bool:
    """On first start (no users yet) creates user ``admin`` and writes its key; True if so."""
    count = (await db.execute(select(func.count()).select_from(User))).scalar_one()
    if count:
        return False
    _, key = await create_user(db, "admin", admin=True)
    await db.commit()
    write_credentials(credentials, api_url, key)
    return True
