"""Start-up and teardown of N-kernel clusters: troupe against raw Docker and docker-compose.

Usage:
    .venv/bin/python bench/ready.py [--sizes 2,4,8,16] [--rounds 6] [--scale]

For each N, rounds interleave three ways of getting N containers with sshd on port 2200:
  floor    the Docker Engine API directly: a bridge network, N containers created and started
           at once, ready when the host connects to every container's port 2200;
  compose  ``docker-compose up -d`` (v1) of a generated file with the same containers (and a
           healthcheck), ready the same way; teardown ``docker-compose down -t 0``;
  troupe   a real ``troupe server``: POST /v1/sessions, ready when /wait reports RUNNING
           (which also means every kernel reaches every other's sshd); teardown DELETE until
           TERMINATED.
The three live in bench/methods.py. The same per-container limits (--cpu, --mem) apply to all
three. Prints medians, p90s and ratios and writes them with every round to
bench/results/ready.json; never passes or fails on time (machines differ). ``--scale`` instead
runs a 32-kernel single-node session against the floor, and a 64-kernel multi-node session
(--mh-kernels) over the 3-host test bed (scripts/testbed.sh) against a floor there (an overlay
network, 22/21/21 containers per host, each publishing sshd's port on its host's address), and
writes bench/results/ready-scale.json (``--scale-size 0``: the multi-node part alone).
Everything made is named ``tbench-*`` (troupe's own containers: ``troupe-<session id>-*`` of
sessions named ``tbench-*``) and removed on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiodocker
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    PREFIX,
    ROOT,
    RUN_LABEL,
    TroupeServer,
    destroy_all,
    docker,
    print_tables,
    start_server,
    stop_process,
    stop_server,
    summarize,
    sweep,
)
from methods import (
    IMAGE,
    Opts,
    Run,
    compose,
    floor,
    floor_multihost,
    shares,
    troupe,
)

from troupe.api.models import parse_size

#: Subnets of the bench's troupe server (apart from methods.BENCH_POOL, see there).
TROUPE_POOL = "10.187.0.0/16"
METHODS = ("floor", "compose", "troupe")
RESULTS = ROOT / "bench" / "results"
TB = ROOT / "scripts" / "testbed.sh"
TB_HOST = "10.123.0.1"
TB_AGENT_PORT = 6111  # not the tests' 6011: an agent of a test run may hold that one
console = Console()


# --- the rounds ---------------------------------------------------------------------------

Method = Callable[[int, Run, str], Awaitable[None]]


async def rounds(
    methods: dict[str, Method], sizes: list[int], n_rounds: int, warmup: int, o: Opts
) -> list[Run]:
    """A B C A B C ...: every round runs each size with each method, one after another, so
    that drifting background load hits all methods alike. Warm-up rounds (negative numbers,
    smallest size only) load images and code paths and are not kept."""
    runs: list[Run] = []
    for r in range(-warmup, n_rounds):
        for n in sizes if r >= 0 else sizes[:1]:
            for name, method in methods.items():
                run = Run(name, n, r, load1=os.getloadavg()[0])
                tag = f"r{r if r >= 0 else 'w'}-{o.run_id}"
                try:
                    await method(n, run, tag)
                except Exception as e:
                    run.error = f"{type(e).__name__}: {e}"[:1000]
                show(run, n_rounds)
                if r >= 0:
                    runs.append(run)
                await asyncio.sleep(o.pause)
    return runs


def show(run: Run, n_rounds: int) -> None:
    where = f"round {run.round + 1}/{n_rounds}" if run.round >= 0 else "warm-up"
    if run.error:
        console.print(f"  {where:>12} N={run.n:<3} {run.method:<8} [red]failed: {run.error}[/]")
        return
    down = f"{run.down_s:.2f}" if run.down_s is not None else "?"
    console.print(
        f"  {where:>12} N={run.n:<3} {run.method:<8} up {run.up_s:6.2f} s"
        f"   down {down:>6} s   (load {run.load1:.1f})"
    )


# --- scale --------------------------------------------------------------------------------


async def multihost(
    o: Opts, hosts: int, kernels: int, n_rounds: int, warmup: int, keep: bool
) -> dict[str, Any]:
    """A multi-node session over the test bed's hosts, about ``kernels/hosts`` kernels per
    host (:func:`shares`), against the floor on the same engines (:func:`floor_multihost`).

    Brings the bed up if it is not (and then down again). Each agent has room for the largest
    share and no more, so the scheduler must spread the session over an overlay network.
    """
    was_up = bed_nodes() > 0
    if was_up and bed_nodes() < hosts:
        raise RuntimeError(f"a test bed of fewer than {hosts} nodes is up (someone else's?)")
    token = secrets.token_hex(16)
    server: TroupeServer | None = None
    agents: list[subprocess.Popen[bytes]] = []
    try:
        if not was_up:
            console.print(f"bringing up the {hosts}-host test bed (not timed) ...")
            up = tb("up", str(hosts), TB_IMAGES=IMAGE)
            if up.returncode:
                raise RuntimeError(f"testbed.sh up: {up.stdout[-1000:]}{up.stderr[-2000:]}")
        server = start_server(
            "--no-local-agent",
            "--agent-token",
            token,
            "--log-level",
            "warning",
            host=TB_HOST,
            subnet_pool=TROUPE_POOL,
        )
        share = max(shares(kernels, hosts))
        for i in range(1, hosts + 1):
            # room for `share` kernels and half of one more: sums of float cores stay below it
            agents.append(start_agent(server, i, token, cpu=(share + 0.5) * o.cpu))
        await wait_agents(server, {f"tbench-tt{i}" for i in range(1, hosts + 1)})
        sess = server
        docks = [
            aiodocker.Docker(url=f"unix:///run/troupe-tb/tt{i}/docker.sock")
            for i in range(1, hosts + 1)
        ]

        async def mh_floor(n: int, run: Run, tag: str) -> None:
            await floor_multihost(docks, n, o, run, tag)

        async def mh(n: int, run: Run, tag: str) -> None:
            await troupe(sess, n, o, run, tag, mode="multi-node")

        try:
            table: dict[str, Method] = {"floor": mh_floor, "troupe": mh}
            runs = await rounds(table, [kernels], n_rounds, warmup, o)
        finally:
            for d in docks:
                await d.close()
        return {
            "hosts": hosts,
            "kernels": kernels,
            "runs": [asdict(r) for r in runs],
            **summarize(runs, METHODS),
        }
    finally:
        if server is not None:
            with contextlib.suppress(Exception):
                await destroy_all(server)
        for p in agents:
            stop_process(p)
        if server is not None:
            stop_server(server, keep)
            if was_up:  # someone else's bed stays: remove only what this run left there
                for i in range(1, hosts + 1):
                    node = f"unix:///run/troupe-tb/tt{i}/docker.sock"
                    sweep(f"{RUN_LABEL}={o.run_id}", node)
                    for sid in server.sessions:
                        sweep(f"troupe.session={sid}", node)
        if not was_up:
            tb("down", TB_FAST="1")


def bed_nodes() -> int:
    """Nodes of the healthy test bed that is up (0: none, or not healthy)."""
    if tb("status").returncode != 0:
        return 0
    with contextlib.suppress(OSError, ValueError):
        return int(Path("/run/troupe-tb/nodes").read_text().strip())
    return 0


def tb(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(TB), *args], env={**os.environ, **env}, capture_output=True, text=True
    )


def start_agent(server: TroupeServer, i: int, token: str, cpu: float) -> subprocess.Popen[bytes]:
    """``troupe agent`` in node i's network namespace against node i's dockerd (as the
    multi-host tests do), offering ``cpu`` cores."""
    argv = ["bash", str(TB), "exec", str(i), sys.executable, "-m", "troupe", "agent"]
    argv += ["--manager", server.url, "--token", token, "--name", f"tbench-tt{i}"]
    argv += ["--listen", f"10.123.0.{10 + i}:{TB_AGENT_PORT}", "--cpu", f"{cpu:g}"]
    argv += ["--docker-host", f"unix:///run/troupe-tb/tt{i}/docker.sock", "--mem", "3g"]
    argv += ["--data-root", str(server.tmp / "shared-data"), "--heartbeat", "0.5"]
    with open(server.tmp / f"agent-tt{i}.log", "ab") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


async def wait_agents(server: TroupeServer, names: set[str], limit: float = 60) -> None:
    async with server.client() as api:
        end = time.perf_counter() + limit
        while time.perf_counter() < end:
            alive = {a["name"] for a in (await api.get("/agents")).json() if a["status"] == "ALIVE"}
            if names <= alive:
                return
            await asyncio.sleep(0.2)
    raise RuntimeError(f"agents {sorted(names)} not ALIVE; logs in {server.tmp} (with --keep)")


# --- main ---------------------------------------------------------------------------------


def meta(args: argparse.Namespace, o: Opts) -> dict[str, Any]:
    def out(*cmd: str) -> str:
        with contextlib.suppress(OSError):
            return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
        return ""

    return {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "docker": docker("version", "-f", "{{.Server.Version}}").stdout.strip(),
        "docker_compose": out("docker-compose", "version", "--short"),
        "git": out("git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"),
        "image": IMAGE,
        "cpu": o.cpu,
        "mem": o.mem,
        "poll_ms": o.poll * 1000,
        "health_interval": o.health_interval,
        "argv": sys.argv[1:],
        "args": vars(args),
    }


async def amain(args: argparse.Namespace, o: Opts) -> dict[str, Any]:
    sizes = [args.scale_size] if args.scale else [int(x) for x in args.sizes.split(",")]
    sizes = [n for n in sizes if n > 0]  # --scale-size 0: the multi-node part alone
    methods = ["floor", "troupe"] if args.scale else args.methods.split(",")
    n_rounds = args.scale_rounds if args.scale else args.rounds
    result: dict[str, Any] = {"meta": meta(args, o)}
    server: TroupeServer | None = None
    try:
        async with aiodocker.Docker() as dk:
            table: dict[str, Method] = {}
            if "floor" in methods:
                table["floor"] = lambda n, run, tag: floor(dk, n, o, run, tag)
            if "compose" in methods:
                table["compose"] = lambda n, run, tag: compose(n, o, run, tag)
            if "troupe" in methods and sizes:
                cpu = max(2.0, max(sizes, default=0) * o.cpu)
                mem = max(8 * 1024**3, max(sizes, default=0) * parse_size(o.mem))
                server = start_server(
                    "--cpu", f"{cpu:g}", "--mem", str(mem), "--log-level", "warning",
                    subnet_pool=TROUPE_POOL,
                )  # fmt: skip
                srv = server
                table["troupe"] = lambda n, run, tag: troupe(srv, n, o, run, tag)
            unknown = set(methods) - set(METHODS)
            if unknown:
                raise SystemExit(f"unknown methods: {sorted(unknown)}")
            console.print(
                f"[bold]{'scale: ' if args.scale else ''}N={sizes}, {n_rounds} rounds, "
                f"methods {list(table)}, {o.cpu:g} CPU / {o.mem} per container[/]"
            )
            if sizes:
                runs = await rounds(table, sizes, n_rounds, args.warmup, o)
                result.update({"runs": [asdict(r) for r in runs], **summarize(runs, METHODS)})
                print_tables("start-up (up) and teardown (down), seconds", result, console)
        if args.scale and not args.no_multihost:
            if server is not None:
                await destroy_all(server)
                stop_server(server, args.keep)
                server = None
            console.print(f"[bold]multi-node: {args.mh_kernels} kernels over {args.hosts} hosts")
            try:
                mh = await multihost(
                    o, args.hosts, args.mh_kernels, n_rounds, args.warmup, args.keep
                )
                result["multihost"] = mh
                print_tables(f"multi-node over {args.hosts} test-bed hosts", mh, console)
            except Exception as e:
                console.print(f"[red]multi-node part failed: {e}[/]")
                result["multihost"] = {"error": str(e)}
    finally:
        if server is not None:
            with contextlib.suppress(Exception):
                await destroy_all(server)
            stop_server(server, args.keep)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", default="2,4,8,16", help="cluster sizes, comma-separated")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--methods", default=",".join(METHODS), help="subset of floor,compose,troupe")
    ap.add_argument("--warmup", type=int, default=1, help="unrecorded rounds first (smallest N)")
    ap.add_argument(
        "--cpu",
        type=float,
        help="cores per container, all methods (default 1; 0.05 with --scale, as the issue asks)",
    )
    ap.add_argument("--mem", default="64m", help="memory per container, all methods")
    ap.add_argument("--poll-ms", type=float, default=10, help="TCP readiness poll interval")
    ap.add_argument("--health-interval", default="100ms", help="compose healthcheck interval")
    ap.add_argument("--pause", type=float, default=1.0, help="seconds between runs")
    ap.add_argument("--timeout", type=float, default=180, help="limit of one start or teardown")
    ap.add_argument("--scale", action="store_true", help="N=32 vs floor, and multi-node")
    ap.add_argument("--scale-rounds", type=int, default=3)
    ap.add_argument(
        "--scale-size", type=int, default=32, help="--scale: single-node kernels (0: none)"
    )
    ap.add_argument("--no-multihost", action="store_true", help="--scale without the test bed")
    ap.add_argument("--hosts", type=int, default=3, help="--scale: test-bed hosts")
    ap.add_argument("--mh-kernels", type=int, default=64, help="--scale: multi-node kernels")
    ap.add_argument("--out", type=Path, help="JSON file (default bench/results/ready.json)")
    ap.add_argument("--keep", action="store_true", help="keep the server's temp dir (logs)")
    args = ap.parse_args()
    run_id = secrets.token_hex(3)
    workdir = Path(f"/tmp/{PREFIX}{run_id}")
    workdir.mkdir(parents=True, exist_ok=True)
    o = Opts(
        run_id=run_id,
        cpu=args.cpu if args.cpu is not None else (0.05 if args.scale else 1.0),
        mem=args.mem,
        poll=args.poll_ms / 1000,
        timeout=args.timeout,
        health_interval=args.health_interval,
        pause=args.pause,
        workdir=workdir,
    )
    out = args.out or RESULTS / ("ready-scale.json" if args.scale else "ready.json")
    try:
        result = asyncio.run(amain(args, o))
    except KeyboardInterrupt:
        console.print("[yellow]interrupted; cleaning up[/]")
        raise SystemExit(130) from None
    finally:
        left = sweep(f"{RUN_LABEL}={run_id}")
        if left:
            console.print(f"[yellow]removed {len(left)} leftover containers/networks[/]")
        shutil.rmtree(workdir, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    console.print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")


if __name__ == "__main__":
    main()
