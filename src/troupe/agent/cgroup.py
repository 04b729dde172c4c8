"""A container's counters, read from its cgroup files and its network namespace: cgroup v1
(one hierarchy per controller) and v2 (one unified hierarchy) alike.

Where a container's cgroups are comes from ``/proc/<pid>/cgroup`` of its first process and the
mount table (``/proc/self/mountinfo``), so the engine's cgroup driver (cgroupfs or systemd) and
its ``--cgroup-parent`` do not matter. The parsers are pure functions of the files' text; a file
that vanished (the container stopped mid-read) raises :class:`Gone`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

#: v1 controllers read here.
CONTROLLERS = ("cpu", "cpuacct", "memory", "blkio", "pids")
#: v1 writes "no limit" as a huge page-aligned number; anything above this is none.
NO_LIMIT = 2**62


class Gone(Exception):
    """The container's cgroup or process is no more (it stopped while being read)."""


@dataclass(frozen=True)
class Mounts:
    """Where each v1 controller's hierarchy and the v2 hierarchy are mounted (and which
    cgroup path each mount shows at its root)."""

    v1: dict[str, tuple[Path, str]] = field(default_factory=dict)
    v2: tuple[Path, str] | None = None


@dataclass(frozen=True)
class Counters:
    """One reading of a container's cumulative counters and current values."""

    cpu_ns: int
    mem_bytes: int
    oom_kills: int
    blk_read: int
    blk_write: int
    pids: int
    net_rx: int
    net_tx: int


@dataclass(frozen=True)
class Place:
    """One container's cgroup directories: per v1 controller, or the one v2 directory."""

    pid: int
    v1: dict[str, Path] = field(default_factory=dict)
    v2: Path | None = None

    def file(self, controller: str, v1_name: str, v2_name: str) -> Path | None:
        if controller in self.v1:
            return self.v1[controller] / v1_name
        return self.v2 / v2_name if self.v2 is not None else None


# -- parsers (text -> numbers) ------------------------------------------------------------
def parse_mountinfo(text: str) -> Mounts:
    """The cgroup mounts of ``/proc/self/mountinfo``."""
    v1: dict[str, tuple[Path, str]] = {}
    v2: tuple[Path, str] | None = None
    for line in text.splitlines():
        pre, sep, post = line.partition(" - ")
        if not sep:
            continue
        fields, tail = pre.split(), post.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        root, point = fields[3], Path(fields[4].replace("\\040", " "))
        if tail[0] == "cgroup2" and v2 is None:
            v2 = (point, root)
        elif tail[0] == "cgroup":
            for opt in tail[2].split(","):
                if opt in CONTROLLERS and opt not in v1:
                    v1[opt] = (point, root)
    return Mounts(v1, v2)


def parse_proc_cgroup(text: str) -> tuple[dict[str, str], str | None]:
    """``/proc/<pid>/cgroup``: (v1 controller -> path, the v2 path or None)."""
    v1: dict[str, str] = {}
    v2 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, names, path = parts
        if names == "":
            v2 = path
        for name in names.split(","):
            if name in CONTROLLERS:
                v1[name] = path
    return v1, v2


def place_of(mounts: Mounts, pid: int, proc_cgroup: str) -> Place:
    """The cgroup directories of process ``pid`` (whose ``/proc/<pid>/cgroup`` says
    ``proc_cgroup``): v1 where a controller is mounted as v1, else the v2 directory."""
    paths, unified = parse_proc_cgroup(proc_cgroup)
    v1 = {c: _join(mounts.v1[c], paths[c]) for c in CONTROLLERS if c in mounts.v1 and c in paths}
    v2 = _join(mounts.v2, unified) if mounts.v2 is not None and unified is not None else None
    return Place(pid, v1, v2)


def _join(mount: tuple[Path, str], path: str) -> Path:
    """``path`` (as /proc/<pid>/cgroup writes it) under a mount showing cgroup ``root``."""
    point, root = mount
    if root != "/" and (path == root or path.startswith(root.rstrip("/") + "/")):
        path = path[len(root) :]
    return point / path.lstrip("/")


def keyed(text: str) -> dict[str, int]:
    """``key value`` lines (memory.stat, cpu.stat, memory.events, memory.oom_control)."""
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition(" ")
        v = v.strip()
        if v.lstrip("-").isdigit():
            out[k] = int(v)
    return out


def limit_v1(text: str) -> int | None:
    """``memory.limit_in_bytes``: None when unlimited."""
    n = int(text.strip())
    return None if n >= NO_LIMIT or n < 0 else n


def limit_v2(text: str) -> int | None:
    """``memory.max``: None when ``max``."""
    v = text.strip()
    return None if v == "max" else int(v)


def cpu_limit_v1(quota: str, period: str) -> float | None:
    """Cores of ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (quota -1: none)."""
    q, p = int(quota.strip()), int(period.strip())
    return None if q <= 0 or p <= 0 else q / p


def cpu_limit_v2(text: str) -> float | None:
    """Cores of ``cpu.max`` (``QUOTA PERIOD``; ``max``: none)."""
    parts = text.split()
    if not parts or parts[0] == "max":
        return None
    period = int(parts[1]) if len(parts) > 1 else 100_000
    return int(parts[0]) / period if period > 0 else None


