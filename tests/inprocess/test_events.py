"""Session events and the audit list (docs/events.md) with a fake agent: status changes with
their reasons and actors (owner, admin, scheduler, system), kernel exits and OOM kills, app
opens, following with ``after``, bad input, the cap per session, retention, the web page's
timeline, and the audit list of changes to users and keys."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from tests.inprocess.conftest import IMAGE, Harness
from tests.inprocess.helpers import error_of, heartbeats, running, signed_in
from tests.inprocess.test_apps import alice_session
from troupe.api.lifecycle import utcnow
from troupe.manager import session_events
from troupe.manager.life import retention
from troupe.manager.session_events import record_event
from troupe.manager.store.models import Session, SessionEvent

MakeManager = Callable[..., Awaitable[Harness]]


async def new_user(h: Harness, name: str, admin: bool = False) -> httpx.AsyncClient:
    r = await h.client.post("/users", json={"name": name, "admin": admin})
    assert r.status_code == 201, r.text
    return h.user_client(r.json()["api_key"])


async def events(c: httpx.AsyncClient, ref: str, **params: Any) -> list[dict[str, Any]]:
    r = await c.get(f"/sessions/{ref}/events", params=params)
    assert r.status_code == 200, r.text
    return list(r.json())


def steps(evs: list[dict[str, Any]]) -> list[tuple[str, str | None, str]]:
    """(kind, status or kernel, actor) of each event."""
    return [(e["kind"], e["status"] or e["kernel"], e["actor"]) for e in evs]


async def test_an_admin_destroy_lists_every_step_with_its_actor(manager: Harness) -> None:
    alice = await new_user(manager, "alice")
    r = await alice.post("/sessions", json={"name": "s", "image": IMAGE})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    assert (await manager.wait(sid))["status"] == "RUNNING"
    r = await manager.client.delete(f"/sessions/{sid}")  # the admin, not the owner
    assert r.status_code == 200, r.text
    evs = await events(alice, "s")
    assert steps(evs) == [
        ("status", "PENDING", "user alice"),
        ("status", "SCHEDULED", "scheduler"),
        ("status", "PREPARING", "system"),
        ("status", "RUNNING", "system"),
        ("status", "TERMINATING", "admin admin"),
        ("status", "TERMINATED", "admin admin"),
    ]
    assert evs[0]["message"] == "created"
    assert evs[1]["message"] == "placed on local"
    assert evs[4]["message"] == evs[5]["message"] == "destroyed by admin admin"
    assert [e["id"] for e in evs] == sorted(e["id"] for e in evs)
    # the admin reads the same list
    assert await events(manager.client, sid) == evs


async def test_the_owner_destroying_is_the_user(manager: Harness) -> None:
    await running(manager, "mine")  # the admin's own session: they act as its user
    await manager.client.delete("/sessions/mine")
    evs = await events(manager.client, "mine")
    assert evs[0]["actor"] == "user admin"  # an admin creating a session is its user
    last = evs[-1]
    assert (last["status"], last["actor"], last["message"]) == (
        "TERMINATED",
        "user admin",
        "destroyed by user",
    )


async def test_kernel_exit_and_oom_are_events(manager: Harness) -> None:
    s = await running(manager, "x", cluster_size=3)
    await manager.local.exit_kernel(s["id"], "sub2", 137, oom=True)
    await manager.wait_status("x", "ERROR")
    evs = await events(manager.client, "x")
    oom = [e for e in evs if e["kind"] == "oom"]
    assert len(oom) == 1 and oom[0]["kernel"] == "sub2" and oom[0]["actor"] == "system"
    assert "out of memory" in oom[0]["message"] and "137" in oom[0]["message"]
    ending = [e for e in evs if e["status"] in ("TERMINATING", "ERROR")]
    assert [(e["status"], e["actor"]) for e in ending] == [
        ("TERMINATING", "system"),
        ("ERROR", "system"),
    ]
    assert ending[0]["message"] == "kernel ran out of memory"
    # an exit without OOM
    s = await running(manager, "y", cluster_size=2)
    await manager.local.exit_kernel(s["id"], "sub1", 3)
    await manager.wait_status("y", "ERROR")
    exits = [e for e in await events(manager.client, "y") if e["kind"] == "kernel-exit"]
    assert [(e["kernel"], e["message"]) for e in exits] == [("sub1", "exited with code 3")]


async def test_a_pending_session_cancelled_by_the_scheduler(manager: Harness) -> None:
    await running(manager, "full", resources={"cpu": 4, "mem": "1g"})
    await manager.create("p", resources={"cpu": 4, "mem": "1g"}, max_pending_seconds=0.1)
    await manager.wait_status("p", "CANCELLED")
    last = (await events(manager.client, "p"))[-1]
    assert (last["status"], last["actor"]) == ("CANCELLED", "scheduler")
    assert "max_pending_seconds" in last["message"]


async def test_app_opens_are_events(manager: Harness) -> None:
    alice = await alice_session(manager)
    assert (await alice.post("/sessions/s/apps/jupyter")).status_code == 200
    assert (await alice.post("/sessions/s/apps/nope")).status_code == 404
    opens = [e for e in await events(alice, "s") if e["kind"] == "app-open"]
    assert [(e["kernel"], e["actor"]) for e in opens] == [("main1", "user alice")] * 2
    assert "'jupyter' (port 8888) opened" in opens[0]["message"]
    assert "'nope' not opened" in opens[1]["message"]


async def test_following_with_after_and_since(manager: Harness) -> None:
    await running(manager, "f")
    evs = await events(manager.client, "f")
    last = evs[-1]["id"]
    assert await events(manager.client, "f", after=last) == []
    await manager.client.delete("/sessions/f")
    newer = await events(manager.client, "f", after=last)
    assert [e["status"] for e in newer] == ["TERMINATING", "TERMINATED"]
    assert await events(manager.client, "f", limit=2) == newer  # the newest two
    assert len(await events(manager.client, "f", since=evs[0]["at"])) == len(evs) + 1
    assert await events(manager.client, "f", since="0") != []


async def test_bad_input(manager: Harness) -> None:
    await running(manager, "b")
    for params in ({"since": "yesterday"}, {"since": "2999-01-01T00:00:00Z"}, {"after": -1}):
        r = await manager.client.get("/sessions/b/events", params=params)
        assert r.status_code == 422, (params, r.text)
    r = await manager.client.get("/sessions/b/events", params={"since": "2999-01-01T00:00:00Z"})
    assert error_of(r)["field"] == "since"
    assert (await manager.client.get("/sessions/nope/events")).status_code == 404
    assert (await manager.client.get("/sessions/..%2Fx/events")).status_code in (404, 422)
    bob = await new_user(manager, "bob")
    assert (await bob.get("/sessions/b/events")).status_code == 404  # another user's


async def test_a_session_keeps_at_most_cap_events(
    manager: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = await running(manager, "c")
    monkeypatch.setattr(session_events, "CAP", 5)
    assert manager.app is not None
    store = manager.app.state.db

    async def step(db: AsyncSession) -> None:
        for i in range(8):
            await record_event(db, s["id"], "restart", f"restart {i}", "policy restart")

    await store.write(step)
    evs = await events(manager.client, "c")
    assert [e["message"] for e in evs] == [f"restart {i}" for i in range(3, 8)]
    assert evs[-1]["actor"] == "policy restart"
    # status changes are not trimmed as they are written: the retention sweep trims them
    await manager.client.delete("/sessions/c")
    assert len(await events(manager.client, "c")) == 7
    await retention.sweep(manager.app.state.registry.life)
    evs = await events(manager.client, "c")
    assert len(evs) == 5 and evs[-1]["status"] == "TERMINATED"
    assert [e["message"] for e in evs[:3]] == ["restart 5", "restart 6", "restart 7"]


async def test_events_stay_with_finished_sessions_until_retention(
    make_manager: MakeManager,
) -> None:
    h = await make_manager(retention_days=1)
    assert h.app is not None
    s = await running(h, "old")
    await h.client.delete("/sessions/old")
    assert len(await events(h.client, "old")) == 6  # kept after the end
    async with h.app.state.db() as db:
        await db.execute(
            update(Session)
            .where(Session.id == s["id"])
            .values(terminated_at=utcnow() - timedelta(days=2))
        )
        await db.commit()
    assert await retention.sweep(h.app.state.registry.life) == 1
    async with h.app.state.db() as db:
        left = await db.scalar(select(func.count()).where(SessionEvent.session_id == s["id"]))
    assert left == 0


async def test_the_session_page_shows_the_timeline(manager: Harness) -> None:
    s = await running(manager, "w")
    web = await signed_in(manager)
    r = await web.get(f"/sessions/{s['id']}")
    assert r.status_code == 200, r.text
    assert 'id="events"' in r.text and "placed on local" in r.text and "scheduler" in r.text


# -- audit ------------------------------------------------------------------------------------
async def test_the_audit_list_records_changes_of_users_and_keys(manager: Harness) -> None:
    carol = await new_user(manager, "carol")
    r = await manager.client.put("/users/carol/limits", json={"sessions": 2, "mem": "4g"})
    assert r.status_code == 200, r.text
    assert (await carol.post("/users/me/rotate")).status_code == 200
    assert (await manager.client.post("/users/carol/rotate")).status_code == 200
    assert (await manager.client.post("/users/carol/revoke")).status_code == 200
    assert (await manager.client.delete("/users/carol")).status_code == 204
    r = await manager.client.get("/audit")
    assert r.status_code == 200, r.text
    got = [(a["actor"], a["action"], a["target"]) for a in r.json()]
    assert got == [
        ("admin", "user-create", "carol"),
        ("admin", "limits-set", "carol"),
        ("carol", "key-rotate", "carol"),
        ("admin", "key-rotate", "carol"),
        ("admin", "key-revoke", "carol"),
        ("admin", "user-delete", "carol"),
    ]
    entries = r.json()
    assert entries[1]["details"] == {"sessions": 2, "mem": 4 * 1024**3}
    assert entries[0]["details"] == {"admin": False}
    after = entries[2]["id"]
    r = await manager.client.get("/audit", params={"after": after})
    assert [a["id"] for a in r.json()] == [a["id"] for a in entries[3:]]
    # users who are no admins may not read it
    dave = await new_user(manager, "dave")
    assert (await dave.get("/audit")).status_code == 403
    # a refused change leaves no entry
    r = await manager.client.post("/users", json={"name": "dave"})
    assert r.status_code == 409
    assert len((await manager.client.get("/audit")).json()) == len(entries) + 1


async def test_a_lost_agent_is_the_system(manager: Harness) -> None:
    c = await manager.register("h2", group="g2")
    async with heartbeats(c, "h2"):
        await running(manager, "far", group="g2")
    await manager.wait("far", until="final", timeout=5)  # no more heartbeats: LOST
    ending = [e for e in await events(manager.client, "far") if e["status"] == "ERROR"]
    assert [(e["actor"], e["message"]) for e in ending] == [("system", "agent lost")]
