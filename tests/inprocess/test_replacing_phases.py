"""Re-placement in every phase (docs/policies.md): a session that loses an agent while
SCHEDULED, PREPARING (pulling, creating) or RESTARTING follows its restart rule as a RUNNING
one does: with restarts left it counts a restart and is placed again on the agents that fit;
without, it fails with ``agent lost``. Also: a start failed by an agent that stopped
answering waits for its heartbeat verdict, an agent back while its part is being removed, a
manager restarted in the middle."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.inprocess.conftest import Harness, MakeManager, eventually
from tests.inprocess.helpers import get_when, heartbeats
from tests.inprocess.test_replacing import agents, alive, body
from troupe.manager.life import preparing


def holder(s: dict[str, Any], host: str = "sub1") -> str:
    return next(k["agent"] for k in s["kernels"] if k["hostname"] == host)


async def running_again(h: Harness, name: str, restarts: int) -> dict[str, Any]:
    return await get_when(
        h,
        name,
        lambda x: (
            (x["status"], x["restarts"]) == ("RUNNING", restarts)
            or x["status"] in ("ERROR", "TERMINATED", "CANCELLED")
        ),
        timeout=10,
    )


async def statuses(h: Harness, name: str) -> list[str]:
    r = await h.client.get(f"/sessions/{name}/events")
    return [e["status"] for e in r.json() if e["kind"] == "status"]


def placed_on(h: Harness, s: dict[str, Any]) -> None:
    """Every fake agent holds exactly the session's kernels placed on it now (none left of
    the failed attempt on an agent still there)."""
    now = {(k["agent"], k["hostname"]) for k in s["kernels"]}
    for name, fake in h.remotes.items():
        held = {c.spec.hostname for c in fake.containers.values() if c.spec.session_id == s["id"]}
        if fake.name in {a for a, _ in now}:
            assert held == {host for a, host in now if a == name}, (name, held)


def check_lost_restart(s: dict[str, Any], gone: str, attempt: int = 0) -> None:
    r = s["restart_history"][-1]
    assert (r["kernel"], r["attempt"], r["agent"]) == ("sub1", attempt, gone), r
    assert r["reason"].startswith(f"agent {gone} lost"), r
    assert gone not in {k["agent"] for k in s["kernels"]}


@contextlib.asynccontextmanager
async def gated(fakes: list[Any]) -> AsyncIterator[None]:
    """The readiness barrier of ``fakes`` closed while the block runs."""
    for f in fakes:
        f.ready_gate.clear()
    try:
        yield
    finally:
        for f in fakes:
            f.ready_gate.set()


async def test_lost_while_scheduled_is_placed_again(
    manager: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = asyncio.Event()
    original = preparing._begin

    async def held(life: Any, sid: str) -> Any:  # the session stays SCHEDULED meanwhile
        await gate.wait()
        return await original(life, sid)

    monkeypatch.setattr(preparing, "_begin", held)
    clients = await agents(manager, "h2", "h3", "h4")
    async with alive(clients) as stacks:
        await manager.create("sched", **body())
        s = await manager.wait_status("sched", "SCHEDULED")
        gone = holder(s)
        monkeypatch.setattr(preparing, "_begin", original)  # the next start goes on
        await stacks[gone].aclose()
        s = await running_again(manager, "sched", 1)
    assert s["status"] == "RUNNING", s
    check_lost_restart(s, gone)
    assert (await statuses(manager, "sched"))[-6:] == [
        "SCHEDULED", "RESTARTING", "PENDING", "SCHEDULED", "PREPARING", "RUNNING",
    ]  # fmt: skip
    r = await manager.client.get("/sessions/sched/events")
    [text] = [e["message"] for e in r.json() if e["kind"] == "restart"]
    assert text.endswith("(while SCHEDULED)"), text


async def test_lost_while_creating_removes_the_survivors_and_places_again(
    manager: Harness,
) -> None:
    clients = await agents(manager, "h2", "h3", "h4")
    fakes = list(manager.remotes.values())
    async with alive(clients) as stacks, gated(fakes):
        await manager.create("mid", **body())
        s = await manager.wait_status("mid", "PREPARING")
        await eventually(lambda: sum(len(f.containers) for f in fakes) == 2)
        gone, survivor = holder(s), holder(s, "main1")
        first = manager.remotes[survivor].container(s["id"], "main1").id
        await stacks[gone].aclose()
        await get_when(manager, "mid", lambda x: x["restarts"] == 1, timeout=8)
        for f in fakes:
            f.ready_gate.set()
        s = await running_again(manager, "mid", 1)
    assert s["status"] == "RUNNING", s
    check_lost_restart(s, gone)
    assert first not in manager.remotes[survivor].containers  # removed, not reused
    placed_on(manager, s)
    assert (await statuses(manager, "mid"))[-5:] == [
        "RESTARTING", "PENDING", "SCHEDULED", "PREPARING", "RUNNING",
    ]  # fmt: skip


async def test_lost_while_pulling_is_placed_again(manager: Harness) -> None:
    clients = await agents(manager, "h2", "h3", "h4")
    fakes = list(manager.remotes.values())
    r = await manager.client.post("/registries", json={"host": "reg.test"})
    assert r.status_code in (200, 201), r.text
    image = "reg.test/team/app:1"
    for f in fakes:  # the image is in a registry only: every start pulls it, slowly
        f.pullable[image], f.pull_gate = 1000, asyncio.Event()
    async with alive(clients) as stacks:
        await manager.create("pull", **body(image=image))
        s = await manager.wait_status("pull", "PREPARING")
        gone = holder(s)
        await eventually(lambda: bool(manager.remotes[gone].pulls))
        await stacks[gone].aclose()
        await get_when(manager, "pull", lambda x: x["restarts"] == 1, timeout=8)
        for f in fakes:
            if f.name != gone:
                assert f.pull_gate is not None
                f.pull_gate.set()
        s = await running_again(manager, "pull", 1)
    assert s["status"] == "RUNNING", s
    check_lost_restart(s, gone)


async def exit_of(c: httpx.AsyncClient, name: str, s: dict[str, Any], host: str) -> None:
    """Kernel ``host`` exits with 1, reported by its agent ``name``."""
    kernel = next(k for k in s["kernels"] if k["hostname"] == host)
    ev = {"session_id": s["id"], "kernel_id": kernel["id"], "exit_code": 1, "last_logs": ["x"]}
    r = await c.post(f"/agents/{name}/events", json=ev)
    assert r.status_code == 204, r.text


async def test_lost_while_restarting_in_place_is_placed_again(manager: Harness) -> None:
    clients = await agents(manager, "h2", "h3", "h4")
    fakes = list(manager.remotes.values())
    async with alive(clients) as stacks:
        await manager.create("again", **body(max_restarts=2))
        s = await manager.wait("again")
        gone, main = holder(s), holder(s, "main1")
        async with gated(fakes):  # the restart in place waits at the barrier
            await exit_of(clients[main], main, s, "main1")
            await get_when(manager, "again", lambda x: x["status"] == "RESTARTING")
            await eventually(lambda: "restart_kernels" in manager.remotes[gone].calls)
            await stacks[gone].aclose()
            await get_when(manager, "again", lambda x: x["restarts"] == 2, timeout=8)
        s = await running_again(manager, "again", 2)
    assert s["status"] == "RUNNING", s
    first, _ = s["restart_history"]
    assert (first["kernel"], first["exit_code"], first["agent"]) == ("main1", 1, None)
    check_lost_restart(s, gone, attempt=1)
    placed_on(manager, s)


async def test_no_restarts_left_while_preparing_fails_as_before(manager: Harness) -> None:
    clients = await agents(manager, "h2", "h3", "h4")
    fakes = list(manager.remotes.values())
    async with alive(clients) as stacks, gated(fakes):
        await manager.create("nope", **body(max_restarts=0))
        s = await manager.wait_status("nope", "PREPARING")
        gone = holder(s)
        await stacks[gone].aclose()
        s = await manager.wait("nope", until="final", timeout=8)
    info = s["status_info"]
    assert (s["status"], info["reason"], info["agent"], info["kernel"]) == (
        "ERROR", "agent lost", gone, "sub1",
    ), s  # fmt: skip
    assert s["restarts"] == 0 and "restarts" not in info


async def test_no_restarts_left_while_restarting_fails_with_the_count(manager: Harness) -> None:
    clients = await agents(manager, "h2", "h3", "h4")
    fakes = list(manager.remotes.values())
    async with alive(clients) as stacks:
        await manager.create("last", **body(max_restarts=1))
        s = await manager.wait("last")
        gone, main = holder(s), holder(s, "main1")
        async with gated(fakes):
            await exit_of(clients[main], main, s, "main1")
            await get_when(manager, "last", lambda x: x["status"] == "RESTARTING")
            await stacks[gone].aclose()
            s = await manager.wait("last", until="final", timeout=8)
    info = s["status_info"]
    assert (s["status"], info["reason"], info["agent"]) == ("ERROR", "agent lost", gone), s
    assert s["restarts"] == info["restarts"] == 1
    assert all(s["id"] not in f.session_ids() for f in fakes if f.name != gone)


async def test_a_start_failed_by_a_silent_agent_waits_for_its_verdict(manager: Harness) -> None:
    clients = await agents(manager, "h2", "h3", "h4")
    fakes = list(manager.remotes.values())
    for f in fakes:
        f.delays["create_kernels"] = 1.0
    async with alive(clients) as stacks:
        await manager.create("quiet", **body())
        s = await manager.wait_status("quiet", "PREPARING")
        gone = holder(s)
        await eventually(lambda: "create_kernels" in manager.remotes[gone].calls)
        # the host stops: its agent's calls fail at once (the start fails), its heartbeats
        # stop (LOST only after the time-out)
        manager.remotes[gone].down = True
        await stacks[gone].aclose()
        for f in fakes:
            f.delays.clear()
        s = await running_again(manager, "quiet", 1)
    assert s["status"] == "RUNNING", s
    check_lost_restart(s, gone)


async def test_an_agent_back_while_its_part_is_removed_loses_it_first(manager: Harness) -> None:
    clients = await agents(manager, "h2", "h3")
    async with alive(clients) as stacks:
        await manager.create("back", **body())
        s = await manager.wait("back")
        gone, survivor = holder(s), holder(s, "main1")
        old = manager.remotes[gone]
        first = set(old.containers)
        manager.remotes[survivor].delays["remove_kernels"] = 1.5  # the removal takes a while
        await stacks[gone].aclose()
        await get_when(manager, "back", lambda x: x["status"] == "RESTARTING", timeout=8)
        async with heartbeats(clients[gone], gone):  # back while the survivor's part goes
            await get_when(manager, "back", lambda x: x["status"] != "RESTARTING", timeout=8)
            # its part of the failed attempt was removed before the kernels were unplaced
            assert not first & set(old.containers), old.containers
            manager.remotes[survivor].delays.clear()
            s = await running_again(manager, "back", 1)
    assert s["status"] == "RUNNING", s
    placed_on(manager, s)


async def test_a_manager_restarted_while_placing_again_goes_on(make_manager: MakeManager) -> None:
    h = await make_manager(agent_timeout=3.0)
    clients = await agents(h, "h2", "h3", "h4")
    async with alive(clients) as stacks:
        await h.create("goes", **body())
        s = await h.wait("goes")
        gone, survivor = holder(s), holder(s, "main1")
        h.remotes[survivor].delays["remove_kernels"] = 30  # caught while removing
        await stacks[gone].aclose()
        await get_when(h, "goes", lambda x: x["status"] == "RESTARTING", timeout=10)
        await eventually(lambda: "remove_kernels" in h.remotes[survivor].calls)
        for name in clients:
            await stacks[name].aclose()
        h.remotes[survivor].delays.clear()
        await h.restart()
        live = {n: h.credential_client(n) for n in clients if n != gone}
        async with alive(live):
            s = await running_again(h, "goes", 1)
    assert s["status"] == "RUNNING", s
    check_lost_restart(s, gone)
    placed_on(h, s)
