"""Utilisation of this engine's kernels, sampled every interval (docs/metrics.md).

Each round lists the running troupe containers (one engine call), locates the cgroups of each
new one once (one inspect for its first process), reads every kernel's counters from its cgroup
files and network namespace (:mod:`troupe.agent.cgroup`, in a thread), turns them into rates
over the interval, and asks ``nvidia-smi`` once for every GPU of the host (only where GPUs are
offered). A kernel that stopped mid-read is skipped. The last :data:`KEEP_SECONDS` of rounds are
kept for the manager, which fetches them with ``since`` (:meth:`Sampler.since`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiodocker
from aiodocker.exceptions import DockerError

from troupe.agent import cgroup
from troupe.agent import gpus as gpu_discovery
from troupe.agent.engine import list_containers
from troupe.agent.kernel import made_by
from troupe.api.agent import LABEL_GPUS, LABEL_HOSTNAME, LABEL_KERNEL, LABEL_SESSION
from troupe.api.metrics import AgentMetrics, GpuSample, HostSample, KernelSample, KernelSamples
from troupe.api.models import GpuInfo

log = logging.getLogger(__name__)

#: Default seconds between two rounds.
INTERVAL = 5.0
#: Rounds are kept this long for the manager to fetch (it asks every few seconds).
KEEP_SECONDS = 300.0
#: What nvidia-smi is asked each round: one CSV line per GPU, memory in MiB.
UTIL_QUERY = [
    "--query-gpu=index,uuid,utilization.gpu,memory.used,memory.total",
    "--format=csv,noheader,nounits",
]
SMI_TIMEOUT = 10.0
MiB = 1024**2


def _number(text: str) -> float | None:
    """A figure of nvidia-smi's CSV; None for ``[N/A]``, ``[Not Supported]`` and the like."""
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def parse_gpu_usage(text: str) -> list[GpuSample]:
    """GPUs of ``nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used,memory.total
    --format=csv,noheader,nounits``; lines that are not that are skipped."""
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5 or not parts[0].isdigit() or not parts[1]:
            continue
        used, total = _number(parts[3]), _number(parts[4])
        out.append(
            GpuSample(
                index=int(parts[0]),
                uuid=parts[1],
                util_pct=_number(parts[2]),
                mem_bytes=int(used * MiB) if used is not None else None,
                mem_total=int(total * MiB) if total is not None else None,
            )
        )
    return out


@dataclass
class Tracked:
    """A running kernel being sampled: who it is, where its counters are, the last reading."""

    session_id: str
    kernel_id: str
    hostname: str
    gpus: tuple[str, ...]
    place: cgroup.Place
    cpu_limit: float | None
    mem_limit: int | None
    last: cgroup.Counters | None = None
    last_at: float = 0.0


def rates(
    k: Tracked, now: cgroup.Counters, at: float, t: float, gpus: dict[str, GpuSample]
) -> KernelSample | None:
    """The kernel's sample from its previous reading to ``now`` (None for a first reading)."""
    prev, dt = k.last, at - k.last_at
    if prev is None or dt <= 0:
        return None

    def rate(a: int, b: int) -> float:
        return max(0, b - a) / dt

    cores = rate(prev.cpu_ns, now.cpu_ns) / 1e9
    return KernelSample(
        t=t,
        cpu_cores=round(cores, 4),
        cpu_limit=k.cpu_limit,
        cpu_pct=round(100 * cores / k.cpu_limit, 2) if k.cpu_limit else None,
        mem_bytes=now.mem_bytes,
        mem_limit=k.mem_limit,
        oom_killed=now.oom_kills > 0,
        net_rx_bps=round(rate(prev.net_rx, now.net_rx), 1),
        net_tx_bps=round(rate(prev.net_tx, now.net_tx), 1),
        blk_read_bps=round(rate(prev.blk_read, now.blk_read), 1),
        blk_write_bps=round(rate(prev.blk_write, now.blk_write), 1),
        pids=now.pids,
        gpus=[gpus[g] for g in k.gpus if g in gpus],
    )


@dataclass
class Round:
    t: float
    kernels: list[tuple[Tracked, KernelSample]]
    host: HostSample


