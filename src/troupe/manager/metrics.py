"""The manager's utilisation history, in memory and bounded (docs/metrics.md).

Per running kernel: the last hour of samples at full resolution and 5-minute means for the
last 24 hours, each in a fixed-size ring of 32-bit floats (:class:`Ring`), plus what the
summary of a finished session needs (peak memory, mean cores, GPU-hours). Per agent the same
rings hold what all its kernels use together. Nothing grows with time: a kernel takes
``(3600 / interval + 288) x 4 x columns`` bytes (12 columns, and 2 more per GPU), whatever it
runs for; a session's kernels are dropped when it finishes (:meth:`History.finish`).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from troupe.api.metrics import GpuSample, HostSample, KernelSample, KernelUsage, UsageSummary

#: Full resolution is kept this long; coarse buckets this long each, this many of them.
FULL_SECONDS = 3600.0
BUCKET_SECONDS = 300.0
BUCKETS = 288
#: Kernels and agents not heard of for this long are forgotten (a session that never ended).
STALE_SECONDS = BUCKETS * BUCKET_SECONDS
#: A gap longer than this many intervals between two samples counts as this many.
MAX_GAP_INTERVALS = 3
NAN = float("nan")


class Ring:
    """The last ``capacity`` rows of ``width`` floats (float32), oldest first."""

    def __init__(self, capacity: int, width: int) -> None:
        self.capacity, self.width = capacity, width
        self._data = array("f", bytes(4 * capacity * width))
        self._start = self._len = 0

    def __len__(self) -> int:
        return self._len

    def append(self, row: Sequence[float]) -> None:
        at = (self._start + self._len) % self.capacity
        if self._len == self.capacity:
            self._start = (self._start + 1) % self.capacity
        else:
            self._len += 1
        self._data[at * self.width : (at + 1) * self.width] = array("f", row)

    def __iter__(self) -> Iterator[list[float]]:
        for i in range(self._len):
            at = ((self._start + i) % self.capacity) * self.width
            yield self._data[at : at + self.width].tolist()

    def last(self) -> list[float] | None:
        if not self._len:
            return None
        at = ((self._start + self._len - 1) % self.capacity) * self.width
        return self._data[at : at + self.width].tolist()

    def nbytes(self) -> int:
        return self._data.itemsize * len(self._data)


@dataclass
class Bucket:
    """The coarse bucket being filled: per column the sum and count of known values, or the
    largest (columns in ``maxed``)."""

    index: int
    sums: list[float]
    counts: list[int]

    def add(self, row: Sequence[float], maxed: frozenset[int]) -> None:
        for i, v in enumerate(row):
            if math.isnan(v):
                continue
            if i in maxed:
                self.sums[i] = v if self.counts[i] == 0 else max(self.sums[i], v)
                self.counts[i] = 1
            else:
                self.sums[i] += v
                self.counts[i] += 1

    def mean(self) -> list[float]:
        return [s / n if n else NAN for s, n in zip(self.sums, self.counts, strict=True)]


class Series:
    """Rows of one kernel or agent: full resolution for :data:`FULL_SECONDS`, then coarse.

    Column 0 is the time, stored as seconds after ``epoch`` (float32 keeps those to a few
    milliseconds over a day; epoch seconds themselves would lose minutes)."""

    def __init__(self, epoch: float, interval: float, width: int, maxed: frozenset[int]) -> None:
        self.epoch = epoch
        self.full = Ring(max(1, math.ceil(FULL_SECONDS / max(interval, 1.0))), width)
        self.coarse = Ring(BUCKETS, width)
        self.maxed = maxed
        self.bucket: Bucket | None = None
        self.last_t = -math.inf

    def add(self, t: float, row: list[float]) -> None:
        row = [t - self.epoch, *row]
        self.full.append(row)
        self.last_t = t
        index = math.floor(t / BUCKET_SECONDS)
        if self.bucket is not None and self.bucket.index != index:
            self.coarse.append(self.bucket.mean())
            self.bucket = None
        if self.bucket is None:
            self.bucket = Bucket(index, [0.0] * len(row), [0] * len(row))
        self.bucket.add(row, self.maxed)

    def rows(self, since: float | None) -> Iterator[tuple[float, list[float]]]:
        """(t, the other columns) after ``since``, oldest first: coarse rows from before the
        full-resolution ones, then those."""
        full = list(self.full)
        first = full[0][0] + self.epoch if full else math.inf
        for r in self.coarse:
            t = r[0] + self.epoch
            if t < first and (since is None or t > since):
                yield t, r[1:]
        for r in full:
            t = r[0] + self.epoch
            if since is None or t > since:
                yield t, r[1:]

    def nbytes(self) -> int:
        return self.full.nbytes() + self.coarse.nbytes()


def _opt(v: float | int | None) -> float:
    return NAN if v is None else float(v)


def _back(v: float) -> float | None:
    return None if math.isnan(v) else v


def _int(v: float) -> int | None:
    return None if math.isnan(v) else round(v)


#: Kernel columns after the time; per GPU two more: utilisation, memory used.
KERNEL_COLUMNS = 11
#: Row indices (after the time, at 0) of the limits and oom_killed: a coarse bucket keeps
#: their largest value (the rest: the mean).
KERNEL_MAXED = frozenset({2, 5, 6})


@dataclass
class KernelSeries:
    series: Series
    #: the kernel's GPUs (index, uuid, total memory) in the order of their columns
    gpus: tuple[tuple[int, str, int | None], ...]
    interval: float
    usage: KernelUsage = field(default_factory=KernelUsage)
    cpu_seconds: float = 0.0

    def add(self, s: KernelSample) -> None:
        row = [
            s.cpu_cores,
            _opt(s.cpu_limit),
            _opt(s.cpu_pct),
            float(s.mem_bytes),
            _opt(s.mem_limit),
            1.0 if s.oom_killed else 0.0,
            s.net_rx_bps,
            s.net_tx_bps,
            s.blk_read_bps,
            s.blk_write_bps,
            float(s.pids),
        ]
        by_uuid = {g.uuid: g for g in s.gpus}
        for _, uuid, _ in self.gpus:
            g = by_uuid.get(uuid)
            row += [_opt(g.util_pct if g else None), _opt(g.mem_bytes if g else None)]
        last = self.series.last_t
        dt = self.interval if last == -math.inf else s.t - last
        dt = min(max(dt, 0.0), MAX_GAP_INTERVALS * self.interval)
        self.series.add(s.t, row)
        u = self.usage
        u.peak_mem_bytes = max(u.peak_mem_bytes, s.mem_bytes)
        u.oom_killed = u.oom_killed or s.oom_killed
        u.seconds += dt
        self.cpu_seconds += s.cpu_cores * dt
        u.mean_cpu_cores = self.cpu_seconds / u.seconds if u.seconds else 0.0
        u.gpu_hours += len(self.gpus) * dt / 3600

    def newest(self) -> KernelSample | None:
        row = self.series.full.last()
        return None if row is None else self._sample(row[0] + self.series.epoch, row[1:])

    def samples(self, since: float | None) -> list[KernelSample]:
        return [self._sample(t, r) for t, r in self.series.rows(since)]

    def _sample(self, t: float, r: list[float]) -> KernelSample:
        gpus = _gpu_samples(self.gpus, r, KERNEL_COLUMNS)
        return KernelSample(
            t=round(t, 3),
            cpu_cores=round(r[0], 4),
            cpu_limit=_back(r[1]),
            cpu_pct=None if math.isnan(r[2]) else round(r[2], 2),
            mem_bytes=_int(r[3]) or 0,
            mem_limit=_int(r[4]),
            oom_killed=r[5] > 0,
            net_rx_bps=round(r[6], 1),
            net_tx_bps=round(r[7], 1),
            blk_read_bps=round(r[8], 1),
            blk_write_bps=round(r[9], 1),
            pids=_int(r[10]) or 0,
            gpus=gpus,
        )


#: Agent columns after the time: cores, memory, kernels; per GPU: utilisation, memory used.
HOST_COLUMNS = 3


@dataclass
class HostSeries:
    series: Series
    gpus: tuple[tuple[int, str, int | None], ...]

    def add(self, h: HostSample) -> None:
        by_uuid = {g.uuid: g for g in h.gpus}
        row = [h.cpu_cores, float(h.mem_bytes), float(h.kernels)]
        for _, uuid, _ in self.gpus:
            g = by_uuid.get(uuid)
            row += [_opt(g.util_pct if g else None), _opt(g.mem_bytes if g else None)]
        self.series.add(h.t, row)

    def samples(self, since: float | None) -> list[HostSample]:
        return [
            HostSample(
                t=round(t, 3),
                cpu_cores=round(r[0], 4),
                mem_bytes=_int(r[1]) or 0,
                kernels=_int(r[2]) or 0,
                gpus=_gpu_samples(self.gpus, r, HOST_COLUMNS),
            )
            for t, r in self.series.rows(since)
        ]


def _gpu_ids(gpus: Iterable[GpuSample]) -> tuple[tuple[int, str, int | None], ...]:
    return tuple(sorted((g.index, g.uuid, g.mem_total) for g in gpus))


class History:
    """Every running kernel's and every agent's series, by (session id, hostname) and agent."""

    def __init__(self) -> None:
        self.kernels: dict[tuple[str, str], KernelSeries] = {}
        self.hosts: dict[str, HostSeries] = {}
        #: sessions that finished, and when: late samples of theirs are not taken
        self.ended: dict[str, float] = {}

    def add_kernel(self, session_id: str, hostname: str, interval: float, s: KernelSample) -> None:
        if session_id in self.ended:
            return
        key = (session_id, hostname)
        k = self.kernels.get(key)
        if k is not None and s.t <= k.series.last_t:
            return  # seen already
        ids = _gpu_ids(s.gpus)
        if k is None or (ids and not k.gpus):
            # new, or its GPUs' figures came only now (nvidia-smi failed before): the series
            # starts afresh with their columns, the usage goes on
            width = KERNEL_COLUMNS + 2 * len(ids)
            fresh = KernelSeries(Series(s.t, interval, width + 1, KERNEL_MAXED), ids, interval)
            if k is not None:
                fresh.usage, fresh.cpu_seconds = k.usage, k.cpu_seconds
                fresh.series.last_t = k.series.last_t
            k = self.kernels[key] = fresh
        k.add(s)

    def add_host(self, agent: str, interval: float, h: HostSample) -> None:
        ids = _gpu_ids(h.gpus)
        host = self.hosts.get(agent)
        if host is not None and h.t <= host.series.last_t:
            return
        if host is None or ids != host.gpus:  # new, or its GPUs changed: start afresh
            width = HOST_COLUMNS + 2 * len(ids)
            host = HostSeries(Series(h.t, interval, width + 1, frozenset()), ids)
            self.hosts[agent] = host
        host.add(h)

    def kernel(self, session_id: str, hostname: str, since: float | None) -> list[KernelSample]:
        k = self.kernels.get((session_id, hostname))
        return k.samples(since) if k else []

    def host(self, agent: str, since: float | None) -> list[HostSample]:
        h = self.hosts.get(agent)
        return h.samples(since) if h else []

    def finish(self, session_id: str, now: float) -> UsageSummary | None:
        """The session's summary (None without samples); its series are dropped."""
        self.ended[session_id] = now
        mine = [key for key in self.kernels if key[0] == session_id]
        if not mine:
            return None
        usages = {host: self.kernels.pop((sid, host)).usage for sid, host in mine}
        return UsageSummary(
            peak_mem_bytes=max(u.peak_mem_bytes for u in usages.values()),
            mean_cpu_cores=round(sum(u.mean_cpu_cores for u in usages.values()), 4),
            gpu_hours=round(sum(u.gpu_hours for u in usages.values()), 6),
            seconds=round(max(u.seconds for u in usages.values()), 3),
            oom_killed=any(u.oom_killed for u in usages.values()),
            kernels={h: usages[h] for h in sorted(usages)},
        )

    def prune(self, now: float, ended_seconds: float = 600.0) -> None:
        """Forgets series not fed for :data:`STALE_SECONDS` and old ``ended`` marks."""
        for key in [k for k, v in self.kernels.items() if now - v.series.last_t > STALE_SECONDS]:
            del self.kernels[key]
        for agent in [a for a, v in self.hosts.items() if now - v.series.last_t > STALE_SECONDS]:
            del self.hosts[agent]
        for sid in [s for s, t in self.ended.items() if now - t > ended_seconds]:
            del self.ended[sid]

    def nbytes(self) -> int:
        """Bytes of the rings (the samples themselves)."""
        return sum(k.series.nbytes() for k in self.kernels.values()) + sum(
            h.series.nbytes() for h in self.hosts.values()
        )


def _gpu_samples(
    gpus: Sequence[tuple[int, str, int | None]], r: list[float], first: int
) -> list[GpuSample]:
    """The GPUs' figures of one row: utilisation and memory in pairs from column ``first``."""
    return [
        GpuSample(
            index=index,
            uuid=uuid,
            util_pct=_back(r[first + 2 * i]),
            mem_bytes=_int(r[first + 2 * i + 1]),
            mem_total=total,
        )
        for i, (index, uuid, total) in enumerate(gpus)
    ]
