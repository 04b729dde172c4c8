"""GPUs without a GPU: nvidia-smi's output parsed (a real H100's among it), ``--gpus``, the
stand-in nvidia-smi run as the agent runs it, devices per kernel and the container's request."""

from __future__ import annotations

from pathlib import Path

import pytest

from troupe.agent import gpus
from troupe.agent.kernel import container_config
from troupe.api.agent import LABEL_GPUS, AgentCapacity, KernelSpec
from troupe.api.models import GpuInfo
from troupe.cluster import build_cluster
from troupe.manager.kernels import GPUS_VAR, SessionPlan, kernel_specs
from troupe.manager.scheduler import AgentState, Request, assign_gpus
from troupe.manager.scheduler_backlog import schedule

DATA = Path(__file__).parent / "data"
MiB = 1024**2
TWO = (
    "0, GPU-00000000-0000-0000-0000-000000000000, NVIDIA Stand-in, 16384\n"
    "1, GPU-11111111-1111-1111-1111-111111111111, NVIDIA Stand-in, 16384\n"
)


def standin(tmp_path: Path, body: str) -> str:
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_parses_a_real_h100() -> None:
    # nvidia-smi 580.159.04 on an H100 machine, asked exactly what the agent asks
    (gpu,) = gpus.parse((DATA / "nvidia-smi-h100.csv").read_text())
    assert gpu == GpuInfo(
        index=0,
        uuid="GPU-78e7bc87-987f-c2b5-521a-53c4b01a0599",
        model="NVIDIA H100 80GB HBM3",
        memory=81559 * MiB,
    )


def test_parses_a_real_h200() -> None:
    # nvidia-smi 580.159.04 on an H200 machine, asked exactly what the agent asks
    (gpu,) = gpus.parse((DATA / "nvidia-smi-h200.csv").read_text())
    assert gpu == GpuInfo(
        index=0,
        uuid="GPU-32687653-874c-a679-2ac6-a1ff5fb48262",
        model="NVIDIA H200",
        memory=143771 * MiB,
    )


def test_parses_several_in_index_order_and_unknown_memory() -> None:
    text = "1, GPU-b, Model B, [N/A]\n\n0, GPU-a, Model, with comma, 1024\n"
    got = gpus.parse(text)
    assert [(g.index, g.uuid, g.model, g.memory) for g in got] == [
        (0, "GPU-a", "Model, with comma", 1024 * MiB),
        (1, "GPU-b", "Model B", 0),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "No devices were found",
        "x, GPU-a, M, 1",
        "0, GPU a b, M, 1",
        "0, GPU-a, M, 1\n0, GPU-b, M, 1",
        "0, GPU-a, M, 1\n1, GPU-a, M, 1",
    ],
)
def test_refuses_what_is_not_the_query(text: str) -> None:
    with pytest.raises(ValueError):
        gpus.parse(text)


def test_choice_and_selection() -> None:
    found = gpus.parse(TWO)
    assert gpus.select(found, gpus.Choice.parse("auto")) == (found, "")
    assert gpus.select(found, gpus.Choice.parse("none")) == ([], "not offered (--gpus none)")
    assert gpus.select(found, gpus.Choice.parse("1")) == ([found[1]], "")
    assert gpus.select(found, gpus.Choice.parse("1,0")) == (found, "")
    offered, why = gpus.select(found, gpus.Choice.parse("0,2"))
    assert offered == [] and "no GPU 2" in why and "nvidia-smi: 0,1" in why
    assert gpus.select([], gpus.Choice.parse("auto")) == ([], "nvidia-smi reports no GPUs")
    for bad in ("some", "0,0", "-1", "0,,1"):
        with pytest.raises(ValueError):
            gpus.Choice.parse(bad)
    assert str(gpus.Choice.parse(" 0,2 ")) == "0,2"


async def test_query_runs_the_given_nvidia_smi(tmp_path: Path) -> None:
    path = standin(tmp_path, f'[ "$1" = "{gpus.QUERY[0]}" ] || exit 9\ncat <<EOF\n{TWO}EOF\n')
    found, why = await gpus.query(path)
    assert why == "" and [g.uuid for g in found] == [
        "GPU-00000000-0000-0000-0000-000000000000",
        "GPU-11111111-1111-1111-1111-111111111111",
    ]


async def test_query_says_why_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert await gpus.query() == ([], "nvidia-smi not found on PATH")
    failing = standin(
        tmp_path, "echo 'NVIDIA-SMI has failed because it could not communicate'\nexit 9\n"
    )
    found, why = await gpus.query(failing)
    assert found == [] and "exit 9" in why and "could not communicate" in why
    slow = standin(tmp_path, "exec /bin/sleep 30\n")
    found, why = await gpus.query(slow, timeout=0.3)
    assert found == [] and "did not answer" in why
    found, why = await gpus.query(str(tmp_path / "missing"))
    assert found == [] and "missing" in why


async def test_discover_with_none_asks_nothing() -> None:
    offered, why = await gpus.discover(None, gpus.Choice.parse("none"))  # type: ignore[arg-type]
    assert offered == [] and "--gpus none" in why


