"""Hardening of the API's edge: per-user stream limits, keys only in the Authorization
header, per-agent credentials, removing agents, refusing what cannot work before a stream
starts, and the validation of resources, images and exec arguments.

Some tests drive the ASGI app directly (httpx's ASGITransport buffers whole answers and has
no WebSocket): :class:`AsgiHttp` and :class:`AsgiWebSocket` record what the app sends.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from tests.inprocess.asgi import AsgiHttp, AsgiWebSocket, key_of
from tests.inprocess.conftest import IMAGE, Harness, MakeManager, eventually
from tests.inprocess.helpers import anon_client, error_of, heartbeats, running
from tests.inprocess.test_sdk_errors import Bridge
from troupe.api import errors as E
from troupe.manager.store.models import Agent, User
from troupe.manager.streams import Streams

# -- helpers -----------------------------------------------------------------------------------


async def new_user(h: Harness, name: str, admin: bool = False) -> httpx.AsyncClient:
    r = await h.client.post("/users", json={"name": name, "admin": admin})
    assert r.status_code == 201, r.text
    return h.user_client(r.json()["api_key"])


async def user_row(h: Harness, name: str) -> User:
    assert h.app is not None
    async with h.app.state.db() as db:
        user: User = (await db.execute(select(User).where(User.name == name))).scalar_one()
        return user


async def set_stream_limit(h: Harness, name: str, limit: int | None) -> None:
    """As an admin's per-user limit would: the ``streams`` key of ``users.limits``."""
    assert h.app is not None
    async with h.app.state.db() as db:
        user = (await db.execute(select(User).where(User.name == name))).scalar_one()
        user.limits = {**(user.limits or {}), "streams": limit}
        await db.commit()


def streams(h: Harness) -> Streams:
    assert h.app is not None
    s: Streams = h.app.state.streams
    return s


async def test_many_waits_of_one_user_do_not_slow_another(make_manager: MakeManager) -> None:
    manager = await make_manager(quota_streams=64)
    alice = await new_user(manager, "alice")
    bob = await new_user(manager, "bob")
    alice_id = (await user_row(manager, "alice")).id
    r = await alice.post("/sessions", json={"name": "long", "image": IMAGE})
    assert r.status_code == 201
    await manager.wait("long")

    async def wait() -> httpx.Response:
        return await alice.get("/sessions/long/wait", params={"until": "final", "timeout": 60})

    waits = [asyncio.create_task(wait()) for _ in range(40)]
    await eventually(lambda: streams(manager).open_count(alice_id) == 40, timeout=20)
    worst = 0.0
    for _ in range(10):
        t0 = time.monotonic()
        r = await bob.get("/users/me")
        worst = max(worst, time.monotonic() - t0)
        assert r.status_code == 200 and r.json()["name"] == "bob"
    # connections held by the waits would make bob wait for the pool (30 s) or for them
    assert worst < 2, f"another user's request took {worst:.2f} s"
    assert not any(t.done() for t in waits)
    assert (await alice.delete("/sessions/long")).status_code == 200
    answers = await asyncio.gather(*waits)
    assert [a.status_code for a in answers] == [200] * 40
    assert {a.json()["status"] for a in answers} == {"TERMINATED"}
    assert streams(manager).open_count(alice_id) == 0


