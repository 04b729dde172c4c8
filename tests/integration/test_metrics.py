"""Utilisation through a real engine (docs/metrics.md): a busy kernel shows about a core while
its idle peer shows about none, an allocation shows in memory, an OOM kill is marked, the CLI's
``session top --once --json`` agrees with the API, and a finished session keeps its summary.

The manager's own agent samples every second (``--metrics-interval 1``). The test host is
shared (two cores, other test runs): a busy loop there gets what the scheduler gives it, so
"about a core" is checked as a clear share of one, far above the idle peer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import BASE_IMAGE, Server, start_server, stop_server
from troupe.api.metrics import KernelSample, SessionMetrics
from troupe.api.models import Resources, SessionCreate

pytestmark = pytest.mark.docker
MiB = 1024**2
INTERVAL = 1.0
SCRAPE_TOKEN = "scrape-token-for-the-test"


@pytest.fixture(scope="module")
def sampled(tmp_path_factory: pytest.TempPathFactory, docker_engine: None) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("metrics")
    (tmp / "scrape-token").write_text(SCRAPE_TOKEN + "\n")
    s = start_server(
        tmp,
        *("--metrics-interval", str(INTERVAL)),
        *("--metrics-token-file", str(tmp / "scrape-token")),
    )
    try:
        yield s
    finally:
        c = s.client()
        for info in c.list_sessions():
            c.destroy_session(info.id)
        stop_server(s)


def newest(m: SessionMetrics) -> dict[str, KernelSample]:
    return {k.hostname: k.samples[-1] for k in m.kernels if k.samples}


def until(
    server: Server, ref: str, check: Callable[[dict[str, KernelSample]], bool], timeout: float
) -> dict[str, KernelSample]:
    c = server.client()
    deadline = time.monotonic() + timeout
    while True:
        last = newest(c.session_metrics(ref))
        if check(last) or time.monotonic() > deadline:
            assert check(last), last
            return last
        time.sleep(0.25)


def background(server: Server, ref: str, kernel: str, command: str) -> None:
    code, out = server.client().exec(
        ref, ["sh", "-c", f"nohup {command} >/dev/null 2>&1 &"], kernel=kernel
    )
    assert code == 0, out


def test_busy_idle_memory_oom_cli_and_summary(sampled: Server, tmp_path: Path) -> None:
    c = sampled.client()
    req = SessionCreate(
        name="metered", image=BASE_IMAGE, cluster_size=2, resources=Resources(cpu=1, mem="512m")
    )
    sid = c.create_session(req).id
    assert c.wait_session(sid, timeout=120).status == "RUNNING"

    background(sampled, sid, "main1", "sh -c 'while :; do :; done'")
    started = time.monotonic()
    # both kernels sampled (a kernel's first rate needs two reads, and the two may start on
    # either side of a sampling round) and the busy one busy
    last = until(
        sampled, sid, lambda s: {"main1", "sub1"} <= s.keys() and s["main1"].cpu_cores > 0.3, 20
    )
    took = time.monotonic() - started
    busy, idle = last["main1"], last["sub1"]
    assert busy.cpu_limit == 1 and busy.cpu_pct == pytest.approx(100 * busy.cpu_cores, abs=0.1)
    assert idle.cpu_cores < 0.05 and busy.cpu_cores > 5 * idle.cpu_cores, last
    assert busy.mem_limit == 512 * MiB and busy.pids >= 2
    print(f"busy kernel shown after {took:.1f} s at {busy.cpu_cores:.2f} cores")

    # Prometheus's view: the busy kernel's CPU series, with the scrape token only
    assert httpx.get(f"{sampled.url}/metrics", timeout=10).status_code == 401
    r = httpx.get(
        f"{sampled.url}/metrics", headers={"Authorization": f"Bearer {SCRAPE_TOKEN}"}, timeout=10
    )
    assert r.status_code == 200, r.text
    series = 'troupe_kernel_cpu_cores{kernel="main1",owner="admin",session="metered"} '
    (line,) = [x for x in r.text.splitlines() if x.startswith(series)]
    assert float(line.split()[-1]) > 0.1, line

    allocate = 'python3 -c "import time; b = b\\"x\\" * (200 << 20); time.sleep(3600)"'
    background(sampled, sid, "sub1", allocate)
    last = until(sampled, sid, lambda s: s["sub1"].mem_bytes >= 200 * MiB, 20)
    assert last["sub1"].mem_bytes < 300 * MiB and last["main1"].mem_bytes < 50 * MiB

    # the CLI's newest records are samples the API has
    r = sampled.cli("session", "top", "metered", "--once", "--json")
    assert r.returncode == 0, r.stderr
    records = [json.loads(line) for line in r.stdout.splitlines()]
    assert sorted(x["hostname"] for x in records) == ["main1", "sub1"]
    api = {k.hostname: k.samples for k in c.session_metrics(sid).kernels}
    for rec in records:
        host = rec.pop("hostname")
        assert rec in [s.model_dump(mode="json") for s in api[host]], (host, rec)
    r = sampled.cli("session", "top", "metered", "--once")
    assert r.returncode == 0 and "main1" in r.stdout and "CPU %" in r.stdout, r.stdout

    # a process over the kernel's memory limit is OOM-killed: the kernel is marked
    code, _ = c.exec(sid, ["python3", "-c", 'b = b"x" * (1024 << 20)'], kernel="sub1")
    assert code != 0
    until(sampled, sid, lambda s: s["sub1"].oom_killed, 20)

    agent = c.agent_metrics("local")
    assert agent.samples and agent.samples[-1].kernels >= 2 and agent.cpu == 2

    c.destroy_session(sid)
    summary = None
    deadline = time.monotonic() + 30
    while summary is None and time.monotonic() < deadline:
        summary = c.session_metrics(sid).summary
        time.sleep(0.25)
    assert summary is not None
    assert summary.peak_mem_bytes >= 200 * MiB and summary.oom_killed
    assert summary.kernels["main1"].mean_cpu_cores > 0.1 and summary.gpu_hours == 0
    r = sampled.cli("session", "top", sid, "--once")
    assert "PEAK MEM" in r.stdout, r.stdout
