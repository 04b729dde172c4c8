"""Recovery after a kernel's failure: the whole session RUNNING again, in place, against a
fresh start of the same session.

Usage:
    .venv/bin/python bench/restarts.py [--sizes 2,4,8] [--rounds 3] [--cpu 0.25] [--mem 64m]
                                       [--failures crash,kill] [--floor]

A real ``troupe server`` (its local agent on this machine's engine) runs N-kernel interactive
sessions of ``troupe/base``. For each N, rounds interleave:
  fresh    POST /v1/sessions -> RUNNING (every kernel reaches every other), then DELETE;
  crash    one session created with ``max_restarts`` = rounds x failures and left RUNNING;
           each round SIGKILL to the command of its ``sub1`` kernel (the process its
           supervising entrypoint runs: a crashed training process), sent by an exec made
           beforehand and started at the clock's start, and the time to the session RUNNING
           again with one more restart (the supervisor's report of the failure, its container
           left running, held in place; every kernel set up again inside its running container
           on the agent's word; the readiness barrier);
  kill     the same session, each round a kill of its ``sub1`` container (SIGKILL through the
           engine's API, as ``docker kill`` does, without the CLI's own start-up), and the time
           from the kill to the session RUNNING again (the engine's report of the death; sub1's
           container started again by its agent at once, held; the other kernels set up again
           inside their running containers; sub1's word; the readiness barrier).
Each restart is also cut into steps, in seconds from the failure (the engine's events, the
manager's events and the kernels' timelines): ``died`` (the engine's ``die`` of sub1),
``reported`` (the session RESTARTING: the agent's reading of the death and the manager's
judgement), ``word`` (the latest survivor's word given), ``held start`` (the engine's ``start``
of sub1's container, held), ``sub1 started`` (its new attempt begun: the later of its word and
its start), ``ready`` (the last kernel's "troupe: ready") and ``running``.
(``died`` and ``held start`` are only a killed container's.) Prints medians and the ratio
restart/fresh per kind of failure (target: <= 0.7) and writes every round to
bench/results/restarts.json; passes or fails nothing (machines differ, and a shared machine's
load moves both). Sessions are named ``tbench-*`` and removed on failure or Ctrl-C.

``--floor`` measures the engine alone instead, with the same limits: per N, bench/ready.py's
floor (a bridge network, N containers of the image's sshd created and started at once, until
every sshd answers) against a restart of one of its containers killed through the API, started
again as soon as the engine answers for it, until its sshd answers again (and when the engine
was done with the death, and when the start returned); each round one cluster, both timed.
Written to bench/results/restarts-floor.json. What a restart in place of a killed kernel can
come to.
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

import aiodocker
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    PREFIX,
    ROOT,
    RUN_LABEL,
    TroupeServer,
    created,
    destroy_all,
    docker_socket,
    engine_events,
    session_until,
    start_server,
    stop_server,
    sweep,
)
from methods import Opts, Run, floor, floor_restart

RESULTS = ROOT / "bench" / "results" / "restarts.json"
FLOOR_RESULTS = ROOT / "bench" / "results" / "restarts-floor.json"
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


#: Run as root in sub1: SIGKILL to every child of its supervising entrypoint (its command).
CRASH = (
    "read -r s _ < /run/troupe/supervisor; for p in /proc/[0-9]*; do "
    'read -r l < "$p/stat" 2>/dev/null || continue; set -- ${l##*) }; '
    '[ "$2" = "$s" ] && kill -9 "${p#/proc/}"; done'
)


async def recovery(
    api: httpx.AsyncClient, sid: str, count: int, failure: str, o: argparse.Namespace
) -> float:
    """Fails sub1 (``failure``: crash or kill, see the module's docstring); seconds until the
    session is RUNNING with ``count`` restarts."""
    info = (await api.get(f"/sessions/{sid}")).json()
    sub1 = next(k for k in info["kernels"] if k["hostname"] == "sub1")
    cid = sub1["container_id"]
    transport = httpx.AsyncHTTPTransport(uds=docker_socket())
    async with httpx.AsyncClient(transport=transport, base_url="http://docker") as engine:
        if failure == "crash":
            made = await engine.post(
                f"/containers/{cid}/exec", json={"User": "root", "Cmd": ["sh", "-c", CRASH]}
            )
            made.raise_for_status()
            start, body_ = f"/exec/{made.json()['Id']}/start", {"Detach": True}
            t0, killed = time.perf_counter(), datetime.now(UTC)
            r = await engine.post(start, json=body_)
        else:
            t0, killed = time.perf_counter(), datetime.now(UTC)
            r = await engine.post(f"/containers/{cid}/kill", params={"signal": "KILL"})
        r.raise_for_status()
    # Long-polled, as a fresh start's RUNNING is (session_until): a client asking every few
    # milliseconds would take the cores the engine's start needs. Each answer is a change of
    # status (or the poll's time-out); the first is from RUNNING, where the session was when
    # its kernel failed.
    deadline, seen = t0 + o.timeout, "RUNNING"
    while (left := deadline - time.perf_counter()) > 0:
        params = {"until": "change", "since": seen, "timeout": min(30.0, left)}
        r = await api.get(f"/sessions/{sid}/wait", params=params)
        r.raise_for_status()
        info = r.json()
        if info["status"] == "RUNNING" and info["restarts"] == count:
            if seen == "RUNNING":  # timed out: it changed and came back before the wait began
                raise RuntimeError(f"restart of {sid} was over before its wait began: not timed")
            took = time.perf_counter() - t0
            o.steps[failure].append(await steps(api, sid, info, killed, cid))
            return took
        if info["status"] in ("TERMINATED", "ERROR", "CANCELLED"):
            raise RuntimeError(f"restart: {info['status']} {info['status_info']}")
        seen = info["status"]
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
    recoveries: dict[str, list[float]] = {f: [] for f in o.failures}
    restarts = o.rounds * len(o.failures)
    async with server.client() as api:
        sid = await created(api, server, body(f"{PREFIX}restart-{n}", n, o, restarts))
        info = await session_until(api, sid, "running", limit=o.timeout)
        if info["status"] != "RUNNING":
            raise RuntimeError(f"{info['status']} {info['status_info']}")
        count = 0
        for i in range(o.rounds):
            ups.append(await fresh(server, n, o, i))
            line = f"  N={n} round {i + 1}: fresh {ups[-1]:.2f} s"
            for failure in o.failures:
                count += 1
                recoveries[failure].append(await recovery(api, sid, count, failure, o))
                line += f", {failure} {recoveries[failure][-1]:.2f} s"
            print(line)
        await api.delete(f"/sessions/{sid}")
        await session_until(api, sid, "final", limit=o.timeout)
    f = statistics.median(ups)
    row: dict[str, Any] = {"n": n, "fresh_s": ups}
    for failure, times in recoveries.items():
        done, o.steps[failure] = o.steps[failure], []
        phases = {k: round(statistics.median(x[k] for x in done), 3) for k in done[0]}
        print(f"  N={n} {failure} steps (median s from the failure): {phases}")
        row[failure] = {
            "restart_s": times,
            "ratio": round(statistics.median(times) / f, 3),
            "steps_s": phases,
        }
    return row


async def amain(o: argparse.Namespace) -> list[dict[str, Any]]:
    server = start_server("--cpu", "64", "--mem", "64g", "--log-level", "warning", subnet_pool=POOL)
    try:
        return [await one_size(server, n, o) for n in o.sizes]
    finally:
        await destroy_all(server)
        stop_server(server)


async def floors(o: argparse.Namespace) -> list[dict[str, Any]]:
    """The engine's own figures (``--floor``): per N, rounds of the floor's fresh start
    (bench/ready.py's: a bridge network, N containers of the image's sshd with the same limits,
    created and started at once, until every sshd answers), then the restart of its container
    k1 killed (:func:`methods.floor_restart`)."""
    opts = Opts(f"restarts-{int(time.time())}", o.cpu, o.mem, 0.01, o.timeout, "1s", 1.0, ROOT)
    rows = []
    async with aiodocker.Docker() as dk:
        try:
            for n in o.sizes:
                ups, kills = [], []
                for i in range(o.rounds):
                    run = Run("floor", n, i)

                    async def kill(made: dict[int, Any], ips: list[str], out: Any = kills) -> None:
                        out.append(await floor_restart(made[1], ips[1], opts))

                    await floor(dk, n, opts, run, f"r{i}", kill)
                    ups.append(run.up_s or float("nan"))
                    done, started, up = kills[-1]
                    print(
                        f"  N={n} round {i + 1}: floor fresh {ups[-1]:.2f} s, kill: the engine"
                        f" done {done:.2f} s, started {started:.2f} s, answering {up:.2f} s"
                    )
                f, r = statistics.median(ups), statistics.median(k[2] for k in kills)
                rows.append(
                    {"n": n, "fresh_s": ups, "kill_s": kills, "medians_s": [f, r], "ratio": r / f}
                )
        finally:
            sweep(f"{RUN_LABEL}={opts.run_id}")
    return rows


def floor_main(o: argparse.Namespace) -> None:
    rows = asyncio.run(floors(o))
    print(f"\n{'N':>3} {'floor fresh':>12} {'floor kill restart':>19} {'ratio':>6}")
    for row in rows:
        f, r = row["medians_s"]
        print(f"{row['n']:>3} {f:>11.2f}s {r:>18.2f}s {row['ratio']:>6.2f}")
    FLOOR_RESULTS.parent.mkdir(parents=True, exist_ok=True)
    FLOOR_RESULTS.write_text(json.dumps({"rounds": o.rounds, "sizes": rows}, indent=2) + "\n")
    print(f"written: {FLOOR_RESULTS.relative_to(ROOT)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="2,4,8", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpu", type=float, default=0.25, help="cores per kernel")
    ap.add_argument("--mem", default="64m", help="memory per kernel")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument(
        "--failures", default="crash,kill", type=lambda s: [x for x in s.split(",") if x]
    )
    ap.add_argument(
        "--floor", action="store_true", help="the engine's own figures instead (no troupe)"
    )
    o = ap.parse_args()
    if o.floor:
        if min(o.sizes) < 2:
            ap.error("--floor: sizes of 2 and more (a kernel is killed beside the others)")
        floor_main(o)
        return
    if not o.failures or set(o.failures) - {"crash", "kill"}:
        ap.error("--failures: a comma-separated list of crash, kill")
    o.steps = {f: [] for f in o.failures}
    rows = asyncio.run(amain(o))
    print(f"\n{'N':>3} {'failure':>8} {'fresh (median)':>15} {'restart (median)':>17} {'ratio':>6}")
    for row in rows:
        f = statistics.median(row["fresh_s"])
        for failure in o.failures:
            r = statistics.median(row[failure]["restart_s"])
            ratio = row[failure]["ratio"]
            print(f"{row['n']:>3} {failure:>8} {f:>14.2f}s {r:>16.2f}s {ratio:>6.2f}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"rounds": o.rounds, "sizes": rows}, indent=2) + "\n")
    print(f"written: {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