async def test_wait_and_other_streams_over_the_limit_are_429(make_manager: MakeManager) -> None:
    manager = await make_manager(quota_streams=2)
    alice = await new_user(manager, "alice")
    bob = await new_user(manager, "bob")
    alice_id = (await user_row(manager, "alice")).id
    r = await alice.post("/sessions", json={"name": "s", "image": IMAGE})
    assert r.status_code == 201
    await manager.wait(r.json()["id"])

    def wait(c: httpx.AsyncClient, timeout: float = 30) -> asyncio.Task[httpx.Response]:
        params: dict[str, str | float] = {"until": "final", "timeout": timeout}
        return asyncio.create_task(c.get("/sessions/s/wait", params=params))

    first, second = wait(alice), wait(alice)
    await eventually(lambda: streams(manager).open_count(alice_id) == 2)
    refused = [
        await alice.get("/sessions/s/wait", params={"until": "final", "timeout": 30}),
        await alice.get("/sessions/s/logs", params={"follow": True}),
        await alice.get("/sessions/s/logs"),  # not followed: a stream too (finding N1)
        await alice.post("/sessions/s/exec", json={"command": ["true"]}),
    ]
    for r in refused:
        assert r.status_code == 429, r.text
        err = error_of(r)
        assert err["code"] == "too_many", err
        assert "limit is 2" in err["message"] and "streams" in err["message"], err
    # what is not a stream is not counted
    assert (await alice.get("/sessions/s")).status_code == 200
    # another user has slots of their own (bob has no session "s": 404, not 429)
    r = await bob.get("/sessions/s/wait", params={"timeout": 0.1})
    assert r.status_code == 404, r.text

    # a client that goes away frees its slot
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    await eventually(lambda: streams(manager).open_count(alice_id) == 1)
    r = await alice.post("/sessions/s/exec", json={"command": ["true"]})
    assert r.status_code == 200, r.text
    assert streams(manager).open_count(alice_id) == 1  # the exec's slot went with it
    # a wait that ends frees its slot
    await alice.delete("/sessions/s")
    assert (await second).json()["status"] == "TERMINATED"
    assert streams(manager).open_count(alice_id) == 0


async def test_admins_are_counted_and_a_users_own_limit_applies(manager: Harness) -> None:
    await running(manager, "s")
    admin = await user_row(manager, "admin")
    await set_stream_limit(manager, "admin", 1)
    hold = asyncio.create_task(
        manager.client.get("/sessions/s/wait", params={"until": "final", "timeout": 30})
    )
    await eventually(lambda: streams(manager).open_count(admin.id) == 1)
    r = await manager.client.get("/sessions/s/wait", params={"until": "final", "timeout": 30})
    assert r.status_code == 429 and "limit is 1" in error_of(r)["message"], r.text
    await set_stream_limit(manager, "admin", None)  # back to the server's default (32)
    r = await manager.client.get("/sessions/s/wait", params={"timeout": 0.1})
    assert r.status_code == 200, r.text
    hold.cancel()
    await asyncio.gather(hold, return_exceptions=True)
    await eventually(lambda: streams(manager).open_count(admin.id) == 0)


async def test_followed_logs_and_exec_hold_a_slot_until_they_end(make_manager: MakeManager) -> None:
    manager = await make_manager(quota_streams=1)
    await running(manager, "s")
    admin = await user_row(manager, "admin")
    manager.local.follow_gate = asyncio.Event()
    follow = asyncio.create_task(manager.client.get("/sessions/s/logs", params={"follow": True}))
    await eventually(lambda: manager.local.following == 1)
    assert streams(manager).open_count(admin.id) == 1
    r = await manager.client.post("/sessions/s/exec", json={"command": ["true"]})
    assert r.status_code == 429, r.text
    manager.local.follow_gate.set()  # the kernels' logs end
    r = await follow
    assert r.status_code == 200 and "started" in r.text
    assert streams(manager).open_count(admin.id) == 0

    manager.local.exec_gate = asyncio.Event()  # the command runs until the gate opens
    ex = asyncio.create_task(manager.client.post("/sessions/s/exec", json={"command": ["x"]}))
    await eventually(lambda: streams(manager).open_count(admin.id) == 1)
    r = await manager.client.get("/sessions/s/wait", params={"timeout": 0.1})
    assert r.status_code == 429, r.text
    manager.local.exec_gate.set()
    assert (await ex).status_code == 200
    assert streams(manager).open_count(admin.id) == 0
    # an exec that fails on the agent frees its slot too
    manager.local.failures["exec"] = E.AgentFailed("engine gone")
    r = await manager.client.post("/sessions/s/exec", json={"command": ["x"]})
    assert r.status_code == 200 and "engine gone" in r.text
    assert streams(manager).open_count(admin.id) == 0


