"""Recovery after a kernel's failure: the whole session RUNNING again, in place, against a
fresh start of the same session.

Usage:
    .venv/bin/python bench/restarts.py [--sizes 2,4,8] [--rounds 3] [--cpu 0.25] [--mem 64m]

A real ``troupe server`` (its local agent on this machine's engine) runs N-kernel interactive
sessions of ``troupe/base``. For each N, rounds interleave:
  fresh    POST /v1/sessions -> RUNNING (every kernel reaches every other), then DELETE;
  restart  one session created with ``max_restarts`` = rounds and left RUNNING; each round
           a kill of its ``sub1`` container (SIGKILL through the engine's API, as ``docker
           kill`` does, without the CLI's own start-up), and the time from the kill to the
           session RUNNING again with one more restart (the engine's report of the death;
           sub1's container started again by its agent at once, held; the other kernels set
           up again inside their running containers by their supervising entrypoints, on the
           agent's word; sub1's word; the readiness barrier).
Each restart is also cut into steps, in seconds from the kill (the engine's events, the
manager's events and the kernels' timelines): ``died`` (the engine's ``die`` of sub1),
``reported`` (the session RESTARTING: the agent's reading of the death and the manager's
judgement), ``word`` (the latest survivor's word given), ``held start`` (the engine's ``start``
of sub1's container, held), ``sub1 started`` (its new attempt begun: the later of its word and
its start), ``ready`` (the last kernel's "troupe: ready") and ``running``.
Prints medians and the ratio restart/fresh (target: <= 0.7) and writes every round to
bench/results/restarts.json; passes or fails nothing (machines differ, and a shared machine's
load moves both). Sessions are named ``tbench-*`` and removed on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    PREFIX,
    ROOT,
    TroupeServer,
    created,
    destroy_all,
    docker_socket,
    engine_events,
    session_until,
    start_server,
    stop_server,
)

RESULTS = ROOT / "bench" / "results" / "restarts.json"
IMAGE = "troupe/base:0.1.0"
POOL = "10.188.0.0/16"


def body(name: str, n: int, o: argparse.Namespace, restarts: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "image": IMAGE,
        "cluster_size": n,
        "resources": {"cpu": o.cpu, "mem": o.mem},
        "max_restarts": restarts,
    }


async def fresh(server: TroupeServer, n: int, o: argparse.Namespace, i: int) -> float:
    """Seconds from the create to RUNNING; the session is destroyed after."""
    async with server.client() as api:
        t0 = time.perf_counter()
        sid = await created(api, server, body(f"{PREFIX}fresh-{n}-{i}", n, o))
        info = await session_until(api, sid, "running", limit=o.timeout)
        up = time.perf_counter() - t0
        if info["status"] != "RUNNING":
            raise RuntimeError(f"fresh start: {info['status']} {info['status_info']}")
        r = await api.delete(f"/sessions/{sid}")
        r.raise_for_status()
        await session_until(api, sid, "final", limit=o.timeout)
        return up


async def recovery(api: httpx.AsyncClient, sid: str, count: int, o: argparse.Namespace) -> float:
    """Kills sub1's container; seconds until the session is RUNNING with ``count`` restarts."""
    info = (await api.get(f"/sessions/{sid}")).json()
    sub1 = next(k for k in info["kernels"] if k["hostname"] == "sub1")
    transport = httpx.AsyncHTTPTransport(uds=docker_socket())
    async with httpx.AsyncClient(transport=transport, base_url="http://docker") as engine:
        t0 = time.perf_counter()
        killed = datetime.now(UTC)
        r = await engine.post(f"/containers/{sub1['container_id']}/kill", params={"signal": "KILL"})
        r.raise_for_status()
    deadline = t0 + o.timeout
    while time.perf_counter() < deadline:
        info = (await api.get(f"/sessions/{sid}")).json()
        if info["status"] == "RUNNING" and info["restarts"] == count:
            took = time.perf_counter() - t0
            o.steps.append(await steps(api, sid, info, killed, sub1["container_id"]))
            return took
        if info["status"] in ("TERMINATED", "ERROR", "CANCELLED"):
            raise RuntimeError(f"restart: {info['status']} {info['status_info']}")
        await asyncio.sleep(0.01)
    raise TimeoutError(f"session {sid} not RUNNING again")


