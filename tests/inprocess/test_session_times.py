"""A session's clocks through the manager (docs/policies.md): the time limit (SIGTERM, the
grace, the reason, a batch's exit code), idle reclaim (connections, busy samples, the stored
clock across a restart), ``PATCH /v1/sessions/{ref}``, the owner's maxima and bad input.

Idle tests drive the reaper by hand with a fake clock: its loop is stopped, :meth:`tick` is
called at chosen times."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import Any

import pytest

from tests.inprocess.conftest import Harness, eventually
from tests.inprocess.helpers import error_of, running, signed_in
from tests.inprocess.test_errors import new_user
from tests.inprocess.test_events import events
from troupe.api.exec import ExecItem
from troupe.manager.reaper import STOP_COMMAND, Reaper

MakeManager = Callable[..., Awaitable[Harness]]


def stops_recorded(h: Harness, exit_on_stop: bool) -> list[tuple[str, list[str], str]]:
    """Records the execs of the local agent; with ``exit_on_stop`` a kernel told to stop
    exits (143) as a real one does."""
    seen: list[tuple[str, list[str], str]] = []
    agent = h.local
    real = agent.exec_stream

    async def exec_stream(
        container_id: str, command: list[str], user: str = "work"
    ) -> AsyncIterator[ExecItem]:
        seen.append((container_id, command, user))
        if command == STOP_COMMAND and exit_on_stop:
            c = agent.containers[container_id]
            asyncio.get_running_loop().call_soon(
                lambda: asyncio.ensure_future(
                    agent.exit_kernel(c.spec.session_id, c.spec.hostname, 143)
                )
            )
        async for item in real(container_id, command, user):
            yield item

    agent.exec_stream = exec_stream  # type: ignore[method-assign]
    return seen


# -- the time limit ---------------------------------------------------------------------------
async def test_time_limit_stops_every_kernel_and_ends_with_the_reason(
    make_manager: MakeManager,
) -> None:
    h = await make_manager(reap_interval=0.1)
    seen = stops_recorded(h, exit_on_stop=True)
    s = await running(h, "short", cluster_size=2, time_limit=1, stop_grace=30)
    assert s["time_limit"] == 1 and s["stop_grace"] == 30
    started = datetime.fromisoformat(s["started_at"])
    assert (datetime.fromisoformat(s["deadline"]) - started).total_seconds() == 1
    t0 = time.monotonic()
    s = await h.wait("short", until="final", timeout=10)
    # ended as soon as both kernels stopped, long before the 30 s grace
    assert time.monotonic() - t0 < 5
    assert s["status"] == "TERMINATED", s
    assert s["status_info"]["reason"] == "time limit reached"
    assert s["status_info"]["exit_codes"] == {"main1": 143, "sub1": 143}
    assert s["exit_code"] is None
    stops = [(cmd, user) for _, cmd, user in seen if cmd == STOP_COMMAND]
    assert stops == [(STOP_COMMAND, "root")] * 2
    assert h.local.session_ids() == set()
    evs = await events(h.client, "short")
    assert [(e["kind"], e["actor"]) for e in evs if e["kind"] == "time-limit"] == [
        ("time-limit", "policy time_limit")
    ], evs


async def test_batch_past_its_grace_ends_with_124(make_manager: MakeManager) -> None:
    h = await make_manager(reap_interval=0.1)
    seen = stops_recorded(h, exit_on_stop=False)  # the kernels ignore the SIGTERM
    await h.create("job", type="batch", startup_command="sleep 1000", time_limit=1, stop_grace=1)
    s = await h.wait("job", until="final", timeout=15)
    assert s["status"] == "TERMINATED" and s["exit_code"] == 124, s
    assert s["status_info"]["reason"] == "time limit reached"
    assert "exit_codes" not in s["status_info"]
    terminated = datetime.fromisoformat(s["terminated_at"])
    ran = (terminated - datetime.fromisoformat(s["started_at"])).total_seconds()
    assert 2 <= ran < 4, ran  # the limit, then the grace
    assert [c for _, c, _ in seen].count(STOP_COMMAND) == 1


async def test_time_limit_survives_a_manager_restart(make_manager: MakeManager) -> None:
    h = await make_manager(reap_interval=0.1)
    await running(h, "kept", time_limit=2, stop_grace=0)
    await h.restart()
    s = await h.wait("kept", until="final", timeout=10)
    assert s["status_info"]["reason"] == "time limit reached", s
    ran = datetime.fromisoformat(s["terminated_at"]) - datetime.fromisoformat(s["started_at"])
    assert 2 <= ran.total_seconds() < 4


async def test_server_default_and_user_maximum(make_manager: MakeManager) -> None:
    h = await make_manager(default_time_limit=86400, quota_idle_timeout=3600)
    s = await h.create("dflt")
    # admins have no maximum: the server's default only
    assert s["time_limit"] == 86400 and s["idle_timeout"] is None
    bob = await new_user(h, "bob")
    r = await bob.post("/sessions", json={"name": "b", "image": "troupe/base:0.1.0"})
    assert r.status_code == 201, r.text
    # no idle timeout asked for: the maximum; batch sessions never get one
    assert r.json()["time_limit"] == 86400 and r.json()["idle_timeout"] == 3600
    r = await h.client.put("/users/bob/limits", json={"max_time_limit": "2h"})
    assert r.status_code == 200 and r.json()["limits"]["max_time_limit"] == 7200, r.text
    body = {"name": "c", "image": "troupe/base:0.1.0"}
    r = await bob.post("/sessions", json={**body, "time_limit": "3h"})
    assert r.status_code == 403, r.text
    err = error_of(r)
    assert err["code"] == "quota_exceeded" and err["field"] == "time_limit"
    assert err["message"] == "time_limit: 3 h is over your limit of 2 h (max_time_limit)"
    r = await bob.post("/sessions", json={**body, "idle_timeout": "2h"})
    assert error_of(r)["field"] == "idle_timeout"
    r = await bob.post("/sessions", json={**body, "type": "batch", "startup_command": "true"})
    assert r.status_code == 201 and r.json()["time_limit"] == 7200
    assert r.json()["idle_timeout"] is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"time_limit": -1}, "time_limit"),
        ({"time_limit": 0}, "time_limit"),
        ({"time_limit": "soon"}, "time_limit"),
        ({"time_limit": 10**12}, "time_limit"),
        ({"time_limit": "400d"}, "time_limit"),
        ({"time_limit": 1.5}, "time_limit"),
        ({"time_limit": True}, "time_limit"),
        ({"stop_grace": -1}, "stop_grace"),
        ({"stop_grace": "2h"}, "stop_grace"),
        ({"idle_timeout": 5}, "idle_timeout"),
        ({"idle_timeout": "-30m"}, "idle_timeout"),
        ({"type": "batch", "startup_command": "true", "idle_timeout": 600}, "idle_timeout"),
    ],
)
async def test_bad_durations_are_refused_and_nothing_is_created(
    manager: Harness, body: dict[str, Any], field: str
) -> None:
    r = await manager.client.post(
        "/sessions", json={"name": "bad", "image": "troupe/base:0.1.0", **body}
    )
    assert r.status_code == 422, r.text
    err = error_of(r)
    assert err["field"] == field and err["message"].startswith(f"{field}: "), err
    r = await manager.client.get("/sessions", params={"all": True})
    assert r.json() == []


# -- changing the clocks ----------------------------------------------------------------------
async def test_owner_changes_the_clocks_within_the_maxima(manager: Harness) -> None:
    bob = await new_user(manager, "bob")
    r = await manager.client.put("/users/bob/limits", json={"max_idle_timeout": 7200})
    assert r.status_code == 200, r.text
    r = await bob.post("/sessions", json={"name": "dev", "image": "troupe/base:0.1.0"})
    assert r.status_code == 201 and r.json()["idle_timeout"] == 7200
    await manager.wait(r.json()["id"])
    r = await bob.patch("/sessions/dev", json={"idle_timeout": "30m", "time_limit": "3h"})
    assert r.status_code == 200, r.text
    s = r.json()
    assert s["idle_timeout"] == 1800 and s["time_limit"] == 10800
    started = datetime.fromisoformat(s["started_at"])
    assert (datetime.fromisoformat(s["deadline"]) - started).total_seconds() == 10800
    r = await bob.patch("/sessions/dev", json={"idle_timeout": "3h"})
    assert r.status_code == 403 and error_of(r)["field"] == "idle_timeout"
    r = await bob.patch("/sessions/dev", json={"idle_timeout": None})
    assert r.status_code == 403 and error_of(r)["field"] == "idle_timeout"
    r = await bob.patch("/sessions/dev", json={"time_limit": None})
    assert r.status_code == 200 and r.json()["time_limit"] is None and not r.json()["deadline"]
    # an admin is not bound by bob's maximum
    r = await manager.client.patch(f"/sessions/{s['id']}", json={"idle_timeout": "1d"})
    assert r.status_code == 200 and r.json()["idle_timeout"] == 86400
    # another user does not see it; bad bodies; a finished session
    eve = await new_user(manager, "eve")
    r = await eve.patch(f"/sessions/{s['id']}", json={"time_limit": 60})
    assert r.status_code == 404
    for body, field in (({}, None), ({"time_limit": -5}, "time_limit"), ({"x": 1}, "x")):
        r = await bob.patch("/sessions/dev", json=body)
        assert r.status_code == 422 and error_of(r)["field"] == field, r.text
    await bob.delete("/sessions/dev")
    r = await bob.patch(f"/sessions/{s['id']}", json={"time_limit": 60})
    assert r.status_code == 409, r.text


async def test_idle_timeout_of_a_batch_session_cannot_be_set(manager: Harness) -> None:
    await running(manager, "job", type="batch", startup_command="sleep 100")
    r = await manager.client.patch("/sessions/job", json={"idle_timeout": 600})
    assert r.status_code == 422 and error_of(r)["field"] == "idle_timeout"
    r = await manager.client.patch("/sessions/job", json={"time_limit": 600})
    assert r.status_code == 200 and r.json()["time_limit"] == 600


async def test_a_shorter_time_limit_takes_effect_at_once(make_manager: MakeManager) -> None:
    h = await make_manager(reap_interval=30)  # the change wakes the reaper
    stops_recorded(h, exit_on_stop=True)
    await running(h, "long", time_limit=3600)
    await asyncio.sleep(1.1)
    r = await h.client.patch("/sessions/long", json={"time_limit": 1})
    assert r.status_code == 200
    s = await h.wait("long", until="final", timeout=5)
    assert s["status_info"]["reason"] == "time limit reached"


# -- idle reclaim -----------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


async def hand_driven(h: Harness) -> tuple[Reaper, Clock]:
    """The manager's reaper, its loop stopped, on a fake clock (presence's too)."""
    assert h.app is not None
    reaper: Reaper = h.app.state.reaper
    await reaper.stop()
    clock = Clock()
    reaper.clock = reaper.presence.clock = clock
    reaper.since = clock.now
    return reaper, clock


async def settle(reaper: Reaper) -> None:
    """Waits for the reaper's jobs (ends) to finish."""
    while reaper._jobs:
        await asyncio.gather(*list(reaper._jobs), return_exceptions=True)