async def test_quiet_followed_logs_answer_at_once_and_free_the_slot_when_the_client_leaves(
    manager: Harness,
) -> None:
    s = await running(manager, "quiet", cluster_size=2)
    for c in manager.local.containers.values():
        c.logs.clear()  # nothing to say
    manager.local.follow_gate = asyncio.Event()  # and it stays quiet
    admin = await user_row(manager, "admin")
    call = AsgiHttp(
        manager, "GET", f"/v1/sessions/{s['id']}/logs", "follow=true", key_of(manager.client)
    ).start()
    await eventually(lambda: call.started is not None, timeout=2)
    assert call.started is not None and call.started["status"] == 200
    await eventually(lambda: manager.local.following == 2)
    assert call.body() == b""  # headers only: no text was made up
    assert streams(manager).open_count(admin.id) == 1
    call.leave()
    assert call.task is not None
    await asyncio.wait_for(call.task, 5)
    assert streams(manager).open_count(admin.id) == 0
    assert manager.local.following == 0  # the agent's streams were closed


async def test_a_wait_whose_client_left_frees_its_slot(manager: Harness) -> None:
    await running(manager, "w")
    admin = await user_row(manager, "admin")
    call = AsgiHttp(
        manager, "GET", "/v1/sessions/w/wait", "until=final&timeout=300", key_of(manager.client)
    ).start()
    await eventually(lambda: streams(manager).open_count(admin.id) == 1)
    call.leave()
    assert call.task is not None
    await asyncio.wait_for(call.task, 5)  # not after 300 s
    assert streams(manager).open_count(admin.id) == 0


async def test_shell_counts_as_a_stream(make_manager: MakeManager) -> None:
    manager = await make_manager(quota_streams=1)
    await running(manager, "sh")
    admin = await user_row(manager, "admin")
    key = key_of(manager.client)
    ws = AsgiWebSocket(manager, "/v1/sessions/sh/shell", key=key)
    await eventually(lambda: streams(manager).open_count(admin.id) == 1)
    other = AsgiWebSocket(manager, "/v1/sessions/sh/shell", key=key)
    assert await other.close_code() == 4429
    assert other.texts()[0]["error"]["code"] == "too_many"
    ws.send_bytes(b"exit\n")
    assert await ws.close_code() == 1000
    assert {"exit_code": 0} in ws.texts()
    assert streams(manager).open_count(admin.id) == 0


# -- L5: API keys only in the Authorization header ---------------------------------------------


async def test_api_keys_only_in_the_authorization_header(manager: Harness) -> None:
    key = key_of(manager.client)
    await running(manager, "k")
    async with anon_client(manager) as anon:
        r = await anon.get("/sessions", params={"api_key": key})
        assert r.status_code == 401, r.text
        assert "Authorization header" in error_of(r)["message"]
        r = await anon.get("/sessions", headers={"X-Api-Key": key})
        assert r.status_code == 401, r.text
        r = await anon.get("/sessions", headers={"Authorization": f"bearer {key}"})
        assert r.status_code == 200, r.text  # the scheme is case-insensitive
    ws = AsgiWebSocket(manager, "/v1/sessions/k/shell", f"api_key={key}")
    assert await ws.close_code() == 4401
    assert ws.texts()[0]["error"]["code"] == "unauthorized"


# -- L9: per-agent credentials -----------------------------------------------------------------


