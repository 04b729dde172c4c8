"""Utilisation through the manager (docs/metrics.md): the fake agent's samples reach
``GET /v1/sessions/{ref}/metrics`` and ``GET /v1/agents/{name}/metrics``, a finished session
keeps its summary (in its session object too), and bad input is refused as everywhere."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.inprocess.conftest import IMAGE, Harness
from tests.inprocess.fake_agent import FakeAgent
from tests.inprocess.helpers import error_of, running
from tests.inprocess.test_errors import new_user

GiB = 1024**3


async def metrics(h: Harness, ref: str, **params: Any) -> dict[str, Any]:
    r = await h.client.get(f"/sessions/{ref}/metrics", params=params)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def test_samples_of_each_kernel_and_since(manager: Harness) -> None:
    s = await running(manager, "job", cluster_size=2)
    t0 = float(int(time.time()) - 10)  # whole seconds: the RFC 3339 time below has no fraction
    for i in range(3):
        manager.local.sample(s["id"], "main1", t=t0 + i, cpu_cores=0.98, cpu_limit=1, mem_bytes=GiB)
        manager.local.sample(s["id"], "sub1", t=t0 + i, cpu_cores=0.01, cpu_limit=1, mem_bytes=1)
    m = await metrics(manager, "job")
    assert m["name"] == "job" and m["status"] == "RUNNING" and m["summary"] is None
    by_host = {k["hostname"]: k["samples"] for k in m["kernels"]}
    assert list(by_host) == ["main1", "sub1"]
    assert [x["t"] for x in by_host["main1"]] == pytest.approx([t0, t0 + 1, t0 + 2], abs=0.01)
    last = by_host["main1"][-1]
    assert last["cpu_cores"] == pytest.approx(0.98) and last["mem_bytes"] == GiB
    assert set(last) == {
        "t", "cpu_cores", "cpu_limit", "cpu_pct", "mem_bytes", "mem_limit", "oom_killed",
        "net_rx_bps", "net_tx_bps", "blk_read_bps", "blk_write_bps", "pids", "gpus",
    }  # fmt: skip
    assert by_host["sub1"][0]["cpu_cores"] == pytest.approx(0.01)
    # since: epoch seconds or RFC 3339, only what came after
    m = await metrics(manager, "job", since=t0 + 1.5)
    assert [len(k["samples"]) for k in m["kernels"]] == [1, 1]
    rfc = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0 + 0.5))
    m = await metrics(manager, "job", since=rfc)
    assert [len(k["samples"]) for k in m["kernels"]] == [2, 2]
    # the manager asked only for what it had not seen yet
    assert manager.local.calls.count("metrics") >= 1


async def test_gpu_figures_and_the_agents_use(make_manager: Any, tmp_path: Path) -> None:
    h: Harness = await make_manager()
    await h.stop()
    h.local = FakeAgent("local", gpus=2)
    h.agents = {"local": h.local}
    await h.start()
    s = await running(h, "g", resources={"cpu": 1, "gpu": 1})
    (gpu,) = s["kernels"][0]["gpus"]
    figure = {
        "index": 0,
        "uuid": gpu,
        "util_pct": 87.0,
        "mem_bytes": 3 * GiB,
        "mem_total": 16 * GiB,
    }
    h.local.sample(s["id"], "main1", cpu_cores=0.5, mem_bytes=GiB, gpus=[figure])
    (k,) = (await metrics(h, "g"))["kernels"]
    assert k["samples"][-1]["gpus"] == [figure]
    r = await h.client.get("/agents/local/metrics")
    assert r.status_code == 200, r.text
    a = r.json()
    assert a["name"] == "local" and a["cpu"] == 4 and a["gpu"] == 2
    (last,) = a["samples"]
    assert last["cpu_cores"] == 0.5 and last["mem_bytes"] == GiB and last["kernels"] == 1
    assert last["gpus"] == [figure]


async def test_a_finished_session_keeps_its_summary(manager: Harness) -> None:
    s = await running(manager, "done", cluster_size=2)
    t0 = time.time() - 20
    for i in range(4):
        manager.local.sample(s["id"], "main1", t=t0 + 5 * i, cpu_cores=1.0, mem_bytes=(i + 1) * GiB)
        manager.local.sample(s["id"], "sub1", t=t0 + 5 * i, cpu_cores=0.5, mem_bytes=GiB)
    await metrics(manager, "done")  # fetched while it runs
    r = await manager.client.delete("/sessions/done")
    assert r.status_code == 200
    await manager.wait_status("done", "TERMINATED")
    summary = None
    deadline = time.monotonic() + 5
    while summary is None and time.monotonic() < deadline:
        summary = (await metrics(manager, s["id"]))["summary"]
    assert summary is not None
    assert summary["peak_mem_bytes"] == 4 * GiB
    assert summary["mean_cpu_cores"] == pytest.approx(1.5)
    assert summary["kernels"]["main1"]["peak_mem_bytes"] == 4 * GiB
    assert summary["gpu_hours"] == 0
    # the series are dropped: a finished session shows its summary, not samples
    m = await metrics(manager, s["id"])
    assert all(k["samples"] == [] for k in m["kernels"])
    # the session object carries it too (not the list: it reads no summaries)
    assert (await manager.get(s["id"]))["usage"] == summary
    r = await manager.client.get("/sessions", params={"all": True})
    assert [x["usage"] for x in r.json()] == [None]


@pytest.mark.parametrize(
    ("since", "rule"),
    [
        ("yesterday", "RFC 3339"),
        ("2999-01-01T00:00:00Z", "future"),
        (str(time.time() + 3600), "future"),
    ],
)
async def test_since_malformed_or_in_the_future_is_422(
    manager: Harness, since: str, rule: str
) -> None:
    await manager.create("s")
    for path in ("/sessions/s/metrics", "/agents/local/metrics"):
        r = await manager.client.get(path, params={"since": since})
        assert r.status_code == 422, r.text
        err = error_of(r)
        assert err["field"] == "since" and rule in err["message"], err


async def test_unknown_or_another_users_session_and_unknown_agent_are_404(
    manager: Harness,
) -> None:
    alice = await new_user(manager, "alice")
    bob = await new_user(manager, "bob")
    r = await alice.post("/sessions", json={"name": "mine", "image": IMAGE})
    sid = r.json()["id"]
    for ref in ("mine", sid, "nosuch"):
        r = await bob.get(f"/sessions/{ref}/metrics")
        assert r.status_code == 404, r.text
        assert error_of(r)["code"] == "not_found"
    assert (await alice.get(f"/sessions/{sid}/metrics")).status_code == 200
    assert (await manager.client.get(f"/sessions/{sid}/metrics")).status_code == 200  # admin
    r = await manager.client.get("/agents/nosuch/metrics")
    assert r.status_code == 404 and error_of(r)["code"] == "not_found"
    r = await alice.get("/agents/local/metrics")  # an agent's figures are for admins
    assert r.status_code == 403


async def test_an_agent_that_fails_is_skipped(manager: Harness) -> None:
    await running(manager, "s")
    manager.local.down = True
    m = await metrics(manager, "s")
    assert [k["samples"] for k in m["kernels"]] == [[]]
    manager.local.down = False
