"""An 8-kernel session on a cold agent (its image only in a registry) against ``docker pull``
alone plus a warm start of the same session.

A real registry (Debian's docker-registry with TLS and htpasswd auth on loopback, as the
tests start it: tests/registry_fixture.py) holds ``troupe-test/bench-pull``: troupe/base and
a layer of ``--layer`` random bytes. In each round, interleaved:

  separate  ``docker pull`` of the image (timed), then an 8-kernel session of it created and
            waited for until RUNNING (timed: the warm start); the image removed;
  cold      the same session with the image missing: troupe pulls it once for the 8 kernels,
            then starts them; created until RUNNING (timed); the image removed.

The target: cold within 1.2x of pull + warm. Prints medians and writes
bench/results/pull.json; passes or fails nothing. Usage:
    .venv/bin/python bench/pull.py [--rounds 3] [--layer 256m] [--kernels 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common

sys.path.insert(0, str(common.ROOT))
from tests.registry_fixture import PASSWORD, USER, LocalRegistry, start_registry

from troupe.api.models import parse_size

RESULTS = common.ROOT / "bench" / "results" / "pull.json"


async def start_session(server: common.TroupeServer, image: str, n: int) -> float:
    """Seconds from POST /v1/sessions to RUNNING; the session is destroyed after."""
    async with server.client() as api:
        t0 = time.perf_counter()
        r = await api.post(
            "/sessions",
            json={
                "name": f"tbench-pull-{time.monotonic_ns()}",
                "image": image,
                "cluster_size": n,
                "resources": {"cpu": 0.2, "mem": "128m"},
            },
        )
        r.raise_for_status()
        sid = r.json()["id"]
        server.sessions.add(sid)
        info = await common.session_until(api, sid, "running")
        took = time.perf_counter() - t0
        if info["status"] != "RUNNING":
            raise RuntimeError(f"session {sid}: {info['status']} {info['status_info']}")
        await api.delete(f"/sessions/{sid}")
        await common.session_until(api, sid, "final", limit=120)
    return took


def docker_pull(reg: LocalRegistry, image: str) -> float:
    t0 = time.perf_counter()
    reg.docker("pull", "-q", image)
    return time.perf_counter() - t0


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--layer", default="256m")
    ap.add_argument("--kernels", type=int, default=8)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix=common.PREFIX))
    reg = start_registry(tmp / "registry")
    server = None
    try:
        image = reg.push("bench-pull", parse_size(args.layer))
        (tmp / "server").mkdir()
        server = common.start_server(tmp=tmp / "server", subnet_pool="10.87.0.0/16")
        async with server.client() as api:
            body = {"host": reg.host, "username": USER, "password": PASSWORD}
            (
                await api.post("/registries", json={**body, "ca_pem": reg.ca.read_text()})
            ).raise_for_status()
        # warm-up: one cold start (first sessions of a fresh server are slower)
        await start_session(server, image, args.kernels)
        common.docker("image", "rm", image)
        rounds: list[dict[str, float]] = []
        for i in range(args.rounds):
            pull = docker_pull(reg, image)
            warm = await start_session(server, image, args.kernels)
            common.docker("image", "rm", image)
            cold = await start_session(server, image, args.kernels)
            common.docker("image", "rm", image)
            rounds.append({"pull": pull, "warm": warm, "cold": cold})
            print(f"round {i + 1}: pull {pull:.2f} s, warm {warm:.2f} s, cold {cold:.2f} s")
        med = {k: statistics.median(r[k] for r in rounds) for k in ("pull", "warm", "cold")}
        ratio = med["cold"] / (med["pull"] + med["warm"])
        result: dict[str, Any] = {
            "kernels": args.kernels,
            "layer_bytes": parse_size(args.layer),
            "rounds": rounds,
            "median": med,
            "cold_over_pull_plus_warm": ratio,
        }
        print(
            f"median: docker pull {med['pull']:.2f} s + warm start {med['warm']:.2f} s ="
            f" {med['pull'] + med['warm']:.2f} s; cold start {med['cold']:.2f} s;"
            f" ratio {ratio:.2f} (target <= 1.2)"
        )
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=1))
    finally:
        if server is not None:
            await common.destroy_all(server)
            common.stop_server(server)
        reg.close()
        shutil.rmtree(tmp, ignore_errors=True)  # the registry's data and the server's


if __name__ == "__main__":
    asyncio.run(main())
