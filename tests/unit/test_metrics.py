"""Utilisation without a Docker engine (docs/metrics.md): cgroup v1 and v2 files (a real v1
container's among them) parsed and located, rates from two readings, the stand-in nvidia-smi's
utilisation answer, and the manager's history: its bounds, its 5-minute means, its summary."""

from __future__ import annotations

import math
import shutil
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from troupe.agent import cgroup
from troupe.agent import gpus as gpu_discovery
from troupe.agent import metrics as sampler
from troupe.api.errors import Invalid
from troupe.api.metrics import GpuSample, HostSample, KernelSample, parse_since
from troupe.manager import metrics as history

DATA = Path(__file__).parent / "data" / "cgroup"
MiB = 1024**2
UUID0 = "GPU-00000000-0000-4000-8000-000000000000"
UUID1 = "GPU-11111111-1111-4111-8111-111111111111"


# -- where a container's cgroups are -------------------------------------------------------
def test_locates_v1_controllers_and_the_v2_directory() -> None:
    mounts = cgroup.parse_mountinfo((DATA / "mountinfo-v1").read_text())
    assert mounts.v1["memory"] == (Path("/sys/fs/cgroup/memory"), "/")
    assert mounts.v2 == (Path("/sys/fs/cgroup/unified"), "/")
    place = cgroup.place_of(mounts, 4242, (DATA / "proc/4242/cgroup").read_text())
    assert place.v1["cpuacct"] == Path("/sys/fs/cgroup/cpuacct/docker/CONTAINER")
    assert place.v1["pids"] == Path("/sys/fs/cgroup/pids/docker/CONTAINER")
    assert place.v2 == Path("/sys/fs/cgroup/unified/docker/CONTAINER")


def test_locates_a_v2_systemd_scope_and_a_namespaced_root() -> None:
    mounts = cgroup.parse_mountinfo((DATA / "mountinfo-v2").read_text())
    assert mounts.v1 == {} and mounts.v2 == (Path("/sys/fs/cgroup"), "/")
    place = cgroup.place_of(mounts, 7, "0::/system.slice/docker-abc.scope\n")
    assert place.v2 == Path("/sys/fs/cgroup/system.slice/docker-abc.scope") and place.v1 == {}
    # an agent in a container whose cgroup namespace root is /agent sees paths below it
    nested = cgroup.Mounts(v2=(Path("/sys/fs/cgroup"), "/agent"))
    assert cgroup.place_of(nested, 7, "0::/agent/docker/x\n").v2 == Path("/sys/fs/cgroup/docker/x")


def v1_place(tmp_path: Path) -> cgroup.Place:
    return cgroup.Place(
        4242, {c: DATA / "v1" / c for c in ("cpu", "cpuacct", "memory", "blkio", "pids")}
    )


def test_reads_a_real_v1_container(tmp_path: Path) -> None:
    place = v1_place(tmp_path)
    # docker run --cpus 1.5 -m 256m
    assert cgroup.limits(place) == (1.5, 256 * MiB)
    c = cgroup.read(place, proc=DATA / "proc")
    assert c.cpu_ns == 54169000
    # usage_in_bytes less total_inactive_file, as docker stats counts it
    assert c.mem_bytes == 22319104 - 21094400
    assert (c.blk_read, c.blk_write) == (1048576 + 4096, 20971520)
    assert c.pids == 2 and c.oom_kills == 0
    assert (c.net_rx, c.net_tx) == (736 + 1000, 1234 + 66)  # not loopback


def test_reads_v2() -> None:
    place = cgroup.Place(4242, {}, DATA / "v2")
    assert cgroup.limits(place) == (1.5, 256 * MiB)
    c = cgroup.read(place, proc=DATA / "proc")
    assert c.cpu_ns == 2_500_000_000
    assert c.mem_bytes == 209715200 - 8388608
    assert c.oom_kills == 1
    assert (c.blk_read, c.blk_write) == (4196, 8192)
    assert c.pids == 7


def test_no_limits_and_odd_files() -> None:
    assert cgroup.limit_v1("9223372036854771712\n") is None
    assert cgroup.limit_v2("max\n") is None
    assert cgroup.cpu_limit_v1("-1", "100000") is None
    assert cgroup.cpu_limit_v2("max 100000\n") is None
    assert cgroup.cpu_limit_v2("50000 100000\n") == 0.5
    assert cgroup.blkio_v1("Total 0\n") == (0, 0)
    assert cgroup.io_v2("") == (0, 0)
    assert cgroup.keyed("a 1\nb x\nc -2\n") == {"a": 1, "c": -2}


