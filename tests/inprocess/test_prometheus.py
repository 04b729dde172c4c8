"""``GET /metrics`` (docs/metrics.md, "Prometheus"): refused without the admin key or the
scrape token, and then the fleet, the sessions, the API's latency by route template and each
running kernel's utilisation in Prometheus's text format."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.inprocess.conftest import Harness
from tests.inprocess.helpers import anon_client, error_of, running
from tests.inprocess.test_errors import new_user

TOKEN = "scrape-secret-0123456789"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def test_metrics_needs_the_admin_key_or_the_scrape_token(
    make_manager: Any, tmp_path: Path
) -> None:
    token_file = tmp_path / "scrape-token"
    token_file.write_text(TOKEN + "\n")
    h: Harness = await make_manager(metrics_token_file=token_file)
    anon = anon_client(h)
    r = await anon.get("http://troupe.test/metrics")
    assert r.status_code == 401 and error_of(r)["code"] == "unauthorized"
    r = await anon.get("http://troupe.test/metrics", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401
    alice = await new_user(h, "alice")
    assert (await alice.get("http://troupe.test/metrics")).status_code == 403
    r = await anon.get("http://troupe.test/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert (await h.client.get("http://troupe.test/metrics")).status_code == 200  # an admin's key


async def test_sessions_agents_latency_and_kernels(manager: Harness) -> None:
    s = await running(manager, "job", cluster_size=2)
    await manager.create("waits", resources={"cpu": 3.5})  # more than is free: PENDING
    manager.local.sample(s["id"], "main1", cpu_cores=0.75, cpu_limit=1, mem_bytes=2**20)
    gpu = {"index": 3, "uuid": "GPU-x", "util_pct": 42.0, "mem_bytes": 10, "mem_total": 100}
    manager.local.sample(s["id"], "sub1", cpu_cores=0.0, mem_bytes=1, oom_killed=True, gpus=[gpu])
    assert (await manager.client.get("/sessions/job/metrics")).status_code == 200
    r = await manager.client.get("http://troupe.test/metrics")
    assert r.status_code == 200, r.text
    got = samples(r.text)
    assert got[("troupe_sessions", (("status", "RUNNING"),))] == 1
    assert got[("troupe_sessions", (("status", "PENDING"),))] == 1
    assert got[("troupe_kernels", ())] == 2
    assert got[("troupe_pending_oldest_seconds", ())] >= 0
    assert got[("troupe_agent_cpu_cores", (("agent", "local"),))] == 4
    assert got[("troupe_agent_cpu_allocated_cores", (("agent", "local"),))] > 0
    main1 = (("kernel", "main1"), ("owner", "admin"), ("session", "job"))
    sub1 = (("kernel", "sub1"), ("owner", "admin"), ("session", "job"))
    assert got[("troupe_kernel_cpu_cores", main1)] == 0.75
    assert got[("troupe_kernel_cpu_limit_cores", main1)] == 1
    assert got[("troupe_kernel_memory_bytes", main1)] == 2**20
    assert got[("troupe_kernel_oom_killed", sub1)] == 1
    gpu_key = tuple(sorted((*sub1, ("gpu", "3"))))
    assert got[("troupe_kernel_gpu_utilization_percent", gpu_key)] == 42
    # latency by route template (bounded), not by path
    key = (
        "troupe_api_request_duration_seconds_count",
        (("method", "GET"), ("route", "/v1/sessions/{ref}/metrics")),
    )
    assert got[key] >= 1
    assert not any("job" in dict(labels).get("route", "") for _, labels in got)
    # a finished session's kernels leave
    await manager.client.delete("/sessions/job")
    await manager.wait_status("job", "TERMINATED")
    got = samples((await manager.client.get("http://troupe.test/metrics")).text)
    assert ("troupe_kernel_cpu_cores", main1) not in got