async def test_untouched_session_is_destroyed_after_its_idle_timeout(manager: Harness) -> None:
    reaper, clock = await hand_driven(manager)
    s = await running(manager, "forgot", idle_timeout=30)
    clock.now += 1
    await reaper.tick()
    s = await manager.get("forgot")
    since = datetime.fromisoformat(s["idle_since"])
    assert abs(since.timestamp() - (clock.now - 1)) < 1.5, s
    assert (datetime.fromisoformat(s["idle_deadline"]) - since).total_seconds() == 30
    clock.now += 25
    assert await reaper.tick() == pytest.approx(since.timestamp() + 30 - clock.now, abs=0.01)
    assert (await manager.get("forgot"))["status"] == "RUNNING"
    clock.now += 6
    await reaper.tick()
    await settle(reaper)
    s = await manager.get("forgot")
    assert s["status"] == "TERMINATED", s
    assert s["status_info"]["reason"] == "idle for 30 s"
    assert s["status_info"]["idle_timeout"] == 30
    assert manager.local.session_ids() == set()
    # the event list warned once, when the idle spell began, and names the policy as the actor
    evs = await events(manager.client, "forgot")
    warned = [e for e in evs if e["kind"] == "idle-warning"]
    assert len(warned) == 1 and warned[0]["actor"] == "policy idle_timeout", evs
    assert "unless used (idle_timeout 30 s)" in warned[0]["message"], warned
    assert [(e["status"], e["actor"]) for e in evs][-2:] == [
        ("TERMINATING", "policy idle_timeout"),
        ("TERMINATED", "policy idle_timeout"),
    ]


