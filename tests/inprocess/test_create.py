"""The happy paths: create to RUNNING, waiting for resources, exec, logs, /wait."""

from __future__ import annotations

import asyncio
import ipaddress

from tests.inprocess.conftest import Harness
from tests.inprocess.helpers import error_of, get_when, running
from troupe.api.exec import ExecExit, ExecOutput, decode


async def test_create_reaches_running_with_everything_recorded(manager: Harness) -> None:
    s = await manager.create("a", cluster_size=3)
    assert s["status"] == "PENDING"
    assert list(s["timeline"]) == ["PENDING"]
    assert all(k["status"] == "PENDING" and not k["container_id"] for k in s["kernels"])

    s = await manager.wait("a")
    assert s["status"] == "RUNNING", s
    # the session went through every step, in order, and says when
    stamps = s["timeline"]
    assert list(stamps) == ["PENDING", "SCHEDULED", "PREPARING", "network", "RUNNING"]
    assert sorted(stamps.values()) == list(stamps.values())
    # and its start-up phases, in seconds after it was created (the slowest kernel's)
    phases = s["phases"]
    assert list(phases) == ["scheduled", "network", "created", "started", "entrypoint", "ready"]
    assert sorted(phases.values()) == list(phases.values()) and phases["scheduled"] >= 0
    assert s["started_at"] is not None and s["terminated_at"] is None
    assert s["status_info"] == {}
    # its kernels: placed, created, addressed
    assert [k["hostname"] for k in s["kernels"]] == ["main1", "sub1", "sub2"]
    for k in s["kernels"]:
        assert k["status"] == "RUNNING"
        stamped = ["PENDING", "created", "started", "RUNNING", "entrypoint", "ready"]
        assert list(k["timeline"]) == stamped
        assert list(k["phases"]) == ["created", "started", "entrypoint", "ready"]
        assert k["agent"] == "local"
        assert k["container_id"] in manager.local.containers
        assert k["ip"] == manager.local.containers[k["container_id"]].ip
    # its network: named, with a subnet of the pool, held by the agent
    assert s["network"] and s["subnet"]
    assert ipaddress.IPv4Network(s["subnet"]).subnet_of(ipaddress.IPv4Network("10.99.0.0/16"))
    net = manager.local.networks[s["network"]]
    assert net.session_id == s["id"] and net.subnet == s["subnet"] and net.driver == "bridge"
    # every kernel joins that network
    specs = [manager.local.container(s["id"], h).spec for h in ("main1", "sub1", "sub2")]
    assert {sp.network for sp in specs} == {s["network"]}
    assert manager.local.session_ids() == {s["id"]}

    r = await manager.client.delete("/sessions/a")
    assert r.status_code == 200
    done = r.json()
    assert done["status"] == "TERMINATED"
    assert done["status_info"]["reason"] == "destroyed by user"
    assert all(k["status"] == "TERMINATED" for k in done["kernels"])
    assert {"TERMINATING", "TERMINATED"} <= set(done["timeline"])
    assert done["terminated_at"] is not None
    assert manager.local.session_ids() == set()


async def test_two_sessions_get_different_subnets(manager: Harness) -> None:
    a = await running(manager, "a")
    b = await running(manager, "b")
    assert a["subnet"] != b["subnet"]
    assert a["network"] != b["network"]
    assert set(manager.local.networks) == {a["network"], b["network"]}


async def test_name_is_free_again_once_the_session_is_over(manager: Harness) -> None:
    first = await running(manager, "again")
    r = await manager.client.post("/sessions", json={"name": "again", "image": "x"})
    assert r.status_code == 409 and error_of(r)["field"] == "name"
    await manager.client.delete("/sessions/again")
    second = await running(manager, "again")
    assert second["id"] != first["id"]
    # the name means the active session; the finished one stays reachable by its id
    assert (await manager.get("again"))["id"] == second["id"]
    assert (await manager.get(first["id"]))["status"] == "TERMINATED"
    await manager.client.delete("/sessions/again")
    assert (await manager.get("again"))["id"] == second["id"]  # the newest finished one
    r = await manager.client.get("/sessions", params={"all": True})
    assert [s["id"] for s in r.json()] == [first["id"], second["id"]]
    r = await manager.client.get("/sessions")
    assert r.json() == []


