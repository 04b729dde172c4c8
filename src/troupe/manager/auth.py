"""API keys: random, shown once, stored as SHA-256 (they carry 256 bits, so no slow hash)."""

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


async def user_for_key(db: AsyncSession, key: str) -> User | None:
    result = await db.execute(select(User).where(User.key_hash == hash_key(key)))
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
