"""What the kernel runtime (/opt/troupe-runtime: OpenSSH through its own loader, busybox) adds
to a kernel's start.

Usage:
    .venv/bin/python bench/runtime.py [--sizes 1,3] [--rounds 8]

Rounds interleave three ways to a RUNNING session of N kernels (POST /v1/sessions until /wait
says RUNNING, which means every kernel's sshd listens and every kernel reaches the others):
  own-sshd   troupe/base, on a server whose agent has no runtime (TROUPE_RUNTIME_DIR=""):
             the image's own sshd and /bin/sh, as before the runtime existed;
  runtime    an image without OpenSSH, Python or bash (troupe/base's root filesystem with them
             purged, built here as tbench-nossh), on a server with the runtime: its sshd, setpriv
             and busybox;
  base+rt    troupe/base on the server with the runtime (the runtime's sshd, the image's sh).
Two figures per session: ``to RUNNING`` (the request to RUNNING, as a user waits) and ``kernel``
(each kernel's phases: from the engine's start of its container to its "troupe: ready", the
slowest kernel's; what the runtime changes, without scheduling and networks). Prints medians
and p90s per N, and the runtime's cost: the median of ``runtime`` less that of ``own-sshd``;
writes every round to bench/results/runtime.json. Never passes or fails on time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    ROOT,
    TroupeServer,
    destroy_all,
    docker,
    p90,
    session_until,
    start_server,
    stop_server,
)

NOSSH = "tbench-nossh:1"
BASE = "troupe/base:0.1.0"
DOCKERFILE = """\
FROM {base}
RUN set -e; dpkg-query -W -f '${{Package}}\\n' \\
      | grep -E '^(openssh-|python3|libpython3|rsync$)' \\
      | xargs dpkg --purge --force-depends --force-remove-essential; \\
    dpkg --purge --force-depends --force-remove-essential bash
"""


def build_image() -> None:
    rootfs = docker("images", "troupe/rootfs", "--format", "{{.Repository}}:{{.Tag}}").stdout
    base = (rootfs.split() or [BASE])[0]
    r = subprocess.run(
        ["/usr/bin/docker", "build", "-q", "-t", NOSSH, "-"],
        input=DOCKERFILE.format(base=base).encode(),
        capture_output=True,
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
    )
    if r.returncode:
        raise SystemExit(f"building {NOSSH} failed: {r.stderr.decode()}")


async def one(server: TroupeServer, image: str, size: int, n: int) -> tuple[float, float]:
    """Seconds from the create request to RUNNING, and the slowest kernel's from its
    container's start to its readiness; the session is destroyed after."""
    async with server.client() as api:
        body = {
            "name": f"tbench-rt-{n}-{time.monotonic_ns() % 10**9}",
            "image": image,
            "cluster_size": size,
            "resources": {"cpu": 0.5, "mem": 256 * 1024**2},
        }
        t0 = time.perf_counter()
        r = await api.post("/sessions", json=body)
        r.raise_for_status()
        sid = r.json()["id"]
        server.sessions.add(sid)
        info = await session_until(api, sid, "running", limit=300)
        took = time.perf_counter() - t0
        if info["status"] != "RUNNING":
            raise RuntimeError(f"{image}: {info['status']} {info.get('status_info')}")
        kernel = max(k["phases"]["ready"] - k["phases"]["started"] for k in info["kernels"])
        await api.delete(f"/sessions/{sid}")
        await session_until(api, sid, "final", limit=120)
        return took, kernel


def median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    build_image()
    os.environ["TROUPE_RUNTIME_DIR"] = ""
    plain = start_server("--cpu", "2", "--mem", "8g")
    del os.environ["TROUPE_RUNTIME_DIR"]
    with_rt = start_server("--cpu", "2", "--mem", "8g")
    ways = {"own-sshd": (plain, BASE), "runtime": (with_rt, NOSSH), "base+rt": (with_rt, BASE)}
    rounds: dict[str, dict[str, list[float]]] = {}
    try:
        for size in args.sizes:
            got = rounds.setdefault(str(size), {})
            for n in range(args.rounds + 1):  # the first round warms up, and is not kept
                for way, (server, image) in ways.items():
                    took, kernel = await one(server, image, size, n)
                    if n:
                        got.setdefault(way, []).append(took)
                        got.setdefault(f"kernel:{way}", []).append(kernel)
    finally:
        for s in (plain, with_rt):
            await destroy_all(s)
            stop_server(s)
        docker("image", "rm", "-f", NOSSH)
    return rounds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1, 3])
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    load_before = os.getloadavg()
    rounds = asyncio.run(amain(args))
    summary: dict[str, Any] = {}
    for size, got in rounds.items():
        med = {w: median(xs) for w, xs in got.items()}
        figures = {
            w: {"median_s": round(med[w], 4), "p90_s": round(p90(v), 4)} for w, v in got.items()
        }
        summary[size] = {
            **figures,
            **{
                f"{pre}{w}_minus_own_sshd_ms": round(
                    (med[pre + w] - med[pre + "own-sshd"]) * 1e3, 1
                )
                for pre in ("", "kernel:")
                for w in ("runtime", "base+rt")
            },
        }
        print(f"{size} kernel(s), {len(got['runtime'])} rounds: median (p90)")
        for w, xs in got.items():
            print(f"  {w:16} {med[w]:.3f} s ({p90(xs):.3f} s)")
        for pre in ("", "kernel:"):
            cost = summary[size][f"{pre}runtime_minus_own_sshd_ms"]
            print(f"  {pre or 'to RUNNING:'} runtime - own-sshd: {cost:+.1f} ms")
    out = ROOT / "bench/results/runtime.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
                "load_avg_after": os.getloadavg(),
                "load_avg_before": load_before,
                "summary": summary,
                "rounds": rounds,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"written: {out}")


if __name__ == "__main__":
    main()
