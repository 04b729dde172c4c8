"""Re-placement (docs/policies.md): a RUNNING multi-node session whose kernel's agent is LOST,
with restarts left, is placed again on the agents that fit and runs again; it waits PENDING
with its why-pending report while none fits; the lost agent's part is removed once it is back."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx

from tests.inprocess.conftest import Harness, eventually
from tests.inprocess.helpers import get_when, heartbeats, running


@contextlib.asynccontextmanager
async def alive(clients: dict[str, httpx.AsyncClient]) -> AsyncIterator[dict[str, Any]]:
    """Heartbeats for each agent; ``stack[name].aclose()`` stops one (it goes LOST)."""
    stacks: dict[str, Any] = {}
    try:
        for name, c in clients.items():
            stacks[name] = contextlib.AsyncExitStack()
            await stacks[name].enter_async_context(heartbeats(c, name))
        yield stacks
    finally:
        for stack in stacks.values():
            await stack.aclose()


async def agents(h: Harness, *names: str) -> dict[str, httpx.AsyncClient]:
    return {n: await h.register(n, cpu=3, group="g2") for n in names}


def body(**more: Any) -> dict[str, Any]:
    return {
        "group": "g2",
        "cluster_size": 2,
        "cluster_mode": "multi-node",
        "resources": {"cpu": 3},
        "max_restarts": 1,
        **more,
    }


async def test_a_lost_agents_kernel_is_placed_again_and_the_session_runs(
    manager: Harness,
) -> None:
    clients = await agents(manager, "h2", "h3", "h4")
    async with alive(clients) as stacks:
        s = await running(manager, "moved", **body())
        before = {k["hostname"]: k["agent"] for k in s["kernels"]}
        gone = before["sub1"]
        await stacks[gone].aclose()  # no more heartbeats: LOST within a second
        s = await get_when(
            manager, "moved", lambda x: x["restarts"] == 1 and x["status"] == "RUNNING", timeout=8
        )
    after = {k["hostname"]: k["agent"] for k in s["kernels"]}
    assert gone not in after.values() and len(set(after.values())) == 2, after
    [r] = s["restart_history"]
    assert (r["kernel"], r["attempt"]) == ("sub1", 0)
    assert r["reason"].startswith(f"agent {gone} lost")
    assert s["timeline"]["PENDING"] > s["timeline"]["RESTARTING"]
    assert s["network"] == f"troupe-{s['id'][:12]}-1"  # (the old one may be in use still)
    for host, agent in after.items():
        spec = manager.remotes[agent].container(s["id"], host).spec
        assert spec.env["TROUPE_RESTART_COUNT"] == "1"
    # the kernel left on the agent still there was removed before the new start (the old
    # network stays while the lost host may hold a container in it)
    survivor = before["main1"]
    if survivor not in after.values():
        held = manager.remotes[survivor].containers.values()
        assert all(c.spec.session_id != s["id"] for c in held)
    r = await manager.client.get("/sessions/moved/events")
    kinds = [(e["kind"], e["status"]) for e in r.json()]
    assert ("restart", None) in kinds
    statuses = [st for k, st in kinds if k == "status"]
    assert statuses[-4:] == ["PENDING", "SCHEDULED", "PREPARING", "RUNNING"], statuses


async def test_it_waits_pending_with_the_report_until_an_agent_fits(manager: Harness) -> None:
    clients = await agents(manager, "h2", "h3")
    async with alive(clients) as stacks:
        s = await running(manager, "waits", **body())
        gone = next(k["agent"] for k in s["kernels"] if k["hostname"] == "sub1")
        await stacks[gone].aclose()
        s = await get_when(
            manager, "waits", lambda x: bool(x["status_info"].get("pending")), timeout=8
        )
        assert (s["status"], s["restarts"]) == ("PENDING", 1), s
        lines = s["status_info"]["pending"]["sub1"]
        assert any(f"agent {gone}: LOST" in line for line in lines), lines
        old = manager.remotes[gone]
        assert s["id"] in old.session_ids()  # could not be asked while LOST
        async with heartbeats(clients[gone], gone):  # back: swept, then placed again
            s = await get_when(manager, "waits", lambda x: x["status"] == "RUNNING", timeout=8)
            assert s["restarts"] == 1
            await eventually(lambda: len(old.containers) == 1)


async def test_no_restarts_left_fails_as_before(manager: Harness) -> None:
    clients = await agents(manager, "h2", "h3")
    async with alive(clients) as stacks:
        s = await running(manager, "fails", **body(max_restarts=0))
        gone = next(k["agent"] for k in s["kernels"] if k["hostname"] == "sub1")
        await stacks[gone].aclose()
        s = await manager.wait("fails", until="final", timeout=8)
    assert (s["status"], s["status_info"]["reason"]) == ("ERROR", "agent lost"), s


async def test_a_destroy_while_waiting_to_be_placed_again(manager: Harness) -> None:
    clients = await agents(manager, "h2", "h3")
    async with alive(clients) as stacks:
        s = await running(manager, "bye", **body())
        gone = next(k["agent"] for k in s["kernels"] if k["hostname"] == "sub1")
        await stacks[gone].aclose()
        await get_when(manager, "bye", lambda x: x["status"] == "PENDING", timeout=30)
        r = await manager.client.delete("/sessions/bye")
        assert r.status_code == 200, r.text
        s = await manager.wait("bye", until="final")
    assert s["status"] == "CANCELLED", s