async def steps(
    api: httpx.AsyncClient, sid: str, info: dict[str, Any], killed: datetime, cid: str
) -> dict[str, float]:
    """The restart's steps, seconds from the kill (see the module's docstring)."""
    events = (await api.get(f"/sessions/{sid}/events")).json()
    since = killed.timestamp() - 1
    engine = await engine_events(
        since, time.time(), {"container": [cid], "event": ["die", "start"]}
    )

    def first(action: str) -> float:
        at = [e["timeNano"] / 1e9 - killed.timestamp() for e in engine if e["Action"] == action]
        return min((x for x in at if x > -0.01), default=float("nan"))

    def last(status: str) -> float:
        at = [e["at"] for e in events if e["kind"] == "status" and e["status"] == status]
        return (datetime.fromisoformat(at[-1]) - killed).total_seconds() if at else float("nan")

    def t(kernel: dict[str, Any], phase: str) -> float:
        at = kernel.get("timeline", {}).get(phase)
        return (datetime.fromisoformat(at) - killed).total_seconds() if at else float("nan")

    kernels = info["kernels"]
    survivors = [k for k in kernels if k["hostname"] != "sub1"]
    sub1 = next(k for k in kernels if k["hostname"] == "sub1")
    return {
        "died": first("die"),
        "reported": last("RESTARTING"),
        "word": max(t(k, "started") for k in survivors),
        "held start": first("start"),
        "sub1 started": t(sub1, "started"),
        "ready": max(t(k, "ready") for k in kernels),
        "running": last("RUNNING"),
    }


async def one_size(server: TroupeServer, n: int, o: argparse.Namespace) -> dict[str, Any]:
    ups: list[float] = []
    recoveries: list[float] = []
    async with server.client() as api:
        sid = await created(api, server, body(f"{PREFIX}restart-{n}", n, o, o.rounds))
        info = await session_until(api, sid, "running", limit=o.timeout)
        if info["status"] != "RUNNING":
            raise RuntimeError(f"{info['status']} {info['status_info']}")
        for i in range(o.rounds):
            ups.append(await fresh(server, n, o, i))
            recoveries.append(await recovery(api, sid, i + 1, o))
            print(f"  N={n} round {i + 1}: fresh {ups[-1]:.2f} s, restart {recoveries[-1]:.2f} s")
        await api.delete(f"/sessions/{sid}")
        await session_until(api, sid, "final", limit=o.timeout)
    f, r = statistics.median(ups), statistics.median(recoveries)
    phases = {k: round(statistics.median(x[k] for x in o.steps), 3) for k in o.steps[0]}
    o.steps.clear()
    print(f"  N={n} restart steps (median s from the kill): {phases}")
    return {
        "n": n,
        "fresh_s": ups,
        "restart_s": recoveries,
        "ratio": round(r / f, 3),
        "restart_steps_s": phases,
    }


async def amain(o: argparse.Namespace) -> list[dict[str, Any]]:
    server = start_server("--cpu", "64", "--mem", "64g", "--log-level", "warning", subnet_pool=POOL)
    try:
        return [await one_size(server, n, o) for n in o.sizes]
    finally:
        await destroy_all(server)
        stop_server(server)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="2,4,8", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpu", type=float, default=0.25, help="cores per kernel")
    ap.add_argument("--mem", default="64m", help="memory per kernel")
    ap.add_argument("--timeout", type=float, default=300)
    o = ap.parse_args()
    o.steps = []
    rows = asyncio.run(amain(o))
    print(f"\n{'N':>3} {'fresh (median)':>15} {'restart (median)':>17} {'ratio':>6}")
    for row in rows:
        f, r = statistics.median(row["fresh_s"]), statistics.median(row["restart_s"])
        print(f"{row['n']:>3} {f:>14.2f}s {r:>16.2f}s {row['ratio']:>6.2f}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"rounds": o.rounds, "sizes": rows}, indent=2) + "\n")
    print(f"written: {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
