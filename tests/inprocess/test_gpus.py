"""Whole GPUs through the manager: an agent with two (fake) GPUs, kernels that get distinct
devices, sessions that wait PENDING for them, requests that can never fit, and restarts."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.inprocess.conftest import Harness
from tests.inprocess.fake_agent import FakeAgent
from tests.inprocess.helpers import get_when, heartbeats, running, signed_in

GPU0, GPU1 = "GPU-local-0", "GPU-local-1"
ONE_GPU = {"cpu": 0.5, "gpu": 1}


@pytest.fixture
async def gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Harness]:
    """A manager whose own agent has two GPUs."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    h = Harness(tmp_path)
    h.local = FakeAgent("local", gpus=2)
    h.agents = {"local": h.local}
    await h.start()
    try:
        yield h
    finally:
        await h.stop()


def devices(s: dict[str, Any]) -> list[list[str]]:
    return [k["gpus"] for k in s["kernels"]]


def held(h: Harness, s: dict[str, Any]) -> list[list[str]]:
    """What the agent was asked to give each kernel (by rank)."""
    return [h.local.container(s["id"], k["hostname"]).spec.gpus for k in s["kernels"]]


async def agent(h: Harness, name: str = "local") -> dict[str, Any]:
    r = await h.client.get("/agents")
    assert r.status_code == 200, r.text
    return dict(next(a for a in r.json() if a["name"] == name))


async def test_kernels_get_distinct_gpus_and_the_third_waits(gpus: Harness) -> None:
    a = await running(gpus, "a", resources=ONE_GPU)
    b = await running(gpus, "b", resources=ONE_GPU)
    assert sorted(devices(a) + devices(b)) == [[GPU0], [GPU1]]
    assert held(gpus, a) == devices(a) and held(gpus, b) == devices(b)
    spec = gpus.local.container(a["id"], "main1").spec
    assert spec.env["TROUPE_GPUS"] == "1" and "LOCAL_RANK" not in spec.env
    info = await agent(gpus)
    assert (info["gpu"], info["gpu_free"]) == (2, 0)
    assert [g["model"] for g in info["gpus"]] == ["Fake GPU", "Fake GPU"]

    await gpus.create("c", resources=ONE_GPU)
    c = await get_when(gpus, "c", lambda s: "pending" in s["status_info"])
    assert c["status"] == "PENDING"
    assert c["status_info"]["pending"]["main1"] == ["agent local: gpu: needs 1 GPU, 0 GPUs free"]

    r = await gpus.client.delete("/sessions/a")
    assert r.status_code < 300, r.text
    c = await gpus.wait("c")
    assert c["status"] == "RUNNING", c
    assert devices(c) == devices(a) == held(gpus, c)


async def test_multi_gpu_kernels_and_kernels_of_one_session(gpus: Harness) -> None:
    both = await running(gpus, "both", resources={"cpu": 0.5, "gpu": 2})
    assert devices(both) == [[GPU0, GPU1]]
    await gpus.client.delete("/sessions/both")
    await gpus.wait("both", until="final")
    pair = await running(gpus, "pair", cluster_size=2, resources=ONE_GPU)
    assert devices(pair) == [[GPU0], [GPU1]] == held(gpus, pair)


async def test_more_than_the_host_has_is_refused(gpus: Harness) -> None:
    r = await gpus.client.post(
        "/sessions", json={"name": "big", "image": "troupe/base:0.1.0", "resources": {"gpu": 3}}
    )
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "does_not_fit" and "gpu: needs 3 GPUs, 2 GPUs free" in err["message"]
    r = await gpus.client.post(
        "/sessions",
        json={
            "name": "wide",
            "image": "troupe/base:0.1.0",
            "cluster_size": 3,
            "resources": {"gpu": 1},
        },
    )
    assert r.status_code == 422, r.text


async def test_manager_restart_keeps_the_allocation(gpus: Harness) -> None:
    a = await running(gpus, "a", resources=ONE_GPU)
    await gpus.restart()
    b = await running(gpus, "b", resources=ONE_GPU)
    assert devices(b) != devices(a) and devices(b)[0] in ([GPU0], [GPU1])
    await gpus.create("c", resources=ONE_GPU)
    c = await get_when(gpus, "c", lambda s: "pending" in s["status_info"])
    assert c["status"] == "PENDING"
    assert (await agent(gpus))["gpu_free"] == 0
    await gpus.client.delete("/sessions/b")
    c = await gpus.wait("c")
    assert devices(c) == devices(b)