def test_engine_refusal_names_the_toolkit() -> None:
    why = gpus.why_refused('could not select device driver "nvidia" with capabilities: [[gpu]]')
    assert "nvidia-container-runtime-hook" in why and "restart the daemon" in why
    assert gpus.probe_config("img", ["GPU-a"])["HostConfig"]["DeviceRequests"] == [
        {"Driver": "nvidia", "DeviceIDs": ["GPU-a"], "Capabilities": [["gpu"]]}
    ]


def test_capacity_refuses_the_same_gpu_twice() -> None:
    g = GpuInfo(index=0, uuid="GPU-a")
    with pytest.raises(ValueError):
        AgentCapacity(name="a", cpu=1, mem=1, gpus=[g, g])


def spec(gpu_ids: list[str]) -> KernelSpec:
    return KernelSpec(
        session_id="s",
        kernel_id="k",
        owner="o",
        hostname="main1",
        image="img",
        network="net",
        env={},
        cpu=1,
        mem=2**30,
        gpus=gpu_ids,
    )


def test_container_requests_exactly_its_gpus() -> None:
    cfg = container_config(spec(["GPU-a", "GPU-b"]), "/runner", "/folders")
    assert cfg["HostConfig"]["DeviceRequests"] == [
        {"Driver": "nvidia", "DeviceIDs": ["GPU-a", "GPU-b"], "Capabilities": [["gpu"]]}
    ]
    assert cfg["Labels"][LABEL_GPUS] == "GPU-a,GPU-b"
    plain = container_config(spec([]), "/runner", "/folders")
    assert "DeviceRequests" not in plain["HostConfig"] and LABEL_GPUS not in plain["Labels"]
    with pytest.raises(ValueError):
        spec(["GPU a;rm"])


def test_kernels_get_their_devices_count_and_resource_file() -> None:
    contracts = build_cluster("s" * 36, ["s" * 36, "k1"], "single-node")
    plan = SessionPlan(
        session_id="s" * 36,
        owner="u",
        image="img",
        network="net",
        batch=False,
        startup_command=None,
        cpu=2,
        mem=2**30,
        uid=1000,
        gid=1000,
        ssh_private_key="PRIV",
        ssh_public_key="PUB",
        mounts={},
        gpu=2,
    )
    keys = {c.hostname: ("p", "ssh-ed25519 AAAA") for c in contracts}
    got = kernel_specs(
        plan, contracts, keys, {"main1": ["GPU-a", "GPU-b"], "sub1": ["GPU-c", "GPU-d"]}
    )
    assert [s.gpus for s in got] == [["GPU-a", "GPU-b"], ["GPU-c", "GPU-d"]]
    assert all(s.env[GPUS_VAR] == "2" and "LOCAL_RANK" not in s.env for s in got)
    (res,) = [f for f in got[0].files if f.path == "/home/config/resource.txt"]
    assert res.content == "cpu=2\nmem=1073741824\ncuda.device=2\n"


def test_assign_gives_distinct_devices_lowest_first() -> None:
    free = {"a": ["GPU-0", "GPU-1", "GPU-2"], "b": ["GPU-9"]}
    assert assign_gpus(free, ["a", "b", "a"], 1) == [["GPU-0"], ["GPU-9"], ["GPU-1"]]
    assert free == {"a": ["GPU-2"], "b": []}
    assert assign_gpus(free, ["a"], 0) == [[]]
    with pytest.raises(ValueError):
        assign_gpus(free, ["b"], 1)


def test_scheduler_counts_whole_gpus_and_says_why() -> None:
    agent = AgentState("a", "default", cpu=8, mem=2**34, gpu=2, gpu_used=1, gpu_free_ids=("G1",))
    one = Request("s1", "default", "single-node", size=1, cpu=1, mem=2**20, gpu=1, order=1)
    two = Request("s2", "default", "single-node", size=1, cpu=1, mem=2**20, gpu=1, order=2)
    d = schedule([one, two], [agent])
    assert d.placements == {"s1": ["a"]}
    assert d.waiting["s2"] == ["agent a: gpu: needs 1 GPU, 0 GPUs free"]


def test_agent_list_shows_free_total_and_models() -> None:
    from troupe.api.models import AgentInfo
    from troupe.client.cli.agents import gpu_cell

    h100 = "NVIDIA H100 80GB HBM3"
    base = {"id": "a", "name": "a", "group": "default", "status": "ALIVE", "cpu": 1, "mem": 1}
    base |= {"cpu_free": 1, "mem_free": 1, "kernels": 0}
    two = [GpuInfo(index=i, uuid=f"GPU-{i}", model=h100) for i in range(2)]
    assert gpu_cell(AgentInfo(**base, gpu=2, gpu_free=1, gpus=two)) == f"1/2 2x {h100}"
    mixed = [two[0], GpuInfo(index=1, uuid="GPU-x", model="Other")]
    assert gpu_cell(AgentInfo(**base, gpu=2, gpu_free=2, gpus=mixed)) == f"2/2 {h100}, Other"
    assert gpu_cell(AgentInfo(**base, gpu=0, gpu_free=0, gpu_reason="why")) == "0"