def blkio_v1(text: str) -> tuple[int, int]:
    """(read, written) bytes of ``blkio.throttle.io_service_bytes[_recursive]``: lines
    ``MAJ:MIN Read N``."""
    read = written = 0
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2].isdigit():
            if parts[1] == "Read":
                read += int(parts[2])
            elif parts[1] == "Write":
                written += int(parts[2])
    return read, written


def io_v2(text: str) -> tuple[int, int]:
    """(read, written) bytes of ``io.stat``: lines ``MAJ:MIN rbytes=N wbytes=N ...``."""
    read = written = 0
    for line in text.splitlines():
        for item in line.split()[1:]:
            k, _, v = item.partition("=")
            if v.isdigit():
                if k == "rbytes":
                    read += int(v)
                elif k == "wbytes":
                    written += int(v)
    return read, written


def net_dev(text: str) -> tuple[int, int]:
    """(received, sent) bytes of every interface but loopback in ``/proc/<pid>/net/dev``."""
    rx = tx = 0
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        if not sep or name.strip() == "lo":
            continue
        cols = rest.split()
        if len(cols) >= 9:
            rx += int(cols[0])
            tx += int(cols[8])
    return rx, tx


def usage_minus_inactive(usage: int, stat: dict[str, int], v2: bool) -> int:
    """Memory used as ``docker stats`` counts it: the page cache that can go at once (inactive
    file pages) is not use."""
    inactive = stat.get("inactive_file" if v2 else "total_inactive_file", 0)
    return max(0, usage - inactive) if inactive <= usage else usage


# -- reading -------------------------------------------------------------------------------
def _read(path: Path | None) -> str:
    if path is None:
        return ""
    try:
        return path.read_text()
    except (FileNotFoundError, ProcessLookupError) as e:
        raise Gone(str(path)) from e
    except OSError as e:  # ENODEV, ESRCH: the cgroup is being removed
        raise Gone(f"{path}: {e}") from e


def _read_optional(path: Path | None) -> str:
    """A file some kernels lack (e.g. blkio's files on a host without block throttling)."""
    try:
        return _read(path)
    except Gone:
        return ""


def read_mounts(mountinfo: Path = Path("/proc/self/mountinfo")) -> Mounts:
    return parse_mountinfo(mountinfo.read_text())


def locate(mounts: Mounts, pid: int, proc: Path = Path("/proc")) -> Place:
    """Where process ``pid``'s cgroups are (:class:`Gone` if the process is gone)."""
    return place_of(mounts, pid, _read(proc / str(pid) / "cgroup"))


def limits(place: Place) -> tuple[float | None, int | None]:
    """(cores, bytes) the container may use: None where unlimited."""
    if "cpu" in place.v1:
        cores = cpu_limit_v1(
            _read(place.v1["cpu"] / "cpu.cfs_quota_us"),
            _read(place.v1["cpu"] / "cpu.cfs_period_us"),
        )
    else:
        text = _read_optional(place.file("cpu", "", "cpu.max"))
        cores = cpu_limit_v2(text) if text else None
    if "memory" in place.v1:
        mem = limit_v1(_read(place.v1["memory"] / "memory.limit_in_bytes"))
    else:
        text = _read_optional(place.file("memory", "", "memory.max"))
        mem = limit_v2(text) if text else None
    return cores, mem


def read(place: Place, proc: Path = Path("/proc")) -> Counters:
    """The container's counters now (:class:`Gone` if it stopped)."""
    if "cpuacct" in place.v1:
        cpu_ns = int(_read(place.v1["cpuacct"] / "cpuacct.usage"))
    else:
        cpu_ns = keyed(_read(place.file("cpu", "", "cpu.stat"))).get("usage_usec", 0) * 1000
    v1_mem = "memory" in place.v1
    if v1_mem:
        usage = int(_read(place.v1["memory"] / "memory.usage_in_bytes"))
        stat = keyed(_read(place.v1["memory"] / "memory.stat"))
        oom = keyed(_read_optional(place.v1["memory"] / "memory.oom_control"))
    else:
        usage = int(_read(place.file("memory", "", "memory.current")))
        stat = keyed(_read(place.file("memory", "", "memory.stat")))
        oom = keyed(_read_optional(place.file("memory", "", "memory.events")))
    if "blkio" in place.v1:
        d = place.v1["blkio"]
        text = _read_optional(d / "blkio.throttle.io_service_bytes_recursive") or _read_optional(
            d / "blkio.throttle.io_service_bytes"
        )
        blk = blkio_v1(text)
    else:
        blk = io_v2(_read_optional(place.file("io", "", "io.stat")))
    pids_text = _read_optional(place.file("pids", "pids.current", "pids.current")).strip()
    rx, tx = net_dev(_read(proc / str(place.pid) / "net" / "dev"))
    return Counters(
        cpu_ns=cpu_ns,
        mem_bytes=usage_minus_inactive(usage, stat, not v1_mem),
        oom_kills=oom.get("oom_kill", 0),
        blk_read=blk[0],
        blk_write=blk[1],
        pids=int(pids_text) if pids_text.isdigit() else 0,
        net_rx=rx,
        net_tx=tx,
    )
