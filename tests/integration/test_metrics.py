"""Utilisation through a real engine (docs/metrics.md): a busy kernel shows about a core while
its idle peer shows about none, an allocation shows in memory, an OOM kill is marked, the CLI's
``session top --once --json`` agrees with the API, and a finished session keeps its summary
(``session info`` shows it too). A real Prometheus scrapes ``/metrics`` with the scrape token
and answers a PromQL query for a busy kernel's CPU series; without the token it is refused.

The manager's own agent samples every second (``--metrics-interval 1``). The test host is
shared (two cores, other test runs): a busy loop there gets what the scheduler gives it, so
"about a core" is checked as at least half of what a busy loop of the test itself gets just
before (a core on an idle host), far above the idle peer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import BASE_IMAGE, Server, start_server, stop_server
from tests.integration.prometheus import prometheus
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


@pytest.fixture(autouse=True)
def destroy_after(sampled: Server) -> Iterator[None]:
    """Each test's sessions go with it, even when it fails (the agent has two cores)."""
    yield
    c = sampled.client()
    for info in c.list_sessions():
        c.destroy_session(info.id)


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


def busy_share(seconds: float = 1.0) -> float:
    """The share of a core a busy loop gets on this host now (about 1 when it is idle)."""
    wall, cpu = time.monotonic(), time.process_time()
    while time.monotonic() - wall < seconds:
        pass
    return (time.process_time() - cpu) / (time.monotonic() - wall)


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

    core = 0.5 * min(1.0, busy_share())  # "about a core", as much as the host gives now
    background(sampled, sid, "main1", "sh -c 'while :; do :; done'")
    started, started_at = time.monotonic(), time.time()
    # both kernels sampled (a kernel's first rate needs two reads, and the two may start on
    # either side of a sampling round) and the busy one busy
    last = until(
        sampled, sid, lambda s: {"main1", "sub1"} <= s.keys() and s["main1"].cpu_cores > core, 20
    )
    took = time.monotonic() - started
    busy, idle = last["main1"], last["sub1"]
    assert busy.cpu_limit == 1 and busy.cpu_pct == pytest.approx(100 * busy.cpu_cores, abs=0.1)
    assert idle.cpu_cores < 0.05 and busy.cpu_cores > 5 * idle.cpu_cores, last
    assert busy.mem_limit == 512 * MiB and busy.pids >= 2
    print(f"busy kernel shown after {took:.1f} s at {busy.cpu_cores:.2f} cores (> {core:.2f})")
    # within two intervals (the first may hold the loop's start only), give or take a second
    # for a sampling round that a loaded host ran late
    (main1,) = [k.samples for k in c.session_metrics(sid).kernels if k.hostname == "main1"]
    first_busy = next(x.t for x in main1 if x.cpu_cores > core)
    assert first_busy - started_at <= 2 * INTERVAL + 1.0, (first_busy - started_at, main1)

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
    info = c.get_session(sid)
    assert info.usage == summary and all(x.usage is None for x in c.list_sessions(all=True))
    r = sampled.cli("session", "info", sid)
    assert "what it used:" in r.stdout and "PEAK MEM" in r.stdout, r.stdout


def test_prometheus_scrapes_a_busy_kernel(sampled: Server, tmp_path: Path) -> None:
    """Debian's Prometheus scrapes /metrics with the scrape token (a job without it gets 401)
    and answers a PromQL query with the busy kernel's CPU series."""
    c = sampled.client()
    req = SessionCreate(name="scraped", image=BASE_IMAGE, resources=Resources(cpu=1, mem="256m"))
    sid = c.create_session(req).id
    assert c.wait_session(sid, timeout=120).status == "RUNNING"
    background(sampled, sid, "main1", "sh -c 'while :; do :; done'")
    token = tmp_path / "token"
    token.write_text(SCRAPE_TOKEN + "\n")
    token.chmod(0o600)
    target = sampled.url.split("://", 1)[1]
    with prometheus(tmp_path, target, token) as prom:
        promql = 'troupe_kernel_cpu_cores{job="troupe",session="scraped",kernel="main1"}'
        deadline = time.monotonic() + 60
        while True:
            found = prom.query(promql)
            if found and float(found[0]["value"][1]) > 0.01:  # busy: as much as the host gives
                break
            assert time.monotonic() < deadline, (found, prom.targets())
            time.sleep(0.5)
        assert found[0]["metric"]["owner"] == "admin", found
        # the series the scrapes stored: one value per scrape (every second)
        while len(series := prom.query(f"{promql}[30s]")[0]["values"]) < 3:
            assert time.monotonic() < deadline, series
            time.sleep(0.5)
        assert all(float(v) >= 0 for _, v in series), series
        targets = prom.targets()
        assert targets["troupe"]["health"] == "up", targets["troupe"]
        refused = targets["troupe-without-token"]
        assert refused["health"] == "down" and "401" in refused["lastError"], refused