async def test_an_open_exec_keeps_the_session(manager: Harness) -> None:
    reaper, clock = await hand_driven(manager)
    s = await running(manager, "used", idle_timeout=30)
    manager.local.exec_gate = asyncio.Event()  # the exec runs until the gate opens

    async def exec_sleep() -> int:
        r = await manager.client.post("/sessions/used/exec", json={"command": ["sleep", "60"]})
        return r.status_code

    task = asyncio.create_task(exec_sleep())
    await eventually(lambda: reaper.presence.connected(s["id"]))
    clock.now += 61
    await reaper.tick()
    await settle(reaper)
    s = await manager.get("used")
    assert s["status"] == "RUNNING" and s["idle_since"] is None, s
    manager.local.exec_gate.set()
    assert await task == 200
    await eventually(lambda: not reaper.presence.connected(s["id"]))
    ended = clock.now
    clock.now += 29
    await reaper.tick()
    s = await manager.get("used")
    assert datetime.fromisoformat(s["idle_since"]).timestamp() == pytest.approx(ended, abs=0.01)
    assert s["status"] == "RUNNING"
    clock.now += 2
    await reaper.tick()
    await settle(reaper)
    assert (await manager.get("used"))["status"] == "TERMINATED"


async def test_a_busy_kernel_keeps_the_session(manager: Harness) -> None:
    assert manager.app is not None
    reaper, clock = await hand_driven(manager)
    s = await running(manager, "busy", cluster_size=2, idle_timeout=30)
    feed = manager.app.state.metrics
    for dt in range(0, 60, 5):  # sub1 busy all along (a quarter of a core), main1 quiet
        manager.local.sample(s["id"], "sub1", t=clock.now + dt, cpu_cores=0.25)
        manager.local.sample(s["id"], "main1", t=clock.now + dt, cpu_cores=0.01)
    await feed.refresh(["local"], force=True)
    clock.now += 58
    await reaper.tick()
    await settle(reaper)
    s = await manager.get("busy")
    assert s["status"] == "RUNNING" and s["idle_since"] is None, s
    # then quiet: idle from its last busy sample (t0 + 55) on
    busy_until = clock.now - 3
    for dt in range(2, 40, 5):
        manager.local.sample(s["id"], "sub1", t=clock.now + dt, cpu_cores=0.04)
    await feed.refresh(["local"], force=True)
    clock.now += 20
    await reaper.tick()
    s = await manager.get("busy")
    assert datetime.fromisoformat(s["idle_since"]).timestamp() == pytest.approx(busy_until, 0.01)
    clock.now = busy_until + 31
    await reaper.tick()
    await settle(reaper)
    s = await manager.get("busy")
    assert s["status"] == "TERMINATED" and s["status_info"]["reason"] == "idle for 30 s"


