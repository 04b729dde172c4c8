"""Hardening of users and what they leave behind: per-user quotas (S2), revoking, rotating
and deleting users (S4), retention of finished sessions, and private keys and saved logs of
finished sessions (L4)."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from tests.inprocess.conftest import IMAGE, Harness, eventually
from tests.inprocess.helpers import error_of, running
from troupe.api.lifecycle import utcnow
from troupe.manager.life import retention
from troupe.manager.store.models import Kernel, Session

G = 1024**3
MakeManager = Callable[..., Awaitable[Harness]]


async def new_user(h: Harness, name: str, admin: bool = False) -> tuple[httpx.AsyncClient, str]:
    r = await h.client.post("/users", json={"name": name, "admin": admin})
    assert r.status_code == 201, r.text
    key = r.json()["api_key"]
    return h.user_client(key), key


async def create(c: httpx.AsyncClient, name: str, **body: Any) -> httpx.Response:
    return await c.post("/sessions", json={"name": name, "image": IMAGE, **body})


def refused(r: httpx.Response, field: str | None, *words: str) -> None:
    assert r.status_code == 403, r.text
    err = error_of(r)
    assert err["code"] == "quota_exceeded" and err["field"] == field, err
    for w in words:
        assert w in err["message"], err


async def set_limits(h: Harness, name: str, **limits: Any) -> dict[str, Any]:
    r = await h.client.put(f"/users/{name}/limits", json=limits)
    assert r.status_code == 200, r.text
    return dict(r.json())


# -- S2: quotas ---------------------------------------------------------------------------
async def test_default_limits_refuse_priority_and_foreign_groups(manager: Harness) -> None:
    bob, _ = await new_user(manager, "bob")
    refused(await create(bob, "p", priority=1), "priority", "limit of 0")
    refused(await create(bob, "g", group="gpu"), "group", "'gpu'")
    assert (await create(bob, "ok", priority=0)).status_code == 201
    # admins have no limits
    assert (
        await manager.client.post("/sessions", json={"name": "p", "image": IMAGE, "priority": 5})
    ).status_code == 201
    me = (await bob.get("/users/me")).json()
    assert me["limits"]["max_priority"] == 0 and me["limits"]["groups"] == ["default"]
    assert me["usage"]["sessions"] == 1


async def test_limits_set_by_an_admin_are_applied_and_shown(manager: Harness) -> None:
    bob, _ = await new_user(manager, "bob")
    d = await set_limits(manager, "bob", sessions=2, kernels=3, cpu=2, mem="2g", gpu=0)
    assert d["limits"]["mem"] == 2 * G and d["overrides"]["mem"] == 2 * G
    small = {"cpu": 0.5, "mem": "256m"}
    refused(
        await create(bob, "big", cluster_size=4, resources=small),
        "cluster_size",
        "limit of 3 (kernels)",
    )
    refused(
        await create(bob, "cpu", cluster_size=3, resources={"cpu": 1, "mem": "256m"}),
        "resources",
        "limit of 2 (cpu)",
    )
    refused(
        await create(bob, "mem", cluster_size=2, resources={"cpu": 0.5, "mem": "1.5g"}),
        "resources",
        "limit of 2g (mem)",
    )
    refused(await create(bob, "gpu", resources={"gpu": 1}), "resources", "(gpu)")
    assert (await create(bob, "a", cluster_size=2, resources=small)).status_code == 201
    assert (await create(bob, "b", resources=small)).status_code == 201
    refused(await create(bob, "c", resources=small), None, "limit is 2 (sessions)")
    d = (await manager.client.get("/users/bob")).json()
    assert d["usage"] == {"sessions": 2, "kernels": 3, "cpu": 1.5, "mem": 768 * 1024**2, "gpu": 0}
    # finished sessions free their share
    assert (await bob.delete("/sessions/b")).status_code == 200
    assert (await create(bob, "c", resources=small)).status_code == 201
    # null goes back to the default; keys left out keep their value
    d = await set_limits(
        manager, "bob", sessions=None, kernels=4, max_priority=10, groups=["default", "x"]
    )
    assert d["limits"]["sessions"] == manager.config.quota_sessions
    assert d["limits"]["cpu"] == 2 and d["limits"]["max_priority"] == 10
    assert d["overrides"] == {
        "kernels": 4,
        "cpu": 2,
        "mem": 2 * G,
        "gpu": 0,
        "max_priority": 10,
        "groups": ["default", "x"],
    }
    r = await create(bob, "prio", priority=10, resources={"cpu": 0.1, "mem": "64m"})
    assert r.status_code == 201, r.text


async def test_limits_are_for_admins_to_set_and_validated(manager: Harness) -> None:
    bob, _ = await new_user(manager, "bob")
    r = await bob.put("/users/bob/limits", json={"sessions": 100})
    assert r.status_code == 403
    assert (await bob.get("/users/admin")).status_code == 403
    mine = (await bob.get("/users/bob")).json()  # their own
    assert mine["limits"]["sessions"] == manager.config.quota_sessions
    for body in (
        {"sessions": -1},
        {"mem": "lots"},
        {"streams": 0},
        {"nope": 1},
        {"groups": ["bad name"]},
        {"max_priority": 1000},
    ):
        r = await manager.client.put("/users/bob/limits", json=body)
        assert r.status_code == 422, (body, r.text)
    r = await manager.client.put("/users/nobody/limits", json={"sessions": 1})
    assert r.status_code == 404


async def test_concurrent_creates_do_not_pass_a_quota(manager: Harness) -> None:
    bob, _ = await new_user(manager, "bob")
    await set_limits(manager, "bob", sessions=3)
    manager.local.delays["has_image"] = 0.05  # every create passes the first checks at once
    results = await asyncio.gather(
        *(create(bob, f"s{i}", resources={"cpu": 0.1, "mem": "64m"}) for i in range(10))
    )
    codes = sorted(r.status_code for r in results)
    assert codes == [201] * 3 + [403] * 7, codes
    sessions = (await manager.client.get("/sessions")).json()
    assert len(sessions) == 3


# -- S4: revoke, rotate, delete ----------------------------------------------------------
async def test_revoke_stops_the_key_at_once_and_rotate_gives_a_new_one(
    manager: Harness,
) -> None:
    bob, old = await new_user(manager, "bob")
    assert (await bob.get("/users/me")).status_code == 200
    r = await manager.client.post("/users/bob/revoke")
    assert r.status_code == 200 and r.json()["revoked"] is True
    r = await bob.get("/sessions")
    assert r.status_code == 401 and error_of(r)["code"] == "unauthorized"
    listed = {u["name"]: u for u in (await manager.client.get("/users")).json()}
    assert listed["bob"]["revoked"] is True and listed["admin"]["revoked"] is False
    r = await manager.client.post("/users/bob/rotate")
    assert r.status_code == 200
    new = r.json()["api_key"]
    assert new and new != old
    assert (await manager.user_client(old).get("/users/me")).status_code == 401
    assert (await manager.user_client(new).get("/users/me")).json()["revoked"] is False
    # only admins revoke or rotate others
    carol, _ = await new_user(manager, "carol")
    assert (await carol.post("/users/bob/revoke")).status_code == 403
    assert (await carol.post("/users/bob/rotate")).status_code == 403
    assert (await manager.client.post("/users/nobody/revoke")).status_code == 404


async def test_a_user_rotates_their_own_key(manager: Harness) -> None:
    bob, old = await new_user(manager, "bob")
    r = await bob.post("/users/me/rotate")
    assert r.status_code == 200, r.text
    new = r.json()["api_key"]
    assert r.json()["name"] == "bob" and new.startswith("trp_") and new != old
    assert (await bob.get("/users/me")).status_code == 401
    assert (await manager.user_client(new).get("/users/me")).json()["name"] == "bob"


async def test_the_last_admin_can_be_neither_revoked_nor_deleted(manager: Harness) -> None:
    r = await manager.client.post("/users/admin/revoke")
    assert r.status_code == 409 and "last admin" in error_of(r)["message"]
    r = await manager.client.delete("/users/admin")
    assert r.status_code == 409 and "last admin" in error_of(r)["message"]
    root, _ = await new_user(manager, "root", admin=True)
    # with another admin, either may go; then the other is the last one
    assert (await manager.client.post("/users/admin/revoke")).status_code == 200
    assert (await manager.client.get("/users/me")).status_code == 401
    r = await root.delete("/users/root")
    assert r.status_code == 409
    assert (await root.delete("/users/admin")).status_code == 204
    assert (await root.get("/users/me")).json()["admin"] is True


async def test_delete_refuses_active_sessions_then_forgets_the_user(manager: Harness) -> None:
    bob, key = await new_user(manager, "bob")
    assert (await bob.post("/folders", json={"name": "data"})).status_code == 201
    folder_id = (await bob.get("/folders")).json()[0]["id"]
    folder = manager.config.folders_dir / folder_id
    (folder / "file").write_text("x")
    await running(manager, "x")  # the admin's: no matter
    assert (await create(bob, "train")).status_code == 201
    assert (await create(bob, "eval")).status_code == 201
    r = await manager.client.delete("/users/bob")
    assert r.status_code == 409, r.text
    assert "train" in error_of(r)["message"] and "eval" in error_of(r)["message"]
    for name in ("train", "eval"):
        assert (await bob.delete(f"/sessions/{name}")).status_code == 200
    assert (await bob.delete("/users/bob")).status_code == 403  # admins only
    assert (await manager.client.delete("/users/bob")).status_code == 204
    # cannot authenticate, hidden, its folder gone with its data
    assert (await bob.get("/users/me")).status_code == 401
    assert (await manager.user_client(key).get("/sessions")).status_code == 401
    assert [u["name"] for u in (await manager.client.get("/users")).json()] == ["admin"]
    assert (await manager.client.get("/users/bob")).status_code == 404
    assert (await manager.client.delete("/users/bob")).status_code == 404
    await eventually(lambda: not folder.exists())
    # the name may be taken again; the new bob has nothing of the old one
    bob2, _ = await new_user(manager, "bob")
    assert (await bob2.get("/folders")).json() == []
    assert (await bob2.get("/sessions", params={"all": True})).json() == []
    # the old bob's finished sessions stay, owned by the renamed user
    owners = {
        s["owner"] for s in (await manager.client.get("/sessions", params={"all": True})).json()
    }
    assert any(o.startswith("bob~deleted~") for o in owners), owners


async def test_a_deleted_user_cannot_create_in_flight(manager: Harness) -> None:
    """A create that passed authentication before the deletion is refused under the lock."""
    bob, _ = await new_user(manager, "bob")
    manager.local.delays["has_image"] = 0.3
    pending = asyncio.create_task(create(bob, "late"))
    await asyncio.sleep(0.1)
    assert (await manager.client.delete("/users/bob")).status_code == 204
    r = await pending
    assert r.status_code == 401, r.text
    assert (await manager.client.get("/sessions", params={"all": True})).json() == []


async def test_me_is_not_a_user_name(manager: Harness) -> None:
    r = await manager.client.post("/users", json={"name": "me"})
    assert r.status_code == 422 and error_of(r)["field"] == "name"


# -- L4: private keys and saved logs of finished sessions --------------------------------
async def keys_of(h: Harness, session_id: str) -> list[str]:
    assert h.app is not None
    async with h.app.state.db() as db:
        s = await db.get(Session, session_id)
        assert s is not None
        rows = await db.execute(
            select(Kernel.host_private_key).where(Kernel.session_id == session_id)
        )
        return [s.ssh_private_key, *rows.scalars()]


async def test_private_keys_are_wiped_when_a_session_ends(manager: Harness) -> None:
    # destroyed
    s = await running(manager, "d", cluster_size=2)
    assert all("PRIVATE KEY" in k for k in await keys_of(manager, s["id"]))
    await manager.client.delete("/sessions/d")
    assert await keys_of(manager, s["id"]) == ["", "", ""]
    # failed (ERROR)
    s = await running(manager, "e", cluster_size=2)
    await manager.local.exit_kernel(s["id"], "sub1", code=3)
    await manager.wait_status("e", "ERROR")
    assert await keys_of(manager, s["id"]) == ["", "", ""]
    # cancelled while PENDING (it does not fit next to a RUNNING one)
    await running(manager, "full", resources={"cpu": 4, "mem": "1g"})
    p = await manager.create("p", resources={"cpu": 4, "mem": "1g"})
    assert p["status"] == "PENDING"
    r = await manager.client.delete("/sessions/p")
    assert r.json()["status"] == "CANCELLED"
    assert await keys_of(manager, p["id"]) == ["", ""]


async def test_retention_sweep_wipes_keys_of_sessions_cancelled_elsewhere(
    manager: Harness,
) -> None:
    await running(manager, "full", resources={"cpu": 4, "mem": "1g"})
    p = await manager.create("p", resources={"cpu": 4, "mem": "1g"}, max_pending_seconds=0.1)
    await manager.wait_status("p", "CANCELLED")
    assert manager.app is not None
    await retention.sweep(manager.app.state.registry.life)
    assert await keys_of(manager, p["id"]) == ["", ""]


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


async def test_saved_logs_are_private_and_capped(make_manager: MakeManager) -> None:
    h = await make_manager(saved_log_bytes=200)
    s = await running(h, "s", cluster_size=2)
    c = h.local.container(s["id"], "main1")
    c.logs.extend(f"2026-11-26T00:01:{i % 60:02d}.000Z line {i}\n" for i in range(100))
    with umask(0):
        assert (await h.client.delete("/sessions/s")).status_code == 200
    logs_dir = h.config.logs_dir
    d = logs_dir / s["id"]
    assert mode(logs_dir) == 0o700 and mode(d) == 0o700
    files = sorted(d.iterdir())
    assert [f.name for f in files] == ["main1.log", "sub1.log"]
    assert all(mode(f) == 0o600 for f in files)
    saved = (d / "main1.log").read_bytes()
    assert len(saved) <= 200 and saved.endswith(b"line 99\n")
    assert saved.startswith(b"2026-")  # whole lines only
    r = await h.client.get("/sessions/s/logs", params={"container": "main1"})
    assert r.text.splitlines()[-1] == "line 99"


# -- retention ------------------------------------------------------------------------------
async def test_retention_deletes_old_finished_sessions_with_their_logs(
    make_manager: MakeManager,
) -> None:
    h = await make_manager(retention_days=2)
    assert h.app is not None
    life = h.app.state.registry.life
    old = await running(h, "old", cluster_size=2)
    await h.client.delete("/sessions/old")
    kept = await running(h, "kept")
    await h.client.delete("/sessions/kept")
    active = await running(h, "active")
    assert (h.config.logs_dir / old["id"]).is_dir()
    assert await retention.sweep(life) == 0  # nothing old enough yet
    # "old" ended three days ago
    async with h.app.state.db() as db:
        await db.execute(
            update(Session)
            .where(Session.id == old["id"])
            .values(terminated_at=utcnow() - timedelta(days=3))
        )
        await db.commit()
    assert await retention.sweep(life) == 1
    assert (await h.client.get(f"/sessions/{old['id']}")).status_code == 404
    assert not (h.config.logs_dir / old["id"]).exists()
    async with h.app.state.db() as db:
        left = (await db.execute(select(Kernel.session_id))).scalars().all()
    assert old["id"] not in left and kept["id"] in left and active["id"] in left
    assert (await h.client.get(f"/sessions/{kept['id']}")).status_code == 200
    # everything is old a week from now, but active sessions are never touched
    assert await retention.sweep(life, now=utcnow() + timedelta(days=7)) == 1
    assert (await h.get("active"))["status"] == "RUNNING"


async def test_retention_zero_keeps_everything(make_manager: MakeManager) -> None:
    h = await make_manager(retention_days=0)
    assert h.app is not None
    await running(h, "s")
    await h.client.delete("/sessions/s")
    assert await retention.sweep(h.app.state.registry.life, utcnow() + timedelta(days=1e4)) == 0
    assert (await h.get("s"))["status"] == "TERMINATED"


async def test_the_scheduler_loop_runs_the_retention_sweep(
    make_manager: MakeManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retention, "INTERVAL", 0.0)
    h = await make_manager(retention_days=1)
    assert h.app is not None
    s = await running(h, "s")
    await h.client.delete("/sessions/s")
    async with h.app.state.db() as db:
        await db.execute(
            update(Session)
            .where(Session.id == s["id"])
            .values(terminated_at=utcnow() - timedelta(days=2))
        )
        await db.commit()
    await h.create("wake")  # a new session wakes the scheduler at once

    async def gone() -> bool:
        return (await h.client.get(f"/sessions/{s['id']}")).status_code == 404

    for _ in range(200):
        if await gone():
            break
        await asyncio.sleep(0.05)
    assert await gone()