async def test_registration_gives_a_credential_that_heartbeats_and_events_need(
    manager: Harness,
) -> None:
    c2 = await manager.register("h2")
    c3 = await manager.register("h3")
    cred2 = manager.credentials["h2"]
    assert cred2 and cred2 != manager.credentials["h3"]
    async with manager.app.state.db() as db:  # type: ignore[union-attr]
        row = await db.get(Agent, "h2")
        assert row is not None
        assert row.credential_hash == hashlib.sha256(cred2.encode()).hexdigest()
    assert (await c2.post("/agents/h2/heartbeat")).status_code == 204
    shared = manager.agent_client()
    ev = {"session_id": "x", "kernel_id": "y", "exit_code": 1}
    for c, path in [
        (shared, "/agents/h2/heartbeat"),  # the shared token does not speak for an agent
        (shared, "/agents/h2/events"),
        (c3, "/agents/h2/heartbeat"),  # nor does another agent's credential
        (c3, "/agents/h2/events"),
    ]:
        r = await c.post(path, json=ev)
        assert r.status_code == 401, (path, r.text)
        assert error_of(r)["code"] == "unauthorized"
    async with anon_client(manager) as anon:
        assert (await anon.post("/agents/h2/heartbeat")).status_code == 401
    assert (await c2.post("/agents/h2/events", json=ev)).status_code == 204
    await manager.settle()


async def test_a_live_agents_name_cannot_be_taken(make_manager: MakeManager) -> None:
    manager = await make_manager(agent_timeout=30.0)
    c2 = await manager.register("h2", group="g2")
    old = manager.credentials["h2"]
    body = {"name": "h2", "cpu": 64, "mem": 1024**4, "address": "http://evil.test:6011"}
    shared = manager.agent_client()
    for headers in ({}, {"X-Troupe-Agent-Credential": "trp_guess"}):
        r = await shared.post("/agents/register", json=body, headers=headers)
        assert r.status_code == 409, r.text
        assert "live agent" in error_of(r)["message"]
    assert manager.remotes["h2"].address == "http://h2.test:6011"  # not redirected
    r = await manager.client.get("/agents")
    assert {a["name"]: a["cpu"] for a in r.json()}["h2"] == 4
    # the agent itself may register again (e.g. after its restart): a new credential
    c2 = await manager.register("h2", group="g2")
    assert manager.credentials["h2"] != old
    assert (await c2.post("/agents/h2/heartbeat")).status_code == 204
    stale = manager.user_client(old)
    assert (await stale.post("/agents/h2/heartbeat")).status_code == 401
    await manager.settle()


async def test_a_lost_agents_name_or_one_without_credential_is_free(manager: Harness) -> None:
    c = await manager.register("h2")
    body = {"name": "h2", "cpu": 2, "mem": 1024**3, "address": "http://h2b.test:6011"}
    shared = manager.agent_client()
    async with heartbeats(c, "h2"):
        assert (await shared.post("/agents/register", json=body)).status_code == 409
    await eventually(lambda: "h2" in manager.app.state.registry.fleet.lost)  # type: ignore[union-attr]
    r = await shared.post("/agents/register", json=body)  # LOST: free to take
    assert r.status_code == 200, r.text
    assert manager.remotes["h2"].address == "http://h2b.test:6011"
    cred = r.json()["credential"]
    async with heartbeats(manager.user_client(cred), "h2"):
        # an agent registered before credentials existed has none: its name is free
        async with manager.app.state.db() as db:  # type: ignore[union-attr]
            row = await db.get(Agent, "h2")
            assert row is not None and row.status == "ALIVE"
            row.credential_hash = None
            await db.commit()
        r = await shared.post("/agents/register", json=body)
        assert r.status_code == 200, r.text
    await manager.settle()


async def test_what_an_agent_reports_is_validated(manager: Harness) -> None:
    body = {"name": "h9", "cpu": 1, "mem": 1024**3, "address": "http://h9.test:6011"}
    headers = {**manager.agent_client().headers, "Content-Type": "application/json"}
    async with anon_client(manager) as anon:
        for raw, field in [
            (json.dumps({**body, "mem": 10**23}), "mem"),
            (json.dumps({**body, "underlay_mtu": 2**70}), "underlay_mtu"),
            (json.dumps(body).replace('"cpu": 1', '"cpu": NaN'), "cpu"),
            (json.dumps({**body, "name": "a/b"}), "name"),
            (json.dumps({**body, "name": "x" * 65}), "name"),
            (json.dumps({**body, "address": "file:///etc"}), "address"),
            (json.dumps({**body, "group": "@"}).replace('"@"', '"\\ud800"'), "group"),
        ]:
            r = await anon.post("/agents/register", content=raw, headers=headers)
            assert r.status_code == 422, (raw, r.text)
            assert error_of(r)["field"] == field, (raw, r.text)
    assert manager.remotes == {}