class Sampler:
    """Samples this engine's kernels every ``interval`` seconds while :meth:`start` ed."""

    def __init__(
        self,
        docker: aiodocker.Docker,
        interval: float = INTERVAL,
        gpus: Sequence[GpuInfo] = (),
        nvidia_smi: str | None = None,
        mounts: cgroup.Mounts | None = None,
        owner: str = "",
    ) -> None:
        """``owner``: the agent's instance (its kernels only: another agent's on the same
        engine are that agent's to sample)."""
        self.docker = docker
        self.owner = owner
        self.interval = interval
        #: the GPUs offered: the host's figures are theirs (None of nvidia-smi is asked without)
        self.gpus = {g.uuid for g in gpus}
        self.nvidia_smi = nvidia_smi
        self.mounts = mounts
        self.tracked: dict[str, Tracked] = {}
        keep = math.ceil(KEEP_SECONDS / interval) if interval > 0 else 0
        self.rounds: deque[Round] = deque(maxlen=max(2, keep))
        self._task: asyncio.Task[None] | None = None
        self._gpu_reason = ""

    def start(self) -> None:
        if self.interval > 0:  # 0: sampling is off
            self._task = asyncio.create_task(self._run(), name="metrics-sampler")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        next_at = time.monotonic()
        failing = ""
        while True:
            try:
                await self.sample()
                failing = ""
            except Exception as e:  # the next round tries again; a lasting failure is said once
                if repr(e) != failing:
                    log.warning("sampling kernels failed: %r", e, exc_info=not failing)
                failing = repr(e)
            next_at = max(next_at + self.interval, time.monotonic())
            await asyncio.sleep(next_at - time.monotonic())

    async def _running(self) -> list[dict[str, Any]]:
        listed = await list_containers(self.docker, LABEL_SESSION, running=True)
        return [c for c in listed if made_by(c.get("Labels") or {}, self.owner)]

    async def _track(self, container_id: str, labels: dict[str, str]) -> Tracked | None:
        """A newly seen kernel: its first process, cgroups and limits (None if it is gone)."""
        assert self.mounts is not None
        try:
            info = await self.docker.containers.container(container_id).show()
            pid = int(info["State"].get("Pid") or 0)
            if pid <= 0:
                return None
            place = cgroup.locate(self.mounts, pid)
            cpu_limit, mem_limit = await asyncio.to_thread(cgroup.limits, place)
        except (DockerError, cgroup.Gone, ValueError) as e:
            log.debug("not sampling %s: %s", container_id[:12], e)
            return None
        return Tracked(
            session_id=labels.get(LABEL_SESSION, ""),
            kernel_id=labels.get(LABEL_KERNEL, ""),
            hostname=labels.get(LABEL_HOSTNAME, container_id[:12]),
            gpus=tuple(g for g in labels.get(LABEL_GPUS, "").split(",") if g),
            place=place,
            cpu_limit=cpu_limit,
            mem_limit=mem_limit,
        )

    async def sample(self) -> Round:
        """One round: every running kernel's sample (kernels seen for the first time give
        theirs from the next round on)."""
        t = time.time()
        if self.mounts is None:
            self.mounts = await asyncio.to_thread(cgroup.read_mounts)
        listed = {str(c["Id"]): c for c in await self._running()}
        for cid in list(self.tracked):
            if cid not in listed:
                del self.tracked[cid]
        for cid, c in listed.items():
            if cid not in self.tracked:
                labels = c.get("Labels")
                tracked = await self._track(cid, labels if isinstance(labels, dict) else {})
                if tracked is not None:
                    self.tracked[cid] = tracked
        readings = await asyncio.to_thread(_read_all, dict(self.tracked))
        gpus = await self._gpu_figures()
        kernels = []
        for cid, k in list(self.tracked.items()):
            reading = readings.get(cid)
            if reading is None:  # gone mid-read: skipped (and found again if it still runs)
                del self.tracked[cid]
                continue
            counters, at = reading
            sample = rates(k, counters, at, t, gpus)
            k.last, k.last_at = counters, at
            if sample is not None:
                kernels.append((k, sample))
        host = HostSample(
            t=t,
            cpu_cores=round(sum(s.cpu_cores for _, s in kernels), 4),
            mem_bytes=sum(s.mem_bytes for _, s in kernels),
            kernels=len(kernels),
            gpus=[g for g in gpus.values() if g.uuid in self.gpus],
        )
        r = Round(t, kernels, host)
        self.rounds.append(r)
        return r

    async def _gpu_figures(self) -> dict[str, GpuSample]:
        """Every GPU of the host by UUID (one nvidia-smi call), where GPUs are offered."""
        if not self.gpus and not any(k.gpus for k in self.tracked.values()):
            return {}
        text, reason = await gpu_discovery.run_smi(UTIL_QUERY, self.nvidia_smi, SMI_TIMEOUT)
        if reason != self._gpu_reason:  # said once, not every round
            self._gpu_reason = reason
            if reason:
                log.warning("no GPU figures: %s", reason)
        return {g.uuid: g for g in parse_gpu_usage(text)}

    def since(self, t: float | None = None) -> AgentMetrics:
        """The kept samples taken after ``t`` (all kept ones when None), by kernel."""
        by_kernel: dict[tuple[str, str], KernelSamples] = {}
        host = []
        for r in self.rounds:
            if t is not None and r.t <= t:
                continue
            host.append(r.host)
            for k, s in r.kernels:
                key = (k.session_id, k.hostname)
                if key not in by_kernel:
                    by_kernel[key] = KernelSamples(
                        session_id=k.session_id, kernel_id=k.kernel_id, hostname=k.hostname
                    )
                by_kernel[key].samples.append(s)
        return AgentMetrics(interval=self.interval, kernels=list(by_kernel.values()), host=host)


def _read_all(tracked: dict[str, Tracked]) -> dict[str, tuple[cgroup.Counters, float]]:
    """Each kernel's counters and when they were read (kernels gone mid-read are left out)."""
    out = {}
    for cid, k in tracked.items():
        try:
            out[cid] = (cgroup.read(k.place), time.monotonic())
        except (cgroup.Gone, ValueError):
            continue
    return out
