"""A resource group whose agents are LOST: a session they could hold waits PENDING (the agents
may come back) with a why-pending report naming them, and is placed when one is back; one
that no agent of the group, alive or LOST, could ever hold is still 422 ``does_not_fit``
(docs/lifecycle.md, admission)."""

from __future__ import annotations

import asyncio

import httpx

from tests.inprocess.conftest import IMAGE, Harness
from tests.inprocess.helpers import error_of, get_when, heartbeats

LOST_LINE = "agent h2: LOST (no heartbeat); waiting for it to come back"


async def lost(h: Harness, name: str, **cap: object) -> httpx.AsyncClient:
    """Registers agent ``name`` and lets it fall silent until it is LOST; its client."""
    c = await h.register(name, **cap)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while True:
        r = await h.client.get("/agents")
        if {a["name"]: a["status"] for a in r.json()}[name] == "LOST":
            return c
        assert loop.time() < deadline, f"{name} not LOST in time"
        await asyncio.sleep(0.05)


async def test_a_session_for_a_lost_agent_waits_pending_and_runs_when_it_is_back(
    manager: Harness,
) -> None:
    c = await lost(manager, "h2", group="g2")
    r = await manager.client.post(
        "/sessions", json={"name": "w", "image": IMAGE, "group": "g2", "cluster_size": 2}
    )
    assert r.status_code == 201, r.text
    s = await get_when(manager, "w", lambda s: bool(s["status_info"].get("pending")))
    assert s["status"] == "PENDING", s
    assert s["status_info"]["pending"] == {"main1": [LOST_LINE], "sub1": [LOST_LINE]}
    async with heartbeats(c, "h2"):
        s = await manager.wait("w")
        assert s["status"] == "RUNNING", s
        assert {k["agent"] for k in s["kernels"]} == {"h2"}


async def test_the_report_names_a_lost_agent_beside_the_alive_ones(manager: Harness) -> None:
    await lost(manager, "h2", cpu=8, group="default")  # local has 4 cores
    r = await manager.client.post(
        "/sessions", json={"name": "big", "image": IMAGE, "resources": {"cpu": 6}}
    )
    assert r.status_code == 201, r.text
    s = await get_when(manager, "big", lambda s: bool(s["status_info"].get("pending")))
    lines = s["status_info"]["pending"]["main1"]
    assert lines[-1] == LOST_LINE and lines[0].startswith("agent local: cpu: needs 6 cores")


async def test_what_no_agent_of_the_group_could_ever_hold_is_still_422(
    manager: Harness,
) -> None:
    await lost(manager, "h2", group="g2")  # 4 cores, 8 GiB
    for body in [
        {"group": "g2", "resources": {"cpu": 5}},
        {"group": "g2", "cluster_size": 5, "resources": {"cpu": 1}},
        {"group": "nowhere"},
    ]:
        r = await manager.client.post("/sessions", json={"name": "no", "image": IMAGE, **body})
        assert r.status_code == 422, (body, r.text)
        assert error_of(r)["code"] == "does_not_fit", (body, r.text)


async def test_a_session_with_roles_waits_for_a_lost_agent_that_holds_all_its_kernels(
    manager: Harness,
) -> None:
    """main1 takes 3 of h2's 4 cores and the two workers the last one: the whole session fits
    on h2 once back, though three kernels of main's shape would not (finding RL3,
    docs/reliability.md)."""
    c = await lost(manager, "h2", group="g2")
    body = {
        "name": "r",
        "image": IMAGE,
        "group": "g2",
        "resources": {"cpu": 3},
        "roles": [{"name": "worker", "replicas": 2, "resources": {"cpu": 0.5}}],
    }
    r = await manager.client.post("/sessions", json=body)
    assert r.status_code == 201, r.text
    s = await get_when(manager, "r", lambda s: bool(s["status_info"].get("pending")))
    assert s["status"] == "PENDING", s
    hosts = ["main1", "worker1", "worker2"]
    assert s["status_info"]["pending"] == {h: [LOST_LINE] for h in hosts}
    async with heartbeats(c, "h2"):
        s = await manager.wait("r")
        assert s["status"] == "RUNNING", s
        assert {k["agent"] for k in s["kernels"]} == {"h2"}