async def test_restart_reads_the_devices_back_from_the_containers(gpus: Harness) -> None:
    a = await running(gpus, "a", resources=ONE_GPU)
    (mine,) = devices(a)
    other = [GPU1] if mine == [GPU0] else [GPU0]
    await gpus.stop()
    gpus.local.container(a["id"], "main1").spec.gpus = other  # what the engine says it holds
    await gpus.start()
    a = await get_when(gpus, "a", lambda s: devices(s) == [other])
    assert a["status"] == "RUNNING"
    b = await running(gpus, "b", resources=ONE_GPU)
    assert devices(b) == [mine]


async def test_agents_report_gpus_or_why_not(manager: Harness) -> None:
    info = await agent(manager)
    assert info["gpu"] == 0 and info["gpus"] == []
    assert info["gpu_reason"] == "nvidia-smi not found on PATH"

    listed = [
        {"index": 1, "uuid": "GPU-b", "model": "NVIDIA H100 80GB HBM3", "memory": 80 * 1024**3},
        {"index": 0, "uuid": "GPU-a", "model": "NVIDIA H100 80GB HBM3", "memory": 80 * 1024**3},
    ]
    async with heartbeats(await manager.register("h1", gpu=2, gpus=listed), "h1"):
        info = await agent(manager, "h1")
        assert (info["gpu"], info["gpu_free"], info["gpu_reason"]) == (2, 2, "")
        assert [g["uuid"] for g in info["gpus"]] == ["GPU-a", "GPU-b"]
    # a count without devices cannot be handed out
    async with heartbeats(await manager.register("h2", gpu=4), "h2"):
        info = await agent(manager, "h2")
        assert info["gpu"] == 0 and "without their UUIDs" in info["gpu_reason"]
    c = manager.agent_client()
    body = {"name": "h3", "cpu": 1, "mem": 1, "address": "http://h3.test:6011"}
    twice = [listed[0], {**listed[0], "index": 5}]
    r = await c.post("/agents/register", json={**body, "gpus": twice})
    assert r.status_code == 422, r.text
    r = await c.post("/agents/register", json={**body, "gpus": [{"index": 0, "uuid": "a b"}]})
    assert r.status_code == 422, r.text
    await c.aclose()


@contextlib.asynccontextmanager
async def alive(h: Harness, name: str) -> AsyncIterator[None]:
    """Heartbeats of agent ``name`` with its latest credential (it may register again)."""

    async def beat() -> None:
        while True:
            c = h.credential_client(name)
            await c.post(f"/agents/{name}/heartbeat")
            await c.aclose()
            await asyncio.sleep(0.1)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_an_agent_registering_again_keeps_its_kernels_gpus(manager: Harness) -> None:
    listed = [{"index": i, "uuid": f"GPU-h1-{i}", "model": "M"} for i in range(2)]
    await (await manager.register("h1", gpus=listed)).aclose()
    async with alive(manager, "h1"):
        a = await running(manager, "a", resources=ONE_GPU)
        assert [k["agent"] for k in a["kernels"]] == ["h1"] and devices(a) == [["GPU-h1-0"]]
        await (await manager.register("h1", gpus=listed)).aclose()  # e.g. the manager forgot it
        b = await running(manager, "b", resources=ONE_GPU)
        assert devices(b) == [["GPU-h1-1"]]
        await manager.create("c", resources=ONE_GPU)
        c = await get_when(manager, "c", lambda s: "pending" in s["status_info"])
        assert c["status"] == "PENDING"
        # offered fewer GPUs (--gpus 1): the kernels keep theirs, nothing new fits
        await (await manager.register("h1", gpus=listed[1:])).aclose()
        info = await agent(manager, "h1")
        assert (info["gpu"], info["gpu_free"]) == (1, 0)
        await manager.client.delete("/sessions/b")
        c = await manager.wait("c")
        assert devices(c) == [["GPU-h1-1"]]


async def test_agents_page_shows_gpu_capacity_use_and_models(gpus: Harness) -> None:
    """Issue 13's "the agents page shows GPU capacity and use" (the page is the web UI's)."""
    await running(gpus, "a", resources=ONE_GPU)
    c = await signed_in(gpus)
    r = await c.get("/agents")
    assert r.status_code == 200, r.text
    assert "1 / 2 GPUs" in r.text and r.text.count("Fake GPU") == 2, r.text
