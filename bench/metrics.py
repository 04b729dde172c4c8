"""What sampling costs an agent: N running kernels sampled every interval for a while.

Usage:
    .venv/bin/python bench/metrics.py [--kernels 64] [--interval 5] [--seconds 60]

Starts N tiny containers (``troupe/base`` sleeping, 0.01 CPU, 16 MiB) labelled as troupe
kernels, then runs the agent's own sampler (:class:`troupe.agent.metrics.Sampler`, the code
``troupe agent`` runs) in this process and measures this process's CPU time (user + system,
every thread: the cgroup reads run in a thread) over the whole run, and around each round.
The engine's own work for the one container list per round is dockerd's, not the agent's, and
not counted. Prints the figures and writes them to bench/results/metrics.json. Everything made
is named ``tbench-metrics-*`` and labelled ``tbench.run=<run id>``, and removed at the end, on
failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import secrets
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import aiodocker

from troupe.agent.metrics import Sampler

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PREFIX, ROOT, RUN_LABEL, docker, sweep

IMAGE = "troupe/base:0.1.0"


def start(run: str, n: int) -> None:
    def one(i: int) -> None:
        r = docker(
            *("run", "-d", "--name", f"{PREFIX}metrics-{run}-{i}", "--label", f"{RUN_LABEL}={run}"),
            *("--label", f"troupe.session=tbench-{run}", "--label", f"troupe.hostname=k{i}"),
            *("--cpus", "0.01", "-m", "16m", "--network", "none", "--entrypoint", "sleep"),
            *(IMAGE, "3600"),
        )
        if r.returncode != 0:
            raise RuntimeError(r.stderr)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(n)))


async def measure(interval: float, seconds: float, n: int) -> dict[str, object]:
    docker_ = aiodocker.Docker()
    sampler = Sampler(docker_, interval)
    await sampler.sample()  # first sight: one inspect per kernel, not part of the steady state
    rounds: list[float] = []
    sampled: list[int] = []
    cpu0, wall0 = time.process_time(), time.monotonic()
    next_at = wall0
    while time.monotonic() - wall0 < seconds:
        next_at += interval
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        before = time.process_time()
        r = await sampler.sample()
        rounds.append(time.process_time() - before)
        sampled.append(sum(1 for k, _ in r.kernels if k.session_id.startswith("tbench-")))
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    await docker_.close()
    return {
        "kernels": n,
        "interval_s": interval,
        "wall_s": round(wall, 2),
        "rounds": len(rounds),
        "kernels_sampled_per_round": min(sampled) if sampled else 0,
        "cpu_s": round(cpu, 4),
        "pct_of_one_core": round(100 * cpu / wall, 3),
        "round_cpu_ms_median": round(1000 * statistics.median(rounds), 2),
        "round_cpu_ms_max": round(1000 * max(rounds), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=64)
    ap.add_argument("--interval", type=float, default=5.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    args = ap.parse_args()
    run = secrets.token_hex(4)
    label = f"{RUN_LABEL}={run}"
    try:
        t0 = time.monotonic()
        start(run, args.kernels)
        print(f"{args.kernels} kernels started in {time.monotonic() - t0:.0f} s", flush=True)
        result = asyncio.run(measure(args.interval, args.seconds, args.kernels))
    finally:
        sweep(label)
    result.update(
        {
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.release()}",
            "load_average_1m": round(os.getloadavg()[0], 2),
        }
    )
    print(json.dumps(result, indent=2))
    out = ROOT / "bench" / "results" / "metrics.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
