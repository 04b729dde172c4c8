"""Recovery after a lost agent: the whole session RUNNING again with its lost kernels placed
on other hosts, against a fresh start of the same session, on the 3-host test bed.

Usage:
    .venv/bin/python bench/replacing.py [--sizes 2,4,8] [--rounds 3] [--agent-timeout 2]

A real ``troupe server`` (no local agent) and one ``troupe agent`` on each test-bed host
(scripts/testbed.sh; brought up if it is not, and down again after), each with room for half
of the session's kernels and a little more, so an N-kernel multi-node session spreads over
two or three hosts and still fits on two. For each N, rounds interleave:
  fresh    POST /v1/sessions -> RUNNING (every kernel reaches every other), then DELETE;
  replace  a session with ``max_restarts`` 1, RUNNING; SIGKILL of the agent that holds its
           ``sub1`` (its host's engine and containers stay: a host cut off, not a crash),
           then the session RUNNING again with ``restarts`` 1. Reported in two parts: the
           time-out (the kill to the session's RESTARTING: the agent's heartbeat time-out,
           ``--agent-timeout``, and the check's period) and the re-placement (RESTARTING to
           RUNNING: the failed attempt removed on the hosts still there, PENDING, placed,
           a new network and every kernel made anew, the readiness barrier). The agent is
           started again after the round (its leftovers are swept when it is back).
The re-placement is what compares with a fresh start. Prints medians and the ratio
re-placement/fresh, with the load average, and writes every round to
bench/results/replacing.json; passes or fails nothing. Sessions are named ``tbench-*``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import secrets
import signal
import statistics
import subprocess
import sys
import time
from datetime import datetime
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
    session_until,
    start_server,
    stop_process,
    stop_server,
    sweep,
)
from ready import TB, bed_nodes, tb

RESULTS = ROOT / "bench" / "results" / "replacing.json"
IMAGE = "troupe/base:0.1.0"
POOL = "10.186.0.0/16"
HOST = "10.123.0.1"  # the bed's host address: every node reaches the manager there
PORT = 6112  # not the tests' 6011 nor bench/ready.py's 6111
HOSTS = 3


def agent_name(i: int) -> str:
    return f"tbench-rp{i}"


def start_agent(server: TroupeServer, i: int, token: str, cpu: float) -> subprocess.Popen[bytes]:
    """``troupe agent`` in node i's network namespace against node i's dockerd."""
    argv = ["bash", str(TB), "exec", str(i), sys.executable, "-m", "troupe", "agent"]
    argv += ["--manager", server.url, "--token", token, "--name", agent_name(i)]
    argv += ["--listen", f"10.123.0.{10 + i}:{PORT}", "--cpu", f"{cpu:g}"]
    argv += ["--docker-host", f"unix:///run/troupe-tb/tt{i}/docker.sock", "--mem", "3g"]
    argv += ["--data-root", str(server.tmp / "shared-data"), "--heartbeat", "0.5"]
    with open(server.tmp / f"agent-{i}.log", "ab") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def body(name: str, n: int, o: argparse.Namespace, restarts: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "image": IMAGE,
        "cluster_size": n,
        "cluster_mode": "multi-node",
        "resources": {"cpu": o.cpu, "mem": o.mem},
        "max_restarts": restarts,
    }


async def running(api: httpx.AsyncClient, sid: str, o: argparse.Namespace) -> dict[str, Any]:
    info = await session_until(api, sid, "running", limit=o.timeout)
    if info["status"] != "RUNNING":
        raise RuntimeError(f"{info['status']} {info['status_info']}")
    return info


async def gone(api: httpx.AsyncClient, sid: str, o: argparse.Namespace) -> None:
    (await api.delete(f"/sessions/{sid}")).raise_for_status()
    await session_until(api, sid, "final", limit=o.timeout)


async def fresh(server: TroupeServer, n: int, o: argparse.Namespace, i: int) -> float:
    """Seconds from the create to RUNNING; the session is destroyed after."""
    async with server.client() as api:
        t0 = time.perf_counter()
        sid = await created(api, server, body(f"{PREFIX}fresh-{n}-{i}", n, o))
        await running(api, sid, o)
        up = time.perf_counter() - t0
        await gone(api, sid, o)
        return up


def at(info: dict[str, Any], status: str) -> float:
    return datetime.fromisoformat(info["timeline"][status]).timestamp()


async def replace(
    server: TroupeServer, agents: dict[int, subprocess.Popen[bytes]], n: int, o: argparse.Namespace,
    token: str, i: int,
) -> dict[str, Any]:  # fmt: skip
    """One lost agent: (time-out, re-placement, total) in seconds; everything restored."""
    async with server.client() as api:
        sid = await created(api, server, body(f"{PREFIX}replace-{n}-{i}", n, o, restarts=1))
        info = await running(api, sid, o)
        holder = next(k["agent"] for k in info["kernels"] if k["hostname"] == "sub1")
        node = next(j for j in agents if agent_name(j) == holder)
        t0 = time.time()
        os.killpg(agents[node].pid, signal.SIGKILL)  # the agent only: its engine stays
        agents[node].wait()
        deadline = time.perf_counter() + o.timeout
        while time.perf_counter() < deadline:
            info = (await api.get(f"/sessions/{sid}")).json()
            if info["status"] == "RUNNING" and info["restarts"] == 1:
                break
            if info["status"] in ("TERMINATED", "ERROR", "CANCELLED"):
                raise RuntimeError(f"re-placement: {info['status']} {info['status_info']}")
            await asyncio.sleep(0.02)
        else:
            raise TimeoutError(f"session {sid} not RUNNING again")
        lost, up = at(info, "RESTARTING"), at(info, "RUNNING")
        hosts = sorted({k["agent"] for k in info["kernels"]})
        steps = {  # where the re-placement's time goes, from the session's timeline
            f"{a}->{b}": round(at(info, b) - at(info, a), 3)
            for a, b in [
                ("RESTARTING", "PENDING"),
                ("PENDING", "SCHEDULED"),
                ("SCHEDULED", "PREPARING"),
                ("PREPARING", "network"),
                ("network", "RUNNING"),
            ]
            if a in info["timeline"] and b in info["timeline"]
        }
        await gone(api, sid, o)
        agents[node] = start_agent(server, node, token, agent_cpu(n, o))
        await agents_ready(server, agent_cpu(n, o))
        return {
            "timeout_s": lost - t0,
            "replace_s": up - lost,
            "total_s": up - t0,
            "hosts_after": len(hosts),
            "steps": steps,
        }


def agent_cpu(n: int, o: argparse.Namespace) -> float:
    """Room for half the kernels and half of one more (sums of float cores stay below)."""
    return (math.ceil(n / 2) + 0.5) * float(o.cpu)


async def agents_ready(server: TroupeServer, cpu: float, limit: float = 60) -> None:
    """Every agent ALIVE and offering ``cpu`` cores (a restarted one registered again)."""
    names = {agent_name(j) for j in range(1, HOSTS + 1)}
    async with server.client() as api:
        end = time.perf_counter() + limit
        while time.perf_counter() < end:
            rows = (await api.get("/agents")).json()
            ready = {
                a["name"]
                for a in rows
                if a["status"] == "ALIVE" and abs(float(a["cpu"]) - cpu) < 1e-6
            }
            if names <= ready:
                return
            await asyncio.sleep(0.2)
    raise TimeoutError(f"agents not ready with {cpu:g} cores")


async def one_size(server: TroupeServer, n: int, o: argparse.Namespace, token: str,
                   agents: dict[int, subprocess.Popen[bytes]]) -> dict[str, Any]:  # fmt: skip
    for j in list(agents):  # each agent sized for this N
        stop_process(agents[j])
        agents[j] = start_agent(server, j, token, agent_cpu(n, o))
    await agents_ready(server, agent_cpu(n, o))
    ups: list[float] = []
    rounds: list[dict[str, Any]] = []
    loads: list[float] = []
    for i in range(o.rounds):
        loads.append(os.getloadavg()[0])
        ups.append(await fresh(server, n, o, i))
        rounds.append(await replace(server, agents, n, o, token, i))
        r = rounds[-1]
        print(
            f"  N={n} round {i + 1}: fresh {ups[-1]:.2f} s; lost agent: time-out "
            f"{r['timeout_s']:.2f} s + re-placement {r['replace_s']:.2f} s "
            f"(load {loads[-1]:.1f}) {r['steps']}",
            flush=True,
        )
    f = statistics.median(ups)
    rep = statistics.median(r["replace_s"] for r in rounds)
    return {
        "n": n,
        "fresh_s": ups,
        "rounds": rounds,
        "load1": loads,
        "fresh_median_s": round(f, 3),
        "timeout_median_s": round(statistics.median(r["timeout_s"] for r in rounds), 3),
        "replace_median_s": round(rep, 3),
        "ratio": round(rep / f, 3),
    }


async def amain(o: argparse.Namespace) -> list[dict[str, Any]]:
    was_up = bed_nodes() > 0
    if was_up and bed_nodes() < HOSTS:
        raise RuntimeError(f"a test bed of fewer than {HOSTS} nodes is up (someone else's?)")
    server: TroupeServer | None = None
    agents: dict[int, subprocess.Popen[bytes]] = {}
    token = secrets.token_hex(16)
    try:
        if not was_up:
            print(f"bringing up the {HOSTS}-host test bed (not timed) ...", flush=True)
            up = tb("up", str(HOSTS), TB_IMAGES=IMAGE)
            if up.returncode:
                raise RuntimeError(f"testbed.sh up: {up.stdout[-1000:]}{up.stderr[-2000:]}")
        server = start_server(
            "--no-local-agent", "--agent-token", token, "--log-level", "warning",
            "--agent-timeout", f"{o.agent_timeout:g}",
            host=HOST, subnet_pool=POOL,
        )  # fmt: skip
        for j in range(1, HOSTS + 1):
            agents[j] = start_agent(server, j, token, agent_cpu(min(o.sizes), o))
        return [await one_size(server, n, o, token, agents) for n in o.sizes]
    finally:
        if server is not None:
            with contextlib.suppress(Exception):
                await destroy_all(server)
        for p in agents.values():
            stop_process(p)
        if server is not None:
            stop_server(server)
            for j in range(1, HOSTS + 1):
                for sid in server.sessions:
                    sweep(f"troupe.session={sid}", f"unix:///run/troupe-tb/tt{j}/docker.sock")
        if not was_up:
            tb("down", TB_FAST="1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="2,4,8", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpu", type=float, default=0.05, help="cores per kernel")
    ap.add_argument("--mem", default="64m", help="memory per kernel")
    ap.add_argument("--agent-timeout", type=float, default=2.0, help="seconds (the server's)")
    ap.add_argument("--timeout", type=float, default=300)
    o = ap.parse_args()
    rows = asyncio.run(amain(o))
    print(f"\n{'N':>3} {'fresh':>8} {'time-out':>9} {'re-placement':>13} {'ratio':>6}  (medians)")
    for row in rows:
        print(
            f"{row['n']:>3} {row['fresh_median_s']:>7.2f}s {row['timeout_median_s']:>8.2f}s "
            f"{row['replace_median_s']:>12.2f}s {row['ratio']:>6.2f}"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    out = {
        "rounds": o.rounds,
        "agent_timeout_s": o.agent_timeout,
        "hosts": HOSTS,
        "cpu": o.cpu,
        "sizes": rows,
    }
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(f"written: {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