def test_a_cgroup_that_vanished_is_gone(tmp_path: Path) -> None:
    shutil.copytree(DATA, tmp_path / "data")
    place = cgroup.Place(4242, {}, tmp_path / "data" / "v2")
    shutil.rmtree(tmp_path / "data" / "v2")
    with pytest.raises(cgroup.Gone):
        cgroup.read(place, proc=DATA / "proc")
    with pytest.raises(cgroup.Gone):
        cgroup.locate(cgroup.Mounts(), 999_999_999)
    # the sampler leaves such a kernel out of its round
    k = tracked(place)
    assert sampler._read_all({"c1": k}) == {}


# -- rates -----------------------------------------------------------------------------------
def tracked(place: cgroup.Place, gpus: tuple[str, ...] = ()) -> sampler.Tracked:
    return sampler.Tracked("s1", "k1", "main1", gpus, place, 1.0, 256 * MiB)


def counters(**kw: int) -> cgroup.Counters:
    base = dict(cpu_ns=0, mem_bytes=0, oom_kills=0, blk_read=0, blk_write=0, pids=1)
    return cgroup.Counters(**{**base, "net_rx": 0, "net_tx": 0, **kw})


def test_rates_over_the_interval() -> None:
    k = tracked(cgroup.Place(1), gpus=(UUID1,))
    first = counters(cpu_ns=10**9)
    assert sampler.rates(k, first, 100.0, 1.0, {}) is None  # a first reading gives no rate
    k.last, k.last_at = first, 100.0
    now = counters(cpu_ns=3 * 10**9, mem_bytes=5, net_rx=4000, blk_write=2000, oom_kills=1)
    g = GpuSample(index=1, uuid=UUID1, util_pct=50.0)
    s = sampler.rates(k, now, 102.0, 7.0, {UUID1: g, UUID0: g.model_copy(update={"uuid": UUID0})})
    assert s is not None
    assert (s.t, s.cpu_cores, s.cpu_pct, s.mem_bytes) == (7.0, 1.0, 100.0, 5)
    assert (s.net_rx_bps, s.blk_write_bps, s.oom_killed) == (2000.0, 1000.0, True)
    assert s.gpus == [g]  # only the kernel's own GPUs


# -- GPUs: the stand-in nvidia-smi answers the utilisation query -----------------------------
STANDIN = f"""#!/bin/sh
case "$*" in
  *utilization.gpu*) printf '0, {UUID0}, 87, 3072, 16384\\n1, {UUID1}, [N/A], [N/A], 16384\\n' ;;
  *) printf '0, {UUID0}, NVIDIA Stand-in, 16384\\n1, {UUID1}, NVIDIA Stand-in, 16384\\n' ;;
esac
"""


def standin(tmp_path: Path) -> str:
    path = tmp_path / "nvidia-smi"
    path.write_text(STANDIN)
    path.chmod(0o755)
    return str(path)


async def test_gpu_figures_from_the_standin_nvidia_smi(tmp_path: Path) -> None:
    smi = standin(tmp_path)
    found, reason = await gpu_discovery.query(smi)  # discovery's query still answered
    assert reason == "" and [g.uuid for g in found] == [UUID0, UUID1]
    text, reason = await gpu_discovery.run_smi(sampler.UTIL_QUERY, smi)
    assert reason == ""
    assert sampler.parse_gpu_usage(text) == [
        GpuSample(index=0, uuid=UUID0, util_pct=87.0, mem_bytes=3072 * MiB, mem_total=16 * 1024**3),
        GpuSample(index=1, uuid=UUID1, util_pct=None, mem_bytes=None, mem_total=16 * 1024**3),
    ]
    assert sampler.parse_gpu_usage("garbage\n\n0, x\n") == []


def test_parses_a_real_h200_idle_and_busy() -> None:
    # nvidia-smi 580.159.04 on an H200 machine, asked exactly UTIL_QUERY: idle, then during a
    # loop of 8192 x 8192 matrix products (torch, CUDA)
    real = DATA.parent
    uuid = "GPU-32687653-874c-a679-2ac6-a1ff5fb48262"
    total = 143771 * MiB
    idle = sampler.parse_gpu_usage((real / "nvidia-smi-h200-util-idle.csv").read_text())
    assert idle == [GpuSample(index=0, uuid=uuid, util_pct=0.0, mem_bytes=0, mem_total=total)]
    busy = sampler.parse_gpu_usage((real / "nvidia-smi-h200-util-busy.csv").read_text())
    assert busy == 2 * [
        GpuSample(index=0, uuid=uuid, util_pct=100.0, mem_bytes=1395 * MiB, mem_total=total)
    ]


