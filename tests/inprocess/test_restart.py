"""A manager restart on the same database and agents: reconciliation of what was going on."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from tests.inprocess.conftest import Harness, eventually
from tests.inprocess.helpers import get_when, heartbeats, preparing, running


async def test_running_session_whose_container_vanished_fails(manager: Harness) -> None:
    s = await running(manager, "gone", cluster_size=3)
    kept = await running(manager, "kept", cluster_size=2)
    await manager.stop()
    del manager.local.containers[manager.local.container(s["id"], "sub2").id]
    await manager.start()

    s = await manager.wait("gone", until="final")
    assert s["status"] == "ERROR", s
    assert s["status_info"] == {
        "reason": "kernel not running after manager restart",
        "kernel": "sub2",
    }
    assert s["id"] not in manager.local.session_ids()
    # the other session is untouched
    kept = await manager.get("kept")
    assert kept["status"] == "RUNNING"
    assert manager.local.session_ids() == {kept["id"]}


async def test_a_held_container_is_no_live_kernel_after_a_restart(manager: Harness) -> None:
    """A failed kernel's container its agent started again, held (docs/policies.md): listed
    ``held``, it is a kernel that does not run; the session fails and the container goes."""
    s = await running(manager, "held", cluster_size=2, max_restarts=1)
    await manager.stop()
    manager.local.container(s["id"], "sub1").state = "held"
    await manager.start()
    s = await manager.wait("held", until="final")
    assert s["status"] == "ERROR"
    assert s["status_info"]["kernel"] == "sub1"
    assert manager.local.session_ids() == set()


async def test_running_session_whose_container_stopped_fails(manager: Harness) -> None:
    s = await running(manager, "stopped", cluster_size=2)
    await manager.stop()
    manager.local.container(s["id"], "main1").state = "exited"
    await manager.start()
    s = await manager.wait("stopped", until="final")
    assert s["status"] == "ERROR"
    assert s["status_info"]["kernel"] == "main1"
    assert manager.local.session_ids() == set()


async def test_running_session_with_its_containers_stays_running(manager: Harness) -> None:
    s = await running(manager, "intact", cluster_size=3)
    containers = dict(manager.local.containers)
    await manager.restart()
    after = await manager.get("intact")
    assert after["status"] == "RUNNING", after
    assert after["timeline"] == s["timeline"]
    assert manager.local.containers == containers
    # and it is still fully managed: exits are seen, destroy works
    await manager.local.exit_kernel(s["id"], "sub1", 4)
    after = await manager.wait("intact", until="final")
    assert after["status"] == "ERROR" and after["status_info"]["kernel"] == "sub1"
    assert manager.local.session_ids() == set()


async def test_session_caught_preparing_fails_and_is_cleaned(manager: Harness) -> None:
    s = await preparing(manager, "midway", cluster_size=2)
    assert s["id"] in manager.local.session_ids()
    await manager.restart()
    s = await manager.wait("midway", until="final")
    assert s["status"] == "ERROR", s
    assert s["status_info"]["reason"] == "manager restarted while the session was being created"
    assert "RUNNING" not in s["timeline"]
    assert all(k["status"] == "TERMINATED" for k in s["kernels"])
    assert manager.local.session_ids() == set()
    # the manager works normally afterwards
    manager.local.ready_gate.set()
    await running(manager, "midway")


async def test_pending_session_is_placed_after_a_restart(manager: Harness) -> None:
    await running(manager, "big", cluster_size=4, resources={"cpu": 1})
    await manager.create("queued", resources={"cpu": 1})
    await get_when(manager, "queued", lambda s: "pending" in s["status_info"])
    await manager.restart()
    assert (await manager.get("queued"))["status"] == "PENDING"
    await manager.client.delete("/sessions/big")
    s = await manager.wait("queued")
    assert s["status"] == "RUNNING", s


async def test_leftovers_of_finished_sessions_are_swept_at_start(manager: Harness) -> None:
    s = await running(manager, "done", cluster_size=2)
    saved = dict(manager.local.containers), dict(manager.local.networks)
    await manager.client.delete("/sessions/done")
    assert manager.local.session_ids() == set()
    # as if the removal had failed: the containers and network are still there
    manager.local.containers.update(saved[0])
    manager.local.networks.update(saved[1])
    await manager.restart()
    assert manager.local.session_ids() == set()
    assert (await manager.get(s["id"]))["status"] == "TERMINATED"


async def test_remote_agent_is_known_again_after_a_restart(
    make_manager: Callable[..., Awaitable[Harness]],
) -> None:
    # a long agent time-out: a slow restart must not make h2 LOST here
    manager = await make_manager(agent_timeout=10.0)
    c = await manager.register("h2", group="g2")
    async with heartbeats(c, "h2"):
        s = await running(manager, "far", group="g2")
    await manager.restart()
    c = manager.credential_client("h2")  # its credential outlives the manager's restart
    async with heartbeats(c, "h2"):
        r = await manager.client.get("/agents")
        assert {a["name"]: a["status"] for a in r.json()} == {"local": "ALIVE", "h2": "ALIVE"}
        assert (await manager.get("far"))["status"] == "RUNNING"
        r = await manager.client.delete("/sessions/far")
        assert r.json()["status"] == "TERMINATED"
        await eventually(lambda: s["id"] not in manager.remotes["h2"].session_ids())


async def test_session_caught_terminating_finishes_as_begun(manager: Harness) -> None:
    s = await running(manager, "dying", cluster_size=2)
    manager.local.delays["remove_kernels"] = 30  # the teardown hangs in the removal
    await manager.local.exit_kernel(s["id"], "sub1", 6)
    await manager.wait_status("dying", "TERMINATING")
    await manager.stop()  # the manager dies in the middle of the teardown
    assert s["id"] in manager.local.session_ids()
    del manager.local.delays["remove_kernels"]
    await manager.start()
    s = await manager.wait("dying", until="final")
    # the ending and the reason decided before the restart are kept
    assert s["status"] == "ERROR", s
    assert s["status_info"]["reason"] == "kernel exited"
    assert s["status_info"]["kernel"] == "sub1" and s["status_info"]["exit_code"] == 6
    assert manager.local.session_ids() == set()


async def test_session_on_an_agent_that_cannot_be_asked_is_left_running(
    make_manager: Callable[..., Awaitable[Harness]],
) -> None:
    manager = await make_manager(agent_timeout=10.0)
    c = await manager.register("h2", group="g2")
    h2 = manager.remotes["h2"]
    async with heartbeats(c, "h2"):
        s = await running(manager, "far", group="g2", cluster_size=2)
    await manager.stop()
    h2.down = True  # its engine does not answer while the manager starts
    await manager.start()
    async with heartbeats(manager.credential_client("h2"), "h2"):
        # not failed: its agent's heartbeat time-out decides, not the reconciliation
        assert (await manager.get("far"))["status"] == "RUNNING"
        h2.down = False
        r = await manager.client.delete("/sessions/far")
        assert r.json()["status"] == "TERMINATED"
        assert s["id"] not in h2.session_ids()