# -- L10: removing agents ----------------------------------------------------------------------


async def test_remove_agent_only_when_lost(manager: Harness) -> None:
    c = await manager.register("h2")
    alice = await new_user(manager, "alice")
    r = await alice.delete("/agents/h2")
    assert r.status_code == 403
    r = await manager.client.delete("/agents/nobody")
    assert r.status_code == 404 and error_of(r)["code"] == "not_found"
    r = await manager.client.delete("/agents/local")
    assert r.status_code == 409 and "own agent" in error_of(r)["message"]
    async with heartbeats(c, "h2"):
        r = await manager.client.delete("/agents/h2")
        assert r.status_code == 409, r.text
        assert "stop it first" in error_of(r)["message"]
        r = await manager.agent_client().delete("/agents/h2")
        assert r.status_code == 401  # the agent token is no user's key

    await eventually(lambda: "h2" in manager.app.state.registry.fleet.lost)  # type: ignore[union-attr]
    r = await manager.client.delete("/agents/h2")
    assert r.status_code == 204, r.text
    r = await manager.client.get("/agents")
    assert [a["name"] for a in r.json()] == ["local"]
    assert manager.remotes["h2"].closed
    assert (await c.post("/agents/h2/heartbeat")).status_code == 404  # forgotten: register
    assert (await manager.client.delete("/agents/h2")).status_code == 404
    del manager.credentials["h2"]
    c = await manager.register("h2")
    assert (await c.post("/agents/h2/heartbeat")).status_code == 204
    await manager.settle()


