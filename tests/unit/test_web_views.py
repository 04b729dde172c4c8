"""The web UI's view logic: pure functions of the API's wire models."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from troupe.api.models import AgentInfo, KernelInfo, Resources, SessionInfo
from troupe.manager.web import views

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def agent(name: str, cpu_free: float, mem_free: int, gpu_free: int = 0, **kw: Any) -> AgentInfo:
    base: dict[str, Any] = {
        "id": name, "name": name, "group": "default", "status": "ALIVE", "cpu": 8,
        "mem": 16 * 1024**3, "gpu": 2, "cpu_free": cpu_free, "mem_free": mem_free,
        "gpu_free": gpu_free, "kernels": 0,
    }  # fmt: skip
    return AgentInfo.model_validate({**base, **kw})


def kernel(host: str, status: str = "RUNNING", **kw: Any) -> KernelInfo:
    role, idx = ("main", 1) if host == "main1" else ("sub", int(host[3:]))
    return KernelInfo(id=host, hostname=host, role=role, idx=idx, rank=idx - 1,
                      status=status, **kw)  # fmt: skip


def session(status: str, kernels: list[KernelInfo], **kw: Any) -> SessionInfo:
    base: dict[str, Any] = {
        "id": "s1", "name": "s", "owner": "admin", "status": status, "type": "interactive",
        "image": "troupe/base:0.1.0", "cluster_size": len(kernels), "cluster_mode": "single-node",
        "resources": {"cpu": 0.5, "mem": 512 * 1024**2}, "mounts": [], "dist_env": "default",
        "group": "default", "priority": 0, "uid": 1000, "gid": 1000, "isolated_network": False,
        "created_at": T0, "kernels": kernels,
    }  # fmt: skip
    return SessionInfo.model_validate({**base, **kw})


def test_largest_now_single_and_multi_node() -> None:
    g = 1024**3
    agents = [agent("a", 3, 8 * g), agent("b", 2.5, 1 * g), agent("c", 8, 8 * g, status="LOST")]
    r = Resources(cpu=0.5, mem=512 * 1024**2)
    assert views.largest_now(agents, r, "single-node") == 6  # a: 3 cores / 0.5
    assert views.largest_now(agents, r, "multi-node") == 6 + 2  # b: memory allows 2
    assert views.largest_now(agents, Resources(cpu=1, mem=g, gpu=1), "single-node") == 0
    assert (
        views.largest_now([agent("g", 8, 8 * g, gpu_free=2)], Resources(gpu=1), "multi-node") == 2
    )
    assert views.largest_now(agents, r, "single-node", group="other") == 0


def test_totals_and_words() -> None:
    r = Resources(cpu=0.5, mem=512 * 1024**2, gpu=1)
    assert views.totals_text(3, r).startswith(
        "3 \u00d7 0.5 CPU = 1.5 CPU; 3 \u00d7 512 MiB = 1.5 GiB"
    )
    assert views.totals_text(3, r).endswith("3 \u00d7 1 GPU = 3 GPU")
    assert views.resources_text(r) == "0.5 CPU \u00b7 512 MiB \u00b7 1 GPU"
    assert views.mode_text("multi-node", 4) == "multi-node \u00d7 4"
    assert views.age_text(T0, T0 + timedelta(seconds=3725)) == "1 h 2 min"
    assert views.tone("ERROR") == "bad" and views.changing("PENDING")
    assert views.percent(3, 4) == 75.0 and views.percent(1, 0) == 0.0


def test_kernels_running_while_preparing() -> None:
    s = session("PREPARING", [kernel("main1"), kernel("sub1", "PENDING"), kernel("sub2")])
    assert views.kernels_running(s) == "2/3 kernels running"
    assert views.kernels_running(session("RUNNING", [kernel("main1")])) is None


def test_pending_lines_merge_kernels_with_the_same_reason() -> None:
    why = ["agent local: cpu: needs 3 cores, 1 free"]
    info = {"pending": {"main1": why, "sub1": why}}
    assert views.pending_lines(info) == ["all kernels: agent local: cpu: needs 3 cores, 1 free"]
    assert views.pending_lines({}) == []


def test_failure_names_the_first_failing_kernel() -> None:
    info = {"reason": "kernel exited", "kernel": "sub2", "exit_code": 137, "oom_killed": True,
            "last_logs": ["killed\n"]}  # fmt: skip
    s = session("ERROR", [kernel("main1", "EXITED"), kernel("sub2", "EXITED")], status_info=info)
    f = views.failure(s)
    assert f is not None and f.kernel == "sub2" and f.last_logs == ["killed"]
    assert f.summary == "kernel sub2 ran out of memory (OOM killed)"
    batch = session("TERMINATED", [kernel("sub1", "TERMINATED"), kernel("main1", "TERMINATED")],
                    exit_code=3, type="batch")  # fmt: skip
    f = views.failure(batch)
    assert f is not None and f.summary == "kernel main1 exited with code 3"
    assert views.failure(session("TERMINATED", [kernel("main1")], exit_code=0)) is None


def test_kernels_in_order_by_rank_not_interleaved_by_role_index() -> None:
    """Roles worker x2 then ps x1 (docs/contract.md, 'Roles'): ranks main1=0, worker1=1,
    worker2=2, ps1=3; ordering by index put ps1 between worker1 and worker2."""
    ks = [
        KernelInfo(id=h, hostname=h, role=h[:-1], idx=int(h[-1]), rank=r, status="RUNNING")
        for h, r in [("ps1", 3), ("worker2", 2), ("main1", 0), ("worker1", 1)]
    ]
    names = [k.hostname for k in views.kernels_in_order(ks)]
    assert names == ["main1", "worker1", "worker2", "ps1"]


def test_startup_bars_name_the_slowest_kernel() -> None:
    ks = [
        kernel("sub1", phases={"created": 1.0, "started": 2.0, "ready": 4.0}),
        kernel("main1", phases={"created": 1.0, "started": 1.5, "ready": 2.0}),
    ]
    bars, slowest = views.startup_bars(ks)
    assert [b.hostname for b in bars] == ["main1", "sub1"] and slowest == "sub1"
    assert bars[1].left == 25.0 and bars[1].width == 75.0
    assert views.startup_bars([kernel("main1")]) == ([views.Bar("main1", {}, 0.0, 0.0)], None)


def test_agent_meters_say_allocated_of_total() -> None:
    g = 1024**3
    cpu, mem, gpu = views.agent_meters(agent("a", 6, 12 * g, gpu_free=2))
    assert (cpu.label, cpu.percent, cpu.text) == ("CPU", 25.0, "2 / 8 cores")
    assert (mem.label, mem.percent, mem.text) == ("Memory", 25.0, "4 GiB / 16 GiB")
    assert (gpu.label, gpu.percent, gpu.text) == ("GPU", 0.0, "0 / 2 GPUs")


def test_a_lost_agents_meters_are_unknown_not_full() -> None:
    # the API reports 0 free for a LOST agent (nothing can be placed there): not its use
    cpu, mem, gpu = views.agent_meters(agent("a", 0, 0, status="LOST"))
    assert [m.percent for m in (cpu, mem, gpu)] == [None, None, None]
    assert cpu.text == "unknown while lost · 8 cores"
    assert mem.text == "unknown while lost · 16 GiB"
    assert gpu.text == "unknown while lost · 2 GPUs"
    # with nothing offered there is nothing to be unknown
    none = views.agent_meters(agent("a", 0, 0, status="LOST", gpu=0))[2]
    assert (none.percent, none.text) == (0.0, "0 / 0 GPUs")
