"""The API key cache (manager/auth.py KeyCache): a key asked again is not looked up again,
and every change of a user is seen by the next request."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event

from tests.inprocess.conftest import Harness
from tests.inprocess.test_hardening_users import new_user, set_limits
from troupe.manager.auth import KeyCache


@contextmanager
def user_queries(h: Harness) -> Iterator[list[str]]:
    """The reads of the users table while inside (a key's look-up is a SELECT; background
    sweeps, such as the one of expired web sessions, may name the table in a DELETE's
    subquery at any moment and are no look-up)."""
    assert h.app is not None
    engine = h.app.state.db.engine.sync_engine
    seen: list[str] = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM users" in statement:
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", before)


async def test_a_key_is_looked_up_once_then_remembered(manager: Harness) -> None:
    bob, _ = await new_user(manager, "bob")
    assert (await bob.get("/sessions")).status_code == 200
    with user_queries(manager) as seen:
        assert (await bob.get("/sessions")).status_code == 200
    assert seen == []


async def test_every_change_of_a_user_is_seen_at_once(manager: Harness) -> None:
    bob, _ = await new_user(manager, "bob")
    assert (await bob.get("/users/me")).json()["limits"]["sessions"] != 7
    await set_limits(manager, "bob", sessions=7)
    assert (await bob.get("/users/me")).json()["limits"]["sessions"] == 7
    assert (await manager.client.post("/users/bob/revoke")).status_code == 200
    assert (await bob.get("/users/me")).status_code == 401
    new = (await manager.client.post("/users/bob/rotate")).json()["api_key"]
    bob = manager.user_client(new)
    assert (await bob.get("/users/me")).status_code == 200
    assert (await manager.client.delete("/users/bob")).status_code == 204
    assert (await bob.get("/users/me")).status_code == 401


async def test_a_look_up_that_raced_a_change_is_not_kept(
    manager: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change committed while a key was looked up: that (perhaps stale) answer is used once
    but not remembered."""
    assert manager.app is not None
    keys: KeyCache = manager.app.state.keys
    _, key = await new_user(manager, "bob")
    keys.clear()
    import troupe.manager.auth as auth

    looked_up = auth._user_for_hash

    async def racing(db: Any, key_hash: str) -> Any:
        user = await looked_up(db, key_hash)
        keys.clear()  # as a flush of a users row meanwhile does
        return user

    monkeypatch.setattr(auth, "_user_for_hash", racing)
    assert (await manager.user_client(key).get("/users/me")).status_code == 200
    monkeypatch.setattr(auth, "_user_for_hash", looked_up)
    with user_queries(manager) as seen:
        assert (await manager.user_client(key).get("/users/me")).status_code == 200
    assert len(seen) >= 1


async def test_a_remembered_key_expires(manager: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    bob, _ = await new_user(manager, "bob")
    assert (await bob.get("/sessions")).status_code == 200
    monkeypatch.setattr(KeyCache, "TTL", 0.0)
    with user_queries(manager) as seen:
        assert (await bob.get("/sessions")).status_code == 200
    assert seen
