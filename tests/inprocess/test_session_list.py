"""GET /v1/sessions in pages (newest first, ``limit`` and a ``before`` cursor, ``Link: next``),
the SDK fetching every page, the lookup by id or name, and the schema the migrations make."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Select, create_engine, event, select
from sqlalchemy.dialects import sqlite

from tests.inprocess.conftest import Harness
from tests.inprocess.test_hardening_users import new_user
from tests.inprocess.test_sdk_errors import Bridge, admin_key
from troupe.manager.reads.sessions import list_query, lookup_query
from troupe.manager.routes.sessions import LIST_LIMIT
from troupe.manager.store.db import alembic_config
from troupe.manager.store.models import Base, Kernel, Session, User

#: Finished sessions start a day back: well inside the retention (30 days), so the sweep at the
#: manager's start never deletes them under a test.
T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(days=1)


async def store_finished(h: Harness, owner: str, n: int, same_time: int = 0) -> list[str]:
    """Writes ``n`` TERMINATED sessions of ``owner`` straight into the database, one a second
    from :data:`T0` (the last ``same_time`` of them at one instant); returns their ids."""
    assert h.app is not None
    ids = []
    async with h.app.state.db() as db:
        user = (await db.execute(select(User).where(User.name == owner))).scalar_one()
        for i in range(n):
            sid = str(uuid.uuid4())
            ids.append(sid)
            at = T0 + timedelta(seconds=min(i, n - same_time))
            db.add(
                Session(
                    id=sid,
                    name=f"old-{i}",
                    owner_id=user.id,
                    status="TERMINATED",
                    type="batch",
                    image="troupe/base:0.1.0",
                    cluster_size=2,
                    cluster_mode="single-node",
                    cpu=1.0,
                    mem=2**30,
                    dist_env="default",
                    ssh_private_key="",
                    ssh_public_key="k",
                    created_at=at,
                    terminated_at=at,
                    kernels=[
                        Kernel(
                            id=str(uuid.uuid4()),
                            hostname=host,
                            role=host[:-1],
                            idx=1,
                            rank=rank,
                            image="troupe/base:0.1.0",
                            cpu=1.0,
                            mem=2**30,
                            status="TERMINATED",
                            host_public_key="k",
                            host_private_key="",
                        )
                        for rank, host in enumerate(["main1", "sub1"])
                    ],
                )
            )
        await db.commit()
    return ids


async def every_page(
    c: httpx.AsyncClient, **params: Any
) -> tuple[list[list[dict[str, Any]]], list[str]]:
    """Pages from the first, following ``Link: next``; and the links followed."""
    pages, links = [], []
    r = await c.get("/sessions", params=params)
    while True:
        assert r.status_code == 200, r.text
        pages.append(r.json())
        link = r.links.get("next", {}).get("url")
        if not link:
            return pages, links
        links.append(link)
        r = await c.get(link.removeprefix("/v1"))


async def test_pages_newest_first_each_oldest_first(manager: Harness) -> None:
    stored = await store_finished(manager, "admin", 23, same_time=4)
    active = [(await manager.create(f"live{i}"))["id"] for i in range(2)]
    pages, links = await every_page(manager.client, all=True, limit=5)
    assert [len(p) for p in pages] == [5, 5, 5, 5, 5]
    assert all("all=true" in link and "limit=5" in link for link in links)
    listed = [s["id"] for page in reversed(pages) for s in page]
    assert sorted(listed) == sorted(stored + active) and len(set(listed)) == 25
    assert [s["id"] for s in pages[0]][-2:] == active  # the newest, in the first page
    keys = [(s["created_at"], s["id"]) for page in reversed(pages) for s in page]
    assert keys == sorted(keys)  # oldest first overall, ties broken by id
    assert all(len(s["kernels"]) == 2 for s in pages[-1])
    # the default: active sessions only, in one page without a link
    r = await manager.client.get("/sessions")
    assert [s["id"] for s in r.json()] == active and "link" not in r.headers


async def test_default_limit_and_bounds(manager: Harness) -> None:
    await store_finished(manager, "admin", LIST_LIMIT + 3)
    r = await manager.client.get("/sessions", params={"all": True})
    assert len(r.json()) == LIST_LIMIT and 'rel="next"' in r.headers["link"]
    assert r.json()[-1]["name"] == f"old-{LIST_LIMIT + 2}"  # the newest last
    for bad in (0, 1001, "x"):
        r = await manager.client.get("/sessions", params={"all": True, "limit": bad})
        assert r.status_code == 422, r.text
    r = await manager.client.get("/sessions", params={"all": True, "before": "ghost"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


async def test_users_page_their_own(manager: Harness) -> None:
    bob, _ = await new_user(manager, "bob")
    theirs = await store_finished(manager, "admin", 3)
    mine = await store_finished(manager, "bob", 7)
    pages, _ = await every_page(bob, all=True, limit=3)
    assert sorted(s["id"] for p in pages for s in p) == sorted(mine)
    assert all(s["owner"] == "bob" for p in pages for s in p)
    # someone else's session is no cursor for bob (as if it did not exist)
    r = await bob.get("/sessions", params={"all": True, "before": theirs[0]})
    assert r.status_code == 404
    pages, _ = await every_page(manager.client, all=True, limit=4)
    assert len({s["id"] for p in pages for s in p}) == 10  # the admin sees both
    await bob.aclose()


async def test_lookup_by_id_or_name(manager: Harness) -> None:
    bob, _ = await new_user(manager, "bob")
    old = await store_finished(manager, "bob", 2)
    admins = await store_finished(manager, "admin", 1)
    live = await manager.create("old-0")  # the admin's active session of bob's name
    r = await bob.get(f"/sessions/{old[1]}")
    assert r.status_code == 200 and r.json()["id"] == old[1]
    assert [k["hostname"] for k in r.json()["kernels"]] == ["main1", "sub1"]
    assert (await bob.get("/sessions/old-0")).json()["id"] == old[0]  # their own
    assert (await bob.get(f"/sessions/{admins[0]}")).status_code == 404
    assert (await bob.get(f"/sessions/{live['id']}")).status_code == 404
    # the admin: own first, active before finished
    assert (await manager.get("old-0"))["id"] == live["id"]
    assert (await manager.get(old[0]))["owner"] == "bob"
    await bob.aclose()


async def test_a_users_lookup_by_name_is_an_index_search(manager: Harness) -> None:
    """Not a scan of every session of the user through the owner's index (SQLite chose that
    while only ``owner_id`` and ``name`` had indexes of their own: ~1,250 rows in bench/api.py)."""
    bob, _ = await new_user(manager, "bob")
    await store_finished(manager, "bob", 50)
    assert manager.app is not None
    async with manager.app.state.db() as db:
        user = (await db.execute(select(User).where(User.name == "bob"))).scalar_one()
        q = lookup_query(user, "old-7").compile(
            dialect=sqlite.dialect(), compile_kwargs={"render_postcompile": True}
        )
        args = tuple(q.params[name] for name in q.positiontup or [])
        conn = await db.connection()
        plan = [row[-1] for row in await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {q}", args)]
    searches = [p for p in plan if p.startswith("SEARCH sessions")]
    assert any("ix_sessions_owner_name (owner_id=? AND name=?)" in p for p in searches), plan
    assert not any(p.startswith("SCAN sessions") for p in plan), plan
    await bob.aclose()


async def plan_of(h: Harness, q: Select[Any], params: dict[str, Any]) -> list[str]:
    """SQLite's plan for ``q`` as it is run (the SQL and values the driver gets)."""
    assert h.app is not None
    async with h.app.state.db() as db:
        conn = await db.connection()
        sent: list[tuple[str, Any]] = []

        def grab(*args: Any) -> None:
            sent.append((args[2], args[3]))

        event.listen(conn.sync_connection, "before_cursor_execute", grab)
        await conn.execute(q, params)
        event.remove(conn.sync_connection, "before_cursor_execute", grab)
        plan = await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sent[0][0]}", tuple(sent[0][1]))
        return [row[-1] for row in plan]


