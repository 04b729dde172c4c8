"""What this host can give to kernels, and which storage it shares with other hosts."""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import uuid
from pathlib import Path

log = logging.getLogger(__name__)

#: File in the data root holding the storage's id.
DATA_MARKER = ".troupe-data-id"


def host_cpu_count() -> float:
    try:
        return float(len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return float(os.cpu_count() or 1)


def host_memory_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("MemTotal missing from /proc/meminfo")


def mtu_of_address(address: str) -> int:
    """MTU of the interface holding ``address`` in this network namespace (0 if none)."""
    import fcntl
    import socket
    import struct

    siocgifaddr, siocgifmtu = 0x8915, 0x8921
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            req = struct.pack("256s", name.encode()[:15])
            try:
                addr = socket.inet_ntoa(fcntl.ioctl(s.fileno(), siocgifaddr, req)[20:24])
            except OSError:
                continue
            if addr == address:
                mtu: int = struct.unpack("I", fcntl.ioctl(s.fileno(), siocgifmtu, req)[16:20])[0]
                return mtu
    return 0


def data_marker(data_root: Path) -> str:
    """An id stored in the data root, the same for every agent that shares the storage: the
    manager spreads a session with data folders only over agents that report the same one
    (its folders must be the same files everywhere)."""
    marker = data_root / DATA_MARKER
    if not marker.exists():
        data_root.mkdir(parents=True, exist_ok=True)
        tmp = marker.with_suffix(f".{uuid.uuid4().hex}")
        tmp.write_text(uuid.uuid4().hex + "\n")
        with contextlib.suppress(FileExistsError):  # another agent won the race
            marker.hardlink_to(tmp)
        tmp.unlink()
    return marker.read_text().strip()


def nofile_limit(wanted: int) -> int:
    """``wanted``, but no more than this process's own hard limit of open files: the engine
    cannot give a container more than it has itself (runc fails with ``error setting rlimit``),
    and an agent usually runs beside its engine with the same limits."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < wanted:
        log.warning("kernels get %d open files (this host's hard limit), not %d", hard, wanted)
        return int(hard)
    return wanted