# -- since -------------------------------------------------------------------------------------
def test_since_is_epoch_seconds_or_rfc3339() -> None:
    assert parse_since(None) is None
    assert parse_since("100.5", now=200) == 100.5
    assert parse_since("1970-01-01T00:01:40Z", now=200) == 100
    assert parse_since("1970-01-01T01:01:40+01:00", now=200) == 100
    for bad, rule in (("soon", "RFC 3339"), ("300", "future"), ("-1", "after 1970"), ("nan", "")):
        with pytest.raises(Invalid) as e:
            parse_since(bad, now=200)
        assert e.value.field == "since" and rule in e.value.message


# -- the manager's history -----------------------------------------------------------------------
def ksample(t: float, cores: float = 1.0, mem: int = MiB, **kw: object) -> KernelSample:
    return KernelSample.model_validate({"t": t, "cpu_cores": cores, "mem_bytes": mem, **kw})


T0 = 1_800_000_000.0  # a multiple of 300: buckets start with the samples


def test_full_resolution_for_an_hour_then_five_minute_means() -> None:
    h = history.History()
    for i in range(1440):  # two hours every 5 s
        h.add_kernel("s", "main1", 5.0, ksample(T0 + 5 * i, cores=float(i // 720), cpu_limit=1))
    k = h.kernels[("s", "main1")]
    assert len(k.series.full) == 720 and len(k.series.coarse) == 23
    samples = h.kernel("s", "main1", None)
    assert len(samples) == 12 + 720  # the first hour as 12 means, then every sample
    means = samples[:12]
    assert [m.t for m in means] == [T0 + 300 * i + 147.5 for i in range(12)]
    assert all(m.cpu_cores == 0 and m.cpu_limit == 1 for m in means)
    assert samples[12].t == T0 + 3600 and samples[-1].t == T0 + 5 * 1439
    assert all(s.cpu_cores == 1 for s in samples[12:])
    assert len(h.kernel("s", "main1", T0 + 7000)) == 39
    assert h.kernel("s", "other", None) == []


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0.1, 900), st.floats(0, 64), st.integers(0, 2**40), st.booleans()),
        min_size=1,
        max_size=400,
    ),
    st.sampled_from([1.0, 5.0, 30.0]),
)
def test_history_stays_bounded_and_keeps_peaks(
    steps: list[tuple[float, float, int, bool]], interval: float
) -> None:
    h = history.History()
    t = T0
    for gap, cores, mem, oom in steps:
        t += gap
        h.add_kernel("s", "k", interval, ksample(t, cores, mem, oom_killed=oom))
    series = h.kernels[("s", "k")].series
    assert len(series.full) <= math.ceil(3600 / interval)
    assert len(series.coarse) <= history.BUCKETS
    out = h.kernel("s", "k", None)
    times = [s.t for s in out]
    assert times == sorted(times) and len(set(times)) == len(times)
    assert out[-1].t == pytest.approx(t, abs=0.01)
    summary = h.finish("s", t)
    assert summary is not None
    assert summary.peak_mem_bytes == max(m for _, _, m, _ in steps)
    assert summary.oom_killed == any(o for *_, o in steps)
    assert 0 <= summary.mean_cpu_cores <= 64 + 1e-6
    assert h.kernels == {}
    h.add_kernel("s", "k", interval, ksample(t + 1))  # late samples of an ended session
    assert h.kernels == {}


def test_a_sample_seen_twice_counts_once() -> None:
    h = history.History()
    for _ in range(2):
        h.add_kernel("s", "k", 5.0, ksample(T0, 2.0))
    assert len(h.kernel("s", "k", None)) == 1


def test_summary_of_a_gpu_session() -> None:
    h = history.History()
    gpu = GpuSample(index=0, uuid=UUID0, util_pct=90.0, mem_bytes=MiB, mem_total=16 * MiB)
    for i in range(721):  # an hour every 5 s, one GPU
        h.add_kernel("s", "main1", 5.0, ksample(T0 + 5 * i, 2.0, (i + 1) * MiB, gpus=[gpu]))
        h.add_kernel("s", "sub1", 5.0, ksample(T0 + 5 * i, 1.0, MiB))
    assert h.kernel("s", "main1", T0 + 3590)[-1].gpus == [gpu]
    s = h.finish("s", T0 + 3600)
    assert s is not None
    assert s.gpu_hours == pytest.approx(1 + 5 / 3600)  # the first sample counts one interval
    assert s.mean_cpu_cores == pytest.approx(3.0)
    assert s.peak_mem_bytes == 721 * MiB
    assert s.kernels["sub1"].gpu_hours == 0
    assert h.finish("other", T0) is None