async def test_pages_of_the_list_and_the_lookup_by_id_are_index_searches(manager: Harness) -> None:
    """Pages of the API's and the web's list each walk their index (the active one through
    the partial index), and a look-up by id searches the primary key, for admins too."""
    await new_user(manager, "bob")
    ids = await store_finished(manager, "bob", 20)
    assert manager.app is not None
    async with manager.app.state.db() as db:
        bob = (await db.execute(select(User).where(User.name == "bob"))).scalar_one()
        admin = (await db.execute(select(User).where(User.name == "admin"))).scalar_one()
    mark = {"mark_at": T0, "mark_id": ids[5]}
    cases = [
        (list_query(True, "active", True), {"owner_id": bob.id, **mark}, "active_owner_created"),
        (list_query(True, "final", False), {"owner_id": bob.id}, "owner_created"),
        (list_query(False, "all", True), mark, "created"),
    ]
    for q, params, index in cases:
        plan = await plan_of(manager, q, {"limit": 5, **params})
        assert any(f"USING INDEX ix_sessions_{index} " in p for p in plan), plan
        assert "USE TEMP B-TREE FOR ORDER BY" not in plan, plan  # read in the index's order
    for user in (bob, admin):
        plan = await plan_of(manager, lookup_query(user, ids[3]), {})
        assert any("sqlite_autoindex_sessions_1 (id=?)" in p for p in plan), plan
        assert not any(p.startswith("SCAN sessions") for p in plan), plan


@pytest.fixture
async def bridge(manager: Harness) -> AsyncIterator[Bridge]:
    b = Bridge(manager, asyncio.get_running_loop())
    yield b
    await b.client.aclose()


async def test_sdk_fetches_every_page(manager: Harness, bridge: Bridge) -> None:
    stored = await store_finished(manager, "admin", 503, same_time=5)
    sdk = bridge.sdk(admin_key(manager))
    try:
        listed = await asyncio.to_thread(sdk.list_sessions_data, True)
        assert [s["id"] for s in listed] == sorted_ids(listed)
        assert sorted(s["id"] for s in listed) == sorted(stored)
        assert await asyncio.to_thread(sdk.list_sessions) == []  # none active
    finally:
        sdk.close()


def sorted_ids(sessions: list[dict[str, Any]]) -> list[str]:
    return [s["id"] for s in sorted(sessions, key=lambda s: (s["created_at"], s["id"]))]


def test_migrations_make_the_models_schema(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 't.db'}")
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "head")
    with engine.begin() as conn:
        command.downgrade(alembic_config(conn), "0004")
        command.upgrade(alembic_config(conn), "head")
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []
    engine.dispose()
