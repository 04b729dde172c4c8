"""The metrics' way from an agent on another host to the manager (``GET /agent/v1/metrics``
through :class:`RemoteAgent`), and what ``troupe session top`` / ``agent top`` print of it."""

from __future__ import annotations

from typing import Any

import httpx

from troupe.agent.app import create_agent_app
from troupe.api.metrics import (
    AgentMetrics,
    AgentUsage,
    GpuSample,
    HostSample,
    KernelMetrics,
    KernelSample,
    KernelSamples,
    SessionMetrics,
    UsageSummary,
)
from troupe.client.cli import top
from troupe.manager.remote_agent import RemoteAgent

GPU = GpuSample(index=0, uuid="GPU-0", util_pct=87.0, mem_bytes=3 * 1024**3, mem_total=16 * 1024**3)


def sample(t: float, **kw: Any) -> KernelSample:
    base: dict[str, Any] = {"t": t, "cpu_cores": 0.5, "cpu_limit": 1.0, "cpu_pct": 50.0}
    return KernelSample.model_validate({**base, "mem_bytes": 1024**2, "mem_limit": 2**30, **kw})


class Backend:
    """What the agent's HTTP face asks of its DockerAgent, for metrics."""

    def __init__(self) -> None:
        self.asked: list[float | None] = []

    async def metrics(self, since: float | None = None) -> AgentMetrics:
        self.asked.append(since)
        samples = [s for s in (sample(10.5), sample(11.5)) if since is None or s.t > since]
        return AgentMetrics(
            interval=1.0,
            kernels=[
                KernelSamples(session_id="s1", kernel_id="k1", hostname="main1", samples=samples)
            ],
            host=[HostSample(t=s.t, cpu_cores=0.5, kernels=1) for s in samples],
        )


async def test_remote_agent_fetches_since() -> None:
    backend = Backend()
    app = create_agent_app(backend, "tok")  # type: ignore[arg-type]
    agent = RemoteAgent("a1", "http://agent.test:6011", "tok")
    agent._http = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://agent.test:6011/agent/v1",
        headers={"Authorization": "Bearer tok"},
    )
    try:
        m = await agent.metrics()
        assert [s.t for s in m.kernels[0].samples] == [10.5, 11.5] and m.interval == 1.0
        m = await agent.metrics(10.5)
        assert [s.t for s in m.kernels[0].samples] == [11.5] and len(m.host) == 1
        assert backend.asked == [None, 10.5]
    finally:
        await agent.close()


def test_session_top_shows_the_newest_sample_and_json_records() -> None:
    m = SessionMetrics(
        id="s1",
        name="job",
        status="RUNNING",
        kernels=[
            KernelMetrics(hostname="main1", samples=[sample(1), sample(2, gpus=[GPU])]),
            KernelMetrics(hostname="sub1", samples=[]),
        ],
    )
    lines = top.session_view(m)
    assert lines[0] == "session job (RUNNING)"
    assert lines[1].split()[:3] == ["KERNEL", "CPU", "CPU"]
    main1 = next(line for line in lines if line.startswith("main1"))
    assert "0.50/1" in main1 and "50.0%" in main1 and "87% 3g/16g" in main1
    assert next(line for line in lines if line.startswith("sub1")).split()[1] == "-"
    (rec,) = top.session_records(m)
    assert rec == {"hostname": "main1", **sample(2, gpus=[GPU]).model_dump(mode="json")}


def test_a_finished_session_shows_its_summary() -> None:
    u = UsageSummary(peak_mem_bytes=2**30, mean_cpu_cores=1.5, seconds=60, kernels={})
    u.kernels["main1"] = u.model_copy(update={"kernels": {}})
    m = SessionMetrics(id="s1", name="job", status="TERMINATED", summary=u)
    lines = top.session_view(m)
    assert "TERMINATED" in lines[0] and "PEAK MEM" in lines[1]
    assert any(line.startswith("(session)") and "1g" in line for line in lines)


def test_agent_top() -> None:
    a = AgentUsage(
        name="local",
        cpu=16,
        mem=64 * 2**30,
        gpu=1,
        samples=[HostSample(t=5, cpu_cores=3.25, mem_bytes=2**30, kernels=4, gpus=[GPU])],
    )
    idle = AgentUsage(name="spare", cpu=8, mem=2**30, gpu=0)
    lines = top.agent_view([a, idle])
    assert "3.25/16" in lines[2] and "1g/64g" in lines[2] and "87%" in lines[2]
    assert lines[3].startswith("spare")
    (rec,) = top.agent_records([a, idle])
    assert rec["name"] == "local" and rec["cpu"] == 16 and rec["cpu_cores"] == 3.25
