"""API keys: random, shown once, stored as SHA-256 (they carry 256 bits, so no slow hash).

A revoked key is replaced by a marker no key hashes to (:data:`REVOKED`); rotating gives a new
key and forgets the old one. A deleted user keeps its row (its sessions name it) but never
authenticates again.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
import uuid
from itertools import chain
from pathlib import Path
from typing import Any

from sqlalchemy import event, func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session as SyncSession

from troupe.manager.private_file import write_private
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
    return await _user_for_hash(db, hash_key(key))


async def _user_for_hash(db: AsyncSession, key_hash: str) -> User | None:
    result = await db.execute(
        select(User).where(User.key_hash == key_hash, User.deleted_at.is_(None))
    )
    return result.scalar_one_or_none()


_KEYS, _USERS_CHANGED = "troupe.keys", "troupe.users-changed"


class KeyCache:
    """Who holds which API key, remembered for a few seconds: requests come in runs (a CLI
    loop, the web UI's polling), and the key's query was a tenth of a cheap request's time.

    Emptied whenever a ``users`` row changes through a database session that carries it
    (:meth:`session_info`; the manager's are the only writers: one manager process serves the
    API), when that change is flushed and again when it commits; an entry also expires after
    :attr:`TTL` seconds (a row changed by hand). A look-up that began before a change does not
    put its (stale) answer in (:attr:`generation`). The users handed out are detached rows:
    read them, never change them.
    """

    TTL = 10.0
    MAX = 10_000

    def __init__(self) -> None:
        self._users: dict[str, tuple[float, User]] = {}
        #: bumped on every change of a users row
        self.generation = 0

    def session_info(self) -> dict[str, Any]:
        """What a database session's ``info`` holds so that its user changes empty this."""
        return {_KEYS: self}

    def clear(self) -> None:
        self.generation += 1
        self._users.clear()

    async def user(self, db: AsyncSession, key: str) -> User | None:
        """:func:`user_for_key`, from memory when it was asked shortly before."""
        key_hash = hash_key(key)
        hit = self._users.get(key_hash)
        now = time.monotonic()
        if hit is not None and now - hit[0] < self.TTL:
            return hit[1]
        generation = self.generation
        user = await _user_for_hash(db, key_hash)
        if user is not None and generation == self.generation:
            if len(self._users) >= self.MAX:
                self._users.clear()
            self._users[key_hash] = (now, user)
        return user


@event.listens_for(SyncSession, "after_flush")
def _users_flushed(session: SyncSession, flush_context: Any) -> None:
    cache = session.info.get(_KEYS)
    if isinstance(cache, KeyCache) and any(
        isinstance(o, User) for o in chain(session.new, session.dirty, session.deleted)
    ):
        cache.clear()
        session.info[_USERS_CHANGED] = True


@event.listens_for(SyncSession, "after_commit")
def _users_committed(session: SyncSession) -> None:
    cache = session.info.get(_KEYS)
    if session.info.pop(_USERS_CHANGED, False) and isinstance(cache, KeyCache):
        cache.clear()  # (a look-up between the flush and the commit read the old row)


@event.listens_for(SyncSession, "after_soft_rollback")
def _users_rolled_back(session: SyncSession, previous_transaction: Any) -> None:
    session.info.pop(_USERS_CHANGED, None)


def write_credentials(path: Path, api_url: str, api_key: str) -> None:
    """Writes the client credentials file, private (mode 0600) from the start."""
    write_private(path, json.dumps({"api_url": api_url, "api_key": api_key}) + "\n")


async def ensure_admin(db: AsyncSession, credentials: Path, api_url: str) -> bool:
    """On first start (no users yet) creates user ``admin`` and writes its key; True if so."""
    count = (await db.execute(select(func.count()).select_from(User))).scalar_one()
    if count:
        return False
    _, key = await create_user(db, "admin", admin=True)
    await db.commit()
    write_credentials(credentials, api_url, key)
    return True