async def test_the_idle_clock_survives_a_manager_restart(manager: Harness) -> None:
    reaper, clock = await hand_driven(manager)
    s = await running(manager, "idle", idle_timeout=600)
    await reaper.tick()
    since = (await manager.get("idle"))["idle_since"]
    assert since is not None
    await manager.restart()
    reaper, clock = await hand_driven(manager)
    await reaper.tick()
    assert (await manager.get("idle"))["idle_since"] == since  # not reset by the restart
    clock.now = datetime.fromisoformat(since).timestamp() + 601
    await reaper.tick()
    await settle(reaper)
    s = await manager.get("idle")
    assert s["status"] == "TERMINATED" and s["status_info"]["reason"] == "idle for 10 min"


async def test_the_session_page_shows_the_clocks(manager: Harness) -> None:
    reaper, clock = await hand_driven(manager)
    s = await running(manager, "shown", idle_timeout=1800, time_limit=7200)
    clock.now += 1
    await reaper.tick()
    c = await signed_in(manager)
    page = (await c.get(f"/sessions/{s['id']}")).text
    assert "<dt>Time limit</dt>" in page and "2 h (stop grace 10 s), reached " in page
    assert "<dt>Idle reclaim</dt>" in page
    assert "idle for 0 s, ends in 29 min (after 30 min idle)" in page or (
        "idle for 1 s, ends in 29 min (after 30 min idle)" in page
    ), page


async def test_a_new_idle_timeout_counts_from_the_change(manager: Harness) -> None:
    reaper, clock = await hand_driven(manager)
    await running(manager, "old")
    clock.now += 3600  # an hour without an idle timeout
    await reaper.tick()
    r = await manager.client.patch("/sessions/old", json={"idle_timeout": 30})
    assert r.status_code == 200 and r.json()["idle_since"] is None, r.text
    changed = clock.now
    clock.now += 20
    await reaper.tick()
    await settle(reaper)
    s = await manager.get("old")
    assert s["status"] == "RUNNING"
    assert datetime.fromisoformat(s["idle_since"]).timestamp() == pytest.approx(changed, abs=0.01)
    clock.now += 11
    await reaper.tick()
    await settle(reaper)
    assert (await manager.get("old"))["status_info"]["reason"] == "idle for 30 s"