def test_agent_series() -> None:
    h = history.History()
    g = GpuSample(index=0, uuid=UUID0, util_pct=10.0, mem_bytes=0, mem_total=MiB)
    h.add_host("a", 5.0, HostSample(t=T0, cpu_cores=1.5, mem_bytes=MiB, kernels=2, gpus=[g]))
    h.add_host("a", 5.0, HostSample(t=T0 + 5, cpu_cores=0.5, mem_bytes=MiB, kernels=1, gpus=[g]))
    assert [(s.cpu_cores, s.kernels, s.gpus) for s in h.host("a", None)] == [
        (1.5, 2, [g]),
        (0.5, 1, [g]),
    ]
    assert h.host("b", None) == []
    h.prune(T0 + history.STALE_SECONDS + 10)
    assert h.hosts == {}


#: Bytes of history per kernel at the default 5 s interval, as docs/metrics.md states it.
PER_KERNEL = (720 + 288) * 12 * 4


def test_memory_for_1000_kernels_is_as_documented() -> None:
    h = history.History()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for n in range(100):
        h.add_kernel(f"s{n}", "main1", 5.0, ksample(T0))
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert h.nbytes() == 100 * PER_KERNEL
    # the rings are allocated whole at once: 100 kernels take their final size from the start;
    # with the objects around them, 1,000 kernels stay under the documented 55 MB
    assert used * 10 < 55_000_000, used
    doc = (Path(__file__).parents[2] / "docs" / "metrics.md").read_text()
    assert f"{PER_KERNEL:,} bytes" in doc and "at most 55 MB" in doc


# -- one sampler round, its engine and files stood in -----------------------------------------
class FakeContainer:
    async def show(self) -> dict[str, object]:
        return {"State": {"Pid": 4242}}


class FakeContainers:
    def container(self, container_id: str) -> FakeContainer:
        return FakeContainer()


class FakeDocker:
    """The two engine calls a round makes: the running troupe containers, an inspect."""

    def __init__(self) -> None:
        self.containers = FakeContainers()
        self.listed: list[dict[str, object]] = [
            {
                "Id": "c" * 64,
                "Labels": {
                    "troupe.session": "s1",
                    "troupe.kernel": "k1",
                    "troupe.hostname": "main1",
                    "troupe.gpus": UUID0,
                },
            }
        ]

    async def _query_json(self, path: str, params: dict[str, str]) -> list[dict[str, object]]:
        assert path == "containers/json" and "running" in params["filters"]
        return self.listed


async def test_a_round_samples_kernels_and_their_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from troupe.api.models import GpuInfo

    read = cgroup.read
    monkeypatch.setattr(cgroup, "locate", lambda mounts, pid: v1_place(tmp_path))
    monkeypatch.setattr(cgroup, "read", lambda place: read(place, proc=DATA / "proc"))
    offered = [GpuInfo(index=0, uuid=UUID0, model="Stand-in", memory=16 * 1024**3)]
    docker = FakeDocker()
    s = sampler.Sampler(docker, 5.0, offered, standin(tmp_path), mounts=cgroup.Mounts())  # type: ignore[arg-type]
    first = await s.sample()
    assert first.kernels == [] and first.host.kernels == 0  # a first reading gives no rate
    second = await s.sample()
    ((k, got),) = second.kernels
    assert (k.session_id, k.kernel_id, k.hostname) == ("s1", "k1", "main1")
    assert got.cpu_limit == 1.5 and got.mem_limit == 256 * MiB and got.cpu_cores == 0
    assert [g.uuid for g in got.gpus] == [UUID0] and got.gpus[0].util_pct == 87
    assert [g.uuid for g in second.host.gpus] == [UUID0]  # the offered GPUs only
    m = s.since(first.t)
    assert [x.hostname for x in m.kernels] == ["main1"] and len(m.host) == 1
    assert s.since(second.t).kernels == []
    docker.listed = []  # the kernel stopped: no longer tracked
    third = await s.sample()
    assert third.kernels == [] and s.tracked == {}


async def test_another_agents_kernels_are_not_sampled() -> None:
    """An engine shared by two agents: each samples the kernels it made (and the unlabelled)."""
    docker = FakeDocker()
    mine = {**docker.listed[0], "Id": "m" * 64}
    mine["Labels"] = {**mine["Labels"], "troupe.agent": "me"}  # type: ignore[dict-item]
    theirs = {**docker.listed[0], "Id": "t" * 64}
    theirs["Labels"] = {**theirs["Labels"], "troupe.agent": "them"}  # type: ignore[dict-item]
    docker.listed = [docker.listed[0], mine, theirs]
    s = sampler.Sampler(docker, 5.0, owner="me")  # type: ignore[arg-type]
    assert [c["Id"][0] for c in await s._running()] == ["c", "m"]
