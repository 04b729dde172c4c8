"""Agents of other hosts: registration, heartbeats, loss and return, and the agent API's
hardening as the manager shows it."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from tests.inprocess.conftest import IMAGE, Harness, MakeManager, eventually
from tests.inprocess.helpers import anon_client, error_of, get_when, heartbeats, running


async def agent_status(h: Harness, name: str) -> str:
    r = await h.client.get("/agents")
    assert r.status_code == 200, r.text
    return str({a["name"]: a["status"] for a in r.json()}[name])


async def test_register_and_place_only_in_the_agents_group(manager: Harness) -> None:
    c = await manager.register("h2", group="g2")
    async with heartbeats(c, "h2"):
        r = await manager.client.get("/agents")
        agents = {a["name"]: a for a in r.json()}
        assert agents["h2"]["group"] == "g2" and agents["h2"]["status"] == "ALIVE"
        s = await running(manager, "g", group="g2", cluster_size=2)
        assert {k["agent"] for k in s["kernels"]} == {"h2"}
        h2 = manager.remotes["h2"]
        assert h2.session_ids() == {s["id"]}
        assert manager.local.session_ids() == set()
        await manager.client.delete("/sessions/g")
        assert h2.session_ids() == set()


async def test_remote_agent_reports_an_exit_over_http(manager: Harness) -> None:
    c = await manager.register("h2", group="g2")
    async with heartbeats(c, "h2"):
        s = await running(manager, "far", group="g2", cluster_size=3)
        sub2 = next(k for k in s["kernels"] if k["hostname"] == "sub2")
        ev = {
            "session_id": s["id"],
            "kernel_id": sub2["id"],
            "exit_code": 127,
            "error": "exec: no such file",
            "last_logs": ["not found"],
        }
        r = await c.post("/agents/h2/events", json={"session_id": s["id"]})
        assert r.status_code == 422  # a malformed report is refused
        r = await c.post("/agents/h2/events", json=ev)
        assert r.status_code == 204
        s = await manager.wait("far", until="final")
    assert s["status"] == "ERROR", s
    info = s["status_info"]
    assert (info["reason"], info["kernel"], info["exit_code"]) == ("kernel exited", "sub2", 127)
    assert info["message"] == "exec: no such file" and info["last_logs"] == ["not found"]
    assert manager.remotes["h2"].session_ids() == set()


async def test_lost_agent_fails_its_sessions_and_is_swept_when_back(manager: Harness) -> None:
    c = await manager.register("h2", cpu=3)
    h2 = manager.remotes["h2"]
    async with heartbeats(c, "h2"):
        s = await running(
            manager, "span", cluster_size=2, cluster_mode="multi-node", resources={"cpu": 3}
        )
        # h2 is full now: this one goes to local
        local_only = await running(manager, "stay", resources={"cpu": 0.5})
        assert local_only["kernels"][0]["agent"] == "local"
    by_host = {k["hostname"]: k["agent"] for k in s["kernels"]}
    assert sorted(by_host.values()) == ["h2", "local"], by_host
    assert manager.remotes["h2"].networks  # an overlay, created through h2 (a Swarm manager)
    assert next(iter(h2.networks.values())).driver == "overlay"
    lost_kernel = next(h for h, a in by_host.items() if a == "h2")

    # no more heartbeats: within agent_timeout (1 s) plus a scheduler pass it is LOST
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    s = await manager.wait("span", until="final", timeout=5)
    assert loop.time() - t0 < 4
    assert s["status"] == "ERROR", s
    info = s["status_info"]
    assert info["reason"] == "agent lost"
    assert info["agent"] == "h2" and info["kernel"] == lost_kernel
    assert "heartbeat" in info["message"]
    assert await agent_status(manager, "h2") == "LOST"
    # the session's kernel on local is removed; h2 could not be asked: its part is left over
    assert s["id"] not in manager.local.session_ids()
    assert s["id"] in h2.session_ids()
    # a session only on local is not concerned
    assert (await manager.get(local_only["id"]))["status"] == "RUNNING"

    r = await c.post("/agents/h2/heartbeat")
    assert r.status_code == 204
    assert await agent_status(manager, "h2") == "ALIVE"
    await eventually(lambda: h2.session_ids() == set())
    assert manager.local.session_ids() == {local_only["id"]}


async def test_agent_lost_while_a_session_is_prepared_on_it(manager: Harness) -> None:
    c = await manager.register("h2", group="g2")
    h2 = manager.remotes["h2"]
    h2.ready_gate.clear()
    async with heartbeats(c, "h2"):
        s = await manager.create("stuck", group="g2", cluster_size=2)
        await get_when(manager, "stuck", lambda x: x["status"] == "PREPARING")
        await eventually(lambda: len(h2.containers) == 2)
    s = await manager.wait("stuck", until="final", timeout=5)
    assert s["status"] == "ERROR", s
    assert s["status_info"]["reason"] == "agent lost"
    assert s["status_info"]["kernel"] == "main1"
    assert "RUNNING" not in s["timeline"]
    assert h2.session_ids() == {s["id"]}  # could not be asked
    r = await c.post("/agents/h2/heartbeat")
    assert r.status_code == 204
    await eventually(lambda: h2.session_ids() == set())


async def test_folders_across_agents_without_shared_storage_fail(manager: Harness) -> None:
    r = await manager.client.post("/folders", json={"name": "data"})
    assert r.status_code == 201
    c = await manager.register("h2", cpu=3, data_marker="elsewhere")
    async with heartbeats(c, "h2"):
        await manager.create(
            "split",
            cluster_size=2,
            cluster_mode="multi-node",
            resources={"cpu": 3},
            mounts=[{"folder": "data"}],
        )
        s = await manager.wait("split")
    assert s["status"] == "ERROR", s
    assert s["status_info"]["reason"] == "failed while creating the network"
    message = s["status_info"]["message"]
    assert "shared storage" in message and "h2" in message and "local" in message
    assert manager.local.session_ids() == set()
    assert manager.remotes["h2"].session_ids() == set()


async def test_agent_lost_without_sessions_comes_back_usable(manager: Harness) -> None:
    c = await manager.register("h2", group="g2")
    # h2 sends no heartbeat: it becomes LOST
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while await agent_status(manager, "h2") != "LOST":
        assert loop.time() < deadline, "h2 not LOST in time"
        await asyncio.sleep(0.05)
    r = await manager.client.get("/agents")
    h2 = next(a for a in r.json() if a["name"] == "h2")
    assert h2["heartbeat_age"] is not None and h2["heartbeat_age"] > 1.0
    async with heartbeats(c, "h2"):
        assert await agent_status(manager, "h2") == "ALIVE"
        s = await running(manager, "later", group="g2")
        assert {k["agent"] for k in s["kernels"]} == {"h2"}


async def test_heartbeat_of_an_unknown_agent_is_404(manager: Harness) -> None:
    c = manager.agent_client()
    r = await c.post("/agents/nobody/heartbeat")
    assert r.status_code == 404
    assert error_of(r)["code"] == "not_found"
    r = await c.post("/agents/local/heartbeat")  # the manager's own agent needs none
    assert r.status_code == 404


async def test_register_with_a_wrong_token_is_401(manager: Harness) -> None:
    body = {"name": "h9", "cpu": 1, "mem": 1024**3, "address": "http://h9.test:6011"}
    r = await manager.agent_client("wrong").post("/agents/register", json=body)
    assert r.status_code == 401
    assert error_of(r)["code"] == "unauthorized"
    async with anon_client(manager) as anon:
        r = await anon.post("/agents/register", json=body)
        assert r.status_code == 401
        # a user's API key is not an agent token
        r = await anon.post("/agents/register", json=body, headers=dict(manager.client.headers))
        assert r.status_code == 401
    assert "h9" not in manager.remotes


async def test_non_ascii_tokens_are_401_not_500(manager: Harness) -> None:
    body = {"name": "h9", "cpu": 1, "mem": 1024**3, "address": "http://h9.test:6011"}
    async with anon_client(manager) as anon:
        bad = {"Authorization": "Bearer ünï".encode()}
        r = await anon.post("/agents/register", json=body, headers=bad)  # type: ignore[arg-type]
        assert r.status_code == 401, r.text
        assert error_of(r)["code"] == "unauthorized"
        r = await anon.post("/agents/h9/heartbeat", headers=bad)  # type: ignore[arg-type]
        assert r.status_code == 401, r.text
        # the users' side too
        r = await anon.get("/sessions", headers=bad)  # type: ignore[arg-type]
        assert r.status_code == 401, r.text
        assert error_of(r)["code"] == "unauthorized"


async def test_registering_as_local_is_409(manager: Harness) -> None:
    c = manager.agent_client()
    body = {"name": "local", "cpu": 64, "mem": 1024**4, "address": "http://evil.test:6011"}
    r = await c.post("/agents/register", json=body)
    assert r.status_code == 409
    assert error_of(r)["code"] == "conflict"
    assert "local" not in manager.remotes
    r = await manager.client.get("/agents")
    (local,) = r.json()
    assert local["cpu"] == 4


async def test_exit_reported_by_an_agent_that_does_not_hold_the_kernel_is_ignored(
    manager: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    s = await running(manager, "mine", cluster_size=2, resources={"cpu": 1})
    c = await manager.register("h2")
    assert {k["agent"] for k in s["kernels"]} == {"local"}
    kernel = s["kernels"][1]
    ev: dict[str, Any] = {"session_id": s["id"], "kernel_id": kernel["id"], "exit_code": 1}
    with caplog.at_level(logging.WARNING, logger="troupe.manager.life.exits"):
        r = await c.post("/agents/h2/events", json=ev)
        assert r.status_code == 204
        await eventually(lambda: "does not hold" in caplog.text)
    s = await manager.get("mine")
    assert s["status"] == "RUNNING", s
    assert all(k["status"] == "RUNNING" and k["exit_code"] is None for k in s["kernels"])
    assert manager.local.session_ids() == {s["id"]}
    # events of an unknown agent are refused
    r = await c.post("/agents/nobody/events", json=ev)
    assert r.status_code == 404


async def test_exit_from_a_foreign_agent_does_not_fail_a_session_being_prepared(
    manager: Harness,
) -> None:
    c = await manager.register("h2", cpu=1)  # too small for the session: it goes to local
    manager.local.ready_gate.clear()
    s = await manager.create("prep", cluster_size=2, resources={"cpu": 1})
    s = await get_when(
        manager, "prep", lambda x: all(k["status"] == "RUNNING" for k in x["kernels"])
    )
    assert s["status"] == "PREPARING"
    assert {k["agent"] for k in s["kernels"]} == {"local"}
    # h2 does not hold sub1, and no kernel of the session has the second id
    for kernel_id in (s["kernels"][1]["id"], "no-such-kernel"):
        ev = {"session_id": s["id"], "kernel_id": kernel_id, "exit_code": 1}
        r = await c.post("/agents/h2/events", json=ev)
        assert r.status_code == 204
    await asyncio.sleep(0.2)  # the reports reach the preparer's inbox
    manager.local.ready_gate.set()
    s = await manager.wait("prep")
    assert s["status"] == "RUNNING", s["status_info"]
    assert [k["exit_code"] for k in s["kernels"]] == [None, None]
    assert manager.local.session_ids() == {s["id"]}


async def test_images_answer_while_an_agent_is_down(manager: Harness) -> None:
    c = await manager.register("h2")
    async with heartbeats(c, "h2"):
        manager.remotes["h2"].image_names.add("only/on-h2:1")
        r = await manager.client.get("/images")
        assert r.status_code == 200
        assert {i["name"] for i in r.json()} == {IMAGE, "only/on-h2:1"}
        manager.remotes["h2"].down = True
        r = await manager.client.get("/images")
        assert r.status_code == 200, r.text
        assert {i["name"] for i in r.json()} == {IMAGE}
        r = await manager.client.get("/agents")
        assert r.status_code == 200


async def test_the_managers_own_agent_has_no_heartbeat_age(manager: Harness) -> None:
    """It sends none (in the manager's process): an age would only count from its start."""
    await manager.register("h2")
    ages = {a["name"]: a["heartbeat_age"] for a in (await manager.client.get("/agents")).json()}
    assert ages["local"] is None and ages["h2"] is not None, ages


async def test_a_pause_of_the_manager_is_no_silence_of_its_agents(manager: Harness) -> None:
    """The manager's event loop stands still longer than the agent time-out (heavy load, a
    suspended machine): the check after it finds no agent LOST for the heartbeats it could not
    take meanwhile (the time-out here is 1 s; its heartbeat came just before the pause)."""
    assert manager.app is not None
    fleet = manager.app.state.registry.fleet
    c = await manager.register("h2")
    await fleet.check()  # (a check before the pause: the scheduler loop's first may be later)
    r = await c.post("/agents/h2/heartbeat")
    assert r.status_code == 204, r.text
    time.sleep(1.6)  # noqa: ASYNC251 (blocking on purpose: the whole manager pauses)
    await fleet.check()
    assert "h2" not in fleet.lost
    assert await agent_status(manager, "h2") == "ALIVE"


async def test_a_hung_call_to_a_silent_agent_does_not_delay_its_loss(
    make_manager: MakeManager,
) -> None:
    """The scheduler loop's orphan sweep waits on a call to an agent that went silent (that
    call's time-out is far longer than the agent's): the event loop is not stalled meanwhile,
    so the wait is no pause of the manager, and the agent is LOST on time."""
    h = await make_manager(sweep_interval=0.05)
    assert h.app is not None
    fleet = h.app.state.registry.fleet
    await h.register("h2")
    h.remotes["h2"].delays["list_kernels"] = 6.0  # every sweep hangs on it
    t0 = time.monotonic()
    await eventually(lambda: "h2" in fleet.lost, timeout=8.0)
    # its time-out (1 s), the longest gap between two checks and a margin
    assert time.monotonic() - t0 < 1.0 + fleet.check_within + 1.0


async def test_a_heartbeat_right_after_a_pause_gets_no_credit_for_it(manager: Harness) -> None:
    """The manager stalls; the first thing it takes after is the agent's heartbeat, its last:
    the agent is LOST its time-out after that heartbeat, the stall before it forgives nothing."""
    assert manager.app is not None
    fleet = manager.app.state.registry.fleet
    c = await manager.register("h2")
    await asyncio.sleep(0.3)  # the ticker runs
    time.sleep(1.6)  # noqa: ASYNC251 (blocking on purpose: the whole manager pauses)
    r = await c.post("/agents/h2/heartbeat")
    assert r.status_code == 204, r.text
    t0 = time.monotonic()
    await eventually(lambda: "h2" in fleet.lost, timeout=5.0)
    assert time.monotonic() - t0 < 1.0 + fleet.check_within + 0.9