async def test_pending_until_resources_are_free(manager: Harness) -> None:
    big = await running(manager, "big", cluster_size=4, resources={"cpu": 1})
    assert {k["agent"] for k in big["kernels"]} == {"local"}

    await manager.create("small", resources={"cpu": 1})

    s = await get_when(manager, "small", lambda s: "pending" in s["status_info"])
    assert s["status"] == "PENDING", s
    report = s["status_info"]["pending"]
    assert list(report) == ["main1"]
    line = " ".join(report["main1"])
    assert "local" in line and "cpu" in line, report

    await manager.client.delete("/sessions/big")
    s = await manager.wait("small")
    assert s["status"] == "RUNNING", s
    assert "pending" not in s["status_info"]


async def test_agents_list_counts_use(manager: Harness) -> None:
    await running(manager, "a", cluster_size=2, resources={"cpu": 1.5})
    r = await manager.client.get("/agents")
    assert r.status_code == 200
    (local,) = r.json()
    assert local["name"] == "local" and local["status"] == "ALIVE"
    assert local["kernels"] == 2
    assert local["cpu_free"] == 1.0


async def test_exec_streams_ndjson_frames(manager: Harness) -> None:
    await running(manager, "e", cluster_size=2)
    r = await manager.client.post("/sessions/e/exec", json={"command": ["echo", "hello"]})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/x-ndjson")
    items = [i for i in map(decode, r.content.splitlines()) if i is not None]
    assert items == [ExecOutput(b"hello\n"), ExecExit(0)]

    manager.local.exec_output, manager.local.exec_code = b"\x00\xffbinary", 7
    r = await manager.client.post(
        "/sessions/e/exec", json={"command": ["true"], "kernel": "sub1", "user": "root"}
    )
    items = [i for i in map(decode, r.content.splitlines()) if i is not None]
    assert items == [ExecOutput(b"\x00\xffbinary"), ExecExit(7)]


async def test_exec_in_a_missing_kernel_is_invalid(manager: Harness) -> None:
    await running(manager, "e")
    r = await manager.client.post("/sessions/e/exec", json={"command": ["x"], "kernel": "sub5"})
    assert r.status_code == 422
    assert error_of(r)["field"] == "kernel"


async def test_logs_while_running_and_after_destroy(manager: Harness) -> None:
    await running(manager, "l", cluster_size=2)
    r = await manager.client.get("/sessions/l/logs")
    assert r.status_code == 200, r.text
    lines = r.text.splitlines()
    assert sorted(lines) == ["[main1] main1 started", "[sub1] sub1 started"]

    r = await manager.client.get("/sessions/l/logs", params={"container": "sub1"})
    assert r.text == "sub1 started\n"

    r = await manager.client.delete("/sessions/l")
    assert r.json()["status"] == "TERMINATED"
    assert manager.local.containers == {}
    r = await manager.client.get("/sessions/l/logs")
    assert r.status_code == 200, r.text
    assert sorted(r.text.splitlines()) == ["[main1] main1 started", "[sub1] sub1 started"]

    r = await manager.client.get("/sessions/l/logs", params={"container": "sub9"})
    assert r.status_code == 422
    assert error_of(r)["field"] == "container"


async def test_wait_until_change_answers_at_the_change(manager: Harness) -> None:
    manager.local.ready_gate.clear()
    await manager.create("w")
    s = await manager.wait_status("w", "PREPARING")

    waiter = asyncio.create_task(manager.wait("w", until="change", timeout=10))
    await asyncio.sleep(0.1)
    assert not waiter.done()  # nothing changed yet
    manager.local.ready_gate.set()
    s = await asyncio.wait_for(waiter, 5)
    assert s["status"] == "RUNNING"

    # since= names the status seen last: a change already happened, so it answers at once
    r = await manager.client.get(
        "/sessions/w/wait", params={"until": "change", "since": "PREPARING", "timeout": 10}
    )
    assert r.json()["status"] == "RUNNING"


async def test_wait_with_timeout_returns_the_current_state(manager: Harness) -> None:
    manager.local.ready_gate.clear()
    await manager.create("w")
    await manager.wait_status("w", "PREPARING")
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    s = await manager.wait("w", until="change", timeout=0.3)
    assert 0.25 <= loop.time() - t0 < 3
    assert s["status"] == "PREPARING"
    s = await manager.wait("w", until="running", timeout=0.2)
    assert s["status"] == "PREPARING"
    manager.local.ready_gate.set()
    s = await manager.wait("w", until="running")
    assert s["status"] == "RUNNING"


async def test_wait_until_final(manager: Harness) -> None:
    await running(manager, "f")
    waiter = asyncio.create_task(manager.wait("f", until="final", timeout=10))
    await asyncio.sleep(0.1)
    assert not waiter.done()
    await manager.client.delete("/sessions/f")
    s = await asyncio.wait_for(waiter, 5)
    assert s["status"] == "TERMINATED"
