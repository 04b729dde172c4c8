"""Sessions that fail while created or while running, and destroys at awkward moments: each
ends in its final status with nothing left on the agents."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from tests.inprocess.conftest import Harness, eventually
from tests.inprocess.helpers import get_when, preparing, running
from troupe.api.errors import AgentFailed


def nothing_left(h: Harness) -> bool:
    return h.local.containers == {} and h.local.networks == {}


async def test_rollback_when_one_kernel_fails_to_start(manager: Harness) -> None:
    manager.local.failures["create_kernel:sub1"] = AgentFailed("boom", kernel="sub1")
    await manager.create("r", cluster_size=3)
    s = await manager.wait("r")
    assert s["status"] == "ERROR", s
    info = s["status_info"]
    assert info["reason"] == "failed while creating kernels"
    assert info["kernel"] == "sub1"
    assert "boom" in info["message"]
    assert "RUNNING" not in s["timeline"] and s["started_at"] is None
    assert all(k["status"] == "TERMINATED" for k in s["kernels"])
    # main1 and sub2 had been created: they are removed, and so is the network
    assert "create_kernel:main1" in manager.local.calls
    assert nothing_left(manager)
    assert "remove_kernels" in manager.local.calls


async def test_network_creation_failure(manager: Harness) -> None:
    manager.local.failures["create_network"] = AgentFailed("no more bridges")
    await manager.create("n", cluster_size=2)
    s = await manager.wait("n")
    assert s["status"] == "ERROR", s
    assert s["status_info"]["reason"] == "failed while creating the network"
    assert "no more bridges" in s["status_info"]["message"]
    assert "create_kernels" not in manager.local.calls
    assert nothing_left(manager)
    # the subnet it had claimed is free again: the next session gets it
    del manager.local.failures["create_network"]
    ok = await running(manager, "ok")
    assert ok["subnet"] == s["subnet"]


async def test_readiness_time_out(make_manager: Callable[..., Awaitable[Harness]]) -> None:
    h = await make_manager(create_timeout=0.5)
    h.local.ready_gate.clear()
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await h.create("slow", cluster_size=2)
    s = await h.wait("slow", timeout=10)
    assert loop.time() - t0 < 4
    assert s["status"] == "ERROR", s
    reason = s["status_info"]["reason"]
    assert "timed out" in reason or "failed while waiting" in reason, reason
    assert "waiting until every kernel reaches every other" in reason
    assert nothing_left(h)

    # the same time-out while kernels are still being created
    h.local.ready_gate.set()
    h.local.delays["create_kernel:sub1"] = 3
    t0 = loop.time()
    await h.create("slower", cluster_size=2)
    s = await h.wait("slower", timeout=10)
    # the create under way is let finish (preparing.settled), so its kernels are removed too
    assert loop.time() - t0 < 6
    assert s["status"] == "ERROR", s
    assert s["status_info"]["reason"] == "timed out after 0.5 s while creating kernels"
    assert nothing_left(h)  # main1 had been created: removed


async def test_kernel_exit_while_running_fails_the_session(manager: Harness) -> None:
    s = await running(manager, "oom", cluster_size=3)
    await manager.local.exit_kernel(s["id"], "sub1", 137, oom=True)
    s = await manager.wait("oom", until="final")
    assert s["status"] == "ERROR", s
    info = s["status_info"]
    assert info["reason"] == "kernel ran out of memory"
    assert info["kernel"] == "sub1"
    assert info["exit_code"] == 137 and info["oom_killed"] is True
    assert info["last_logs"] == ["sub1 says goodbye"]
    kernels = {k["hostname"]: k for k in s["kernels"]}
    assert kernels["sub1"]["exit_code"] == 137 and kernels["sub1"]["oom_killed"]
    assert "EXITED" in kernels["sub1"]["timeline"]
    assert kernels["main1"]["exit_code"] is None
    assert all(k["status"] == "TERMINATED" for k in s["kernels"])
    assert nothing_left(manager)


async def test_plain_exit_while_running(manager: Harness) -> None:
    s = await running(manager, "x", cluster_size=2)
    await manager.local.exit_kernel(s["id"], "main1", 2)
    s = await manager.wait("x", until="final")
    assert s["status"] == "ERROR"
    assert s["status_info"]["reason"] == "kernel exited"
    assert s["status_info"]["kernel"] == "main1"
    assert s["status_info"]["exit_code"] == 2
    assert nothing_left(manager)


async def test_exit_while_preparing_fails_at_once(manager: Harness) -> None:
    s = await preparing(manager, "p", cluster_size=3)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await manager.local.exit_kernel(s["id"], "sub1", 1)
    s = await manager.wait("p", until="final")
    assert loop.time() - t0 < 2.0  # well before the 5 s create time-out
    assert s["status"] == "ERROR", s
    info = s["status_info"]
    assert info["reason"] == "kernel exited while the session was being prepared"
    assert info["kernel"] == "sub1" and info["exit_code"] == 1
    assert "RUNNING" not in s["timeline"]
    kernels = {k["hostname"]: k for k in s["kernels"]}
    assert kernels["sub1"]["exit_code"] == 1
    assert nothing_left(manager)


async def test_agent_error_wins_over_an_exit_reported_meanwhile(manager: Harness) -> None:
    local = manager.local
    local.delays["create_kernel:sub1"] = 0.3
    local.failures["create_kernel:sub1"] = AgentFailed("image pull failed", kernel="sub1")
    s = await manager.create("race", cluster_size=2)
    await get_when(manager, "race", lambda x: x["status"] == "PREPARING")
    await eventually(lambda: _has(local, s["id"], "main1"))
    await local.exit_kernel(s["id"], "main1", 5)  # while sub1 is still being created
    s = await manager.wait("race", until="final")
    assert s["status"] == "ERROR", s
    info = s["status_info"]
    assert info["reason"] == "failed while creating kernels"
    assert info["kernel"] == "sub1"
    assert "image pull failed" in info["message"]
    kernels = {k["hostname"]: k for k in s["kernels"]}
    assert kernels["main1"]["exit_code"] == 5  # the exit is still recorded
    assert nothing_left(manager)


async def test_batch_session_ends_with_main1s_exit_code(manager: Harness) -> None:
    s = await running(manager, "job", type="batch", startup_command="exit 3", cluster_size=2)
    spec = manager.local.container(s["id"], "main1").spec
    assert spec.command == ["/bin/sh", "-c", "exit 3"]
    assert manager.local.container(s["id"], "sub1").spec.command == []
    assert "signal_go" in manager.local.calls
    await manager.local.exit_kernel(s["id"], "main1", 3)
    s = await manager.wait("job", until="final")
    assert s["status"] == "TERMINATED", s
    assert s["exit_code"] == 3
    assert s["status_info"]["exit_code"] == 3
    assert {k["hostname"]: k["exit_code"] for k in s["kernels"]} == {"main1": 3, "sub1": None}
    assert nothing_left(manager)


async def test_batch_session_fails_when_a_sub_kernel_exits(manager: Harness) -> None:
    s = await running(manager, "job", type="batch", startup_command="sleep 9", cluster_size=3)
    await manager.local.exit_kernel(s["id"], "sub2", 0)
    s = await manager.wait("job", until="final")
    assert s["status"] == "ERROR", s
    assert s["status_info"]["reason"] == "kernel exited"
    assert s["status_info"]["kernel"] == "sub2"
    assert s["exit_code"] is None
    assert nothing_left(manager)


async def test_batch_exit_reported_while_the_go_signal_is_sent(manager: Harness) -> None:
    # main1 may finish before the preparer is done with "go": the exit still ends the batch
    manager.local.delays["signal_go"] = 0.3
    s = await manager.create("quick", type="batch", startup_command="true", cluster_size=2)
    await eventually(lambda: "signal_go" in manager.local.calls)
    await manager.local.exit_kernel(s["id"], "main1", 0)
    s = await manager.wait("quick", until="final")
    assert s["status"] == "TERMINATED", s
    assert s["exit_code"] == 0
    assert nothing_left(manager)


async def test_destroy_during_a_failures_teardown_keeps_the_failure(manager: Harness) -> None:
    s = await running(manager, "f", cluster_size=2)
    manager.local.delays["remove_kernels"] = 0.3
    await manager.local.exit_kernel(s["id"], "sub1", 1)
    await manager.wait_status("f", "TERMINATING")
    r = await manager.client.delete("/sessions/f")
    assert r.status_code == 200
    s = r.json()
    assert s["status"] == "ERROR", s
    assert s["status_info"]["kernel"] == "sub1"
    assert nothing_left(manager)


async def test_a_repeated_exit_report_changes_nothing(manager: Harness) -> None:
    s = await running(manager, "rep", cluster_size=2)
    c = manager.local.container(s["id"], "sub1")
    await manager.local.exit_kernel(s["id"], "sub1", 9)
    await manager.local.exit_kernel(s["id"], "sub1", 9)
    s = await manager.wait("rep", until="final")
    assert s["status"] == "ERROR" and s["status_info"]["exit_code"] == 9
    assert c.id not in manager.local.containers


async def test_destroy_while_preparing(manager: Harness) -> None:
    s = await preparing(manager, "d", cluster_size=2)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    r = await manager.client.delete("/sessions/d")
    assert r.status_code == 200
    assert loop.time() - t0 < 1.5
    s = r.json()
    assert s["status"] == "TERMINATED", s
    assert "RUNNING" not in s["timeline"] and s["started_at"] is None
    assert nothing_left(manager)
    manager.local.ready_gate.set()  # the preparer is gone: nothing makes it RUNNING now
    await asyncio.sleep(0.1)
    s = await manager.get("d")
    assert s["status"] == "TERMINATED"
    assert nothing_left(manager)


async def test_destroy_while_kernels_are_being_created(manager: Harness) -> None:
    manager.local.delays["create_kernels"] = 0.4
    await manager.create("d", cluster_size=2)
    await manager.wait_status("d", "PREPARING")
    await eventually(lambda: "create_kernels" in manager.local.calls)
    r = await manager.client.delete("/sessions/d")
    s = r.json()
    assert s["status"] == "TERMINATED", s
    assert "RUNNING" not in s["timeline"]
    assert all(k["status"] == "TERMINATED" for k in s["kernels"])
    await asyncio.sleep(0.45)  # past the delay: no container appears late
    # the creation under way was let finish before the teardown (preparing.settled), so what
    # it made was removed with the rest
    assert nothing_left(manager)
    assert (await manager.get("d"))["status"] == "TERMINATED"


async def test_destroy_while_pending_cancels(manager: Harness) -> None:
    await running(manager, "big", cluster_size=4, resources={"cpu": 1})
    await manager.create("wait", resources={"cpu": 1})
    r = await manager.client.delete("/sessions/wait")
    s = r.json()
    assert s["status"] == "CANCELLED", s
    assert s["status_info"]["reason"] == "destroyed by user"
    assert all(k["status"] == "TERMINATED" for k in s["kernels"])
    assert "SCHEDULED" not in s["timeline"]
    assert s["terminated_at"] is not None
    # destroying it again changes nothing
    r = await manager.client.delete("/sessions/wait")
    assert r.status_code == 200 and r.json()["status"] == "CANCELLED"


async def test_max_pending_seconds_cancels(manager: Harness) -> None:
    await running(manager, "big", cluster_size=4, resources={"cpu": 1})
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await manager.create("impatient", resources={"cpu": 1}, max_pending_seconds=0.3)
    s = await manager.wait("impatient", until="final", timeout=5)
    assert 0.25 <= loop.time() - t0 < 3
    assert s["status"] == "CANCELLED", s
    assert "max_pending_seconds" in s["status_info"]["reason"]
    assert (await manager.get("big"))["status"] == "RUNNING"


def _has(local: object, session_id: str, hostname: str) -> bool:
    containers = getattr(local, "containers", {})
    return any(
        c.spec.session_id == session_id and c.spec.hostname == hostname for c in containers.values()
    )
