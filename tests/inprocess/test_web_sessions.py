"""Web sessions end on the server (finding N8, docs/reliability.md): a copy of the sign-in
cookie stops working at sign-out, at a revoke, rotate or delete of the user's key, and when
it expires; ended rows are pruned."""

from __future__ import annotations

from datetime import timedelta

import httpx
from sqlalchemy import event, func, select

from tests.inprocess.conftest import Harness
from tests.inprocess.helpers import ORIGIN, signed_in, web_client
from troupe.api.lifecycle import utcnow
from troupe.manager import websessions
from troupe.manager.life import retention
from troupe.manager.store.models import WebSession


def copy_of(c: httpx.AsyncClient, h: Harness) -> httpx.AsyncClient:
    """Another browser holding a copy of ``c``'s cookie."""
    other = web_client(h)
    other.cookies.set(websessions.COOKIE, c.cookies[websessions.COOKIE])
    return other


async def rows(h: Harness) -> int:
    assert h.app is not None
    async with h.app.state.db() as db:
        return int((await db.execute(select(func.count()).select_from(WebSession))).scalar_one())


async def test_sign_out_ends_a_copied_cookie(manager: Harness) -> None:
    c = await signed_in(manager)
    copy = copy_of(c, manager)
    assert (await copy.get("/v1/sessions")).status_code == 200
    assert (await copy.get("/")).status_code == 200
    r = await c.post("/signout", headers={"Origin": ORIGIN})
    assert r.status_code == 303
    assert (await copy.get("/v1/sessions")).status_code == 401
    r = await copy.get("/")
    assert r.status_code == 303 and r.headers["location"].startswith("/signin")
    assert await rows(manager) == 0


async def test_sign_out_ends_only_that_web_session(manager: Harness) -> None:
    first, second = await signed_in(manager), await signed_in(manager)
    assert first.cookies[websessions.COOKIE] != second.cookies[websessions.COOKIE]
    assert (await first.post("/signout", headers={"Origin": ORIGIN})).status_code == 303
    assert (await second.get("/v1/sessions")).status_code == 200


async def test_sign_out_needs_this_origin(manager: Harness) -> None:
    """Another site cannot sign a user out (nor anything else) with the cookie."""
    c = await signed_in(manager)
    r = await c.post("/signout", headers={"Origin": "http://evil.test"})
    assert r.status_code == 403
    assert (await c.get("/v1/sessions")).status_code == 200


async def test_revoke_and_delete_end_web_sessions(manager: Harness) -> None:
    carol = (await manager.client.post("/users", json={"name": "carol"})).json()["api_key"]
    dave = (await manager.client.post("/users", json={"name": "dave"})).json()["api_key"]
    c, d = await signed_in(manager, carol), await signed_in(manager, dave)
    assert (await c.get("/v1/sessions")).status_code == 200
    assert (await manager.client.post("/users/carol/revoke")).status_code == 200
    assert (await c.get("/v1/sessions")).status_code == 401
    assert (await c.get("/")).status_code == 303
    assert (await d.get("/v1/sessions")).status_code == 200
    assert (await manager.client.delete("/users/dave")).status_code == 204
    assert (await d.get("/v1/sessions")).status_code == 401
    # a new key does not bring the revoked web session back
    assert (await manager.client.post("/users/carol/rotate")).status_code == 200
    assert (await c.get("/v1/sessions")).status_code == 401


async def test_expired_and_ended_web_sessions_are_refused_and_pruned(manager: Harness) -> None:
    assert manager.app is not None
    c = await signed_in(manager)
    token = c.cookies[websessions.COOKIE]
    r = await manager.client.post("/users", json={"name": "erin"})
    erin = await signed_in(manager, r.json()["api_key"])
    assert await rows(manager) == 2
    assert (await manager.client.post("/users/erin/rotate")).status_code == 200
    later = utcnow() + timedelta(seconds=websessions.MAX_AGE + 1)
    async with manager.app.state.db() as db:
        assert await websessions.user_of(db, token) is not None
        assert await websessions.user_of(db, token, later) is None
        assert await websessions.user_of(db, "not-a-token") is None
    life = manager.app.state.registry.life
    assert await retention.prune_web_sessions(life) == 1  # erin's key changed
    assert (await erin.get("/v1/sessions")).status_code == 401
    assert (await c.get("/v1/sessions")).status_code == 200
    assert await retention.prune_web_sessions(life, later) == 1  # the admin's expired
    assert await rows(manager) == 0
    assert (await c.get("/v1/sessions")).status_code == 401


async def test_a_cookie_request_is_one_query(manager: Harness) -> None:
    """The cookie costs what the key costs: one indexed look-up (the API is benchmarked)."""
    assert manager.app is not None
    c = await signed_in(manager)
    token = c.cookies[websessions.COOKIE]
    statements: list[str] = []
    engine = manager.app.state.db.engine.sync_engine

    def seen(conn: object, cursor: object, statement: str, *args: object) -> None:
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", seen)
    try:
        async with manager.app.state.db() as db:
            assert await websessions.user_of(db, token) is not None
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    # (the registry's loop may run statements of its own meanwhile)
    mine = [s for s in statements if s.startswith("SELECT") and ("users" in s or "web_" in s)]
    assert len(mine) == 1 and "web_sessions.id = " in mine[0]