async def test_sdk_and_cli_remove_agent(manager: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    from troupe.main import app as cli_app

    c = await manager.register("h2")
    bridge = Bridge(manager, asyncio.get_running_loop())
    sdk = bridge.sdk(key_of(manager.client))
    monkeypatch.setattr("troupe.client.sdk.Client", lambda *a, **k: bridge.sdk(sdk.api_key))

    def cli(*args: str) -> Any:
        return CliRunner().invoke(cli_app, ["agent", *args], env={"COLUMNS": "200"})

    def refused() -> E.TroupeError:
        with pytest.raises(E.Conflict) as info:
            sdk.remove_agent("h2")
        return info.value

    async with heartbeats(c, "h2"):
        e = await asyncio.to_thread(refused)
        assert e.status == 409 and "stop it first" in e.message
        r = await asyncio.to_thread(cli, "remove", "h2")
        assert r.exit_code == 1 and "stop it first" in r.output, r.output
    await eventually(lambda: "h2" in manager.app.state.registry.fleet.lost)  # type: ignore[union-attr]
    r = await asyncio.to_thread(cli, "remove", "h2")
    assert r.exit_code == 0 and "agent h2 removed" in r.output, r.output
    r = await asyncio.to_thread(cli, "remove", "h2")
    assert r.exit_code == 1 and "not found" in r.output, r.output
    await bridge.client.aclose()


# -- L12: refused before the stream starts -----------------------------------------------------


async def test_exec_argument_with_nul_is_422(manager: Harness) -> None:
    await running(manager, "n")
    r = await manager.client.post("/sessions/n/exec", json={"command": ["echo", "a\u0000b"]})
    assert r.status_code == 422, r.text
    err = error_of(r)
    assert err["field"] == "command" and "NUL" in err["message"]
    assert "exec" not in manager.local.calls


async def test_streams_of_a_kernel_on_a_lost_agent_are_502_before_they_start(
    make_manager: MakeManager,
) -> None:
    manager = await make_manager(agent_timeout=30.0)
    c = await manager.register("h2", group="g2")
    assert (await c.post("/agents/h2/heartbeat")).status_code == 204
    await running(manager, "far", group="g2")
    assert manager.app is not None
    fleet = manager.app.state.registry.fleet
    fleet.lost.add("h2")  # as between its loss and the failure of its sessions
    admin = await user_row(manager, "admin")
    for r in [
        await manager.client.post("/sessions/far/exec", json={"command": ["true"]}),
        await manager.client.get("/sessions/far/logs", params={"follow": True}),
        await manager.client.get("/sessions/far/logs", params={"container": "main1"}),
    ]:
        assert r.status_code == 502, r.text
        err = error_of(r)
        assert err["code"] == "agent_failed" and err["kernel"] == "main1", err
        assert "h2" in err["message"] and "LOST" in err["message"]
    ws = AsgiWebSocket(manager, "/v1/sessions/far/shell", key=key_of(manager.client))
    assert await ws.close_code() == 4502
    assert "exec" not in manager.remotes["h2"].calls
    assert streams(manager).open_count(admin.id) == 0
    fleet.lost.discard("h2")
    r = await manager.client.post("/sessions/far/exec", json={"command": ["true"]})
    assert r.status_code == 200, r.text


async def test_logs_of_a_session_failed_by_a_lost_agent(make_manager: MakeManager) -> None:
    manager = await make_manager(create_timeout=30.0)
    c = await manager.register("h2", cpu=3)
    async with heartbeats(c, "h2"):  # 3 cores on each agent: one kernel on each
        s = await running(
            manager, "span", cluster_size=2, cluster_mode="multi-node", resources={"cpu": 3}
        )
    on_h2 = next(k["hostname"] for k in s["kernels"] if k["agent"] == "h2")
    on_local = next(k["hostname"] for k in s["kernels"] if k["agent"] == "local")
    s = await manager.wait("span", until="final", timeout=5)
    assert s["status_info"]["reason"] == "agent lost"
    r = await manager.client.get("/sessions/span/logs")
    assert r.status_code == 502 and error_of(r)["kernel"] == on_h2, r.text
    assert "container=" in error_of(r)["message"]
    r = await manager.client.get("/sessions/span/logs", params={"container": on_local})
    assert r.status_code == 200 and f"{on_local} started" in r.text, r.text


# -- L2, L14: validation of a create request ---------------------------------------------------


async def test_resources_below_the_minimum_are_422(manager: Harness) -> None:
    for resources, field in [
        ({"cpu": 0.005}, "resources.cpu"),
        ({"mem": "8m"}, "resources.mem"),
        ({"mem": 16 * 1024**2 - 1}, "resources.mem"),
    ]:
        r = await manager.client.post(
            "/sessions", json={"name": "tiny", "image": IMAGE, "resources": resources}
        )
        assert r.status_code == 422, r.text
        err = error_of(r)
        assert (err["code"], err["field"]) == ("invalid", field), err
        assert "at least" in err["message"]
    await manager.create("smallest", resources={"cpu": 0.01, "mem": "16m"})


async def test_image_must_be_a_docker_reference(manager: Harness) -> None:
    for image in ["../containers/abc", "a b", "UPPER/x", "/x", "x/../y", "a" * 256]:
        r = await manager.client.post("/sessions", json={"name": "i", "image": image})
        assert r.status_code == 422, (image, r.text)
        err = error_of(r)
        assert err["field"] == "image", err
    assert "has_image" not in manager.local.calls  # refused before any agent is asked
    digest = "x@sha256:" + "0" * 64
    good = ["troupe/base:0.1.0", "localhost:5000/x/y:1", digest]
    manager.local.image_names.update(good)
    for n, image in enumerate(good):
        await manager.create(f"ok{n}", image=image)
