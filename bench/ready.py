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
The same per-container limits (--cpu, --mem) apply to all three. Prints medians, p90s and
ratios and writes them with every round to bench/results/ready.json; never passes or fails on
time (machines differ). ``--scale`` instead runs a 32-kernel single-node session against the
floor, and a 12-kernel multi-node session over the 3-host test bed (scripts/testbed.sh)
against a floor there (an overlay network, 4 containers per host, each publishing sshd's port on
its host's address), and writes bench/results/ready-scale.json. Everything made is named
``tbench-*`` (troupe's own containers: ``troupe-<session id>-*`` of sessions named
``tbench-*``) and removed on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import os
import platform
import secrets
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
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
    busy_seconds,
    destroy_all,
    docker,
    engine_events,
    free_subnet,
    print_tables,
    session_until,
    start_server,
    stop_process,
    stop_server,
    summarize,
    sweep,
    taken_subnets,
    wait_ports,
)

from troupe.api.models import parse_size

IMAGE = "troupe/base:0.1.0"
SSH_PORT = 2200
#: What every floor and compose container runs: the sshd a troupe kernel runs, minus troupe.
SSHD = (
    "mkdir -p /run/sshd && ssh-keygen -q -t ed25519 -N '' -f /tmp/hk"
    f" && exec /usr/sbin/sshd -D -e -p {SSH_PORT} -h /tmp/hk"
)
#: Subnets of floor/compose networks, and of the bench's troupe server: apart from the tests'
#: 10.89/16, a developer server's default 10.88/16 and the 10.7x/10.8x of ad-hoc servers.
BENCH_POOL = "10.186.0.0/16"
#: Subnets of the multi-host floor's overlay networks (on the test bed's engines), and the
#: first of the ports its containers publish on their node's address.
MH_FLOOR_POOL = "10.188.0.0/16"
MH_FLOOR_PORT = 32200
TROUPE_POOL = "10.187.0.0/16"
METHODS = ("floor", "compose", "troupe")
RESULTS = ROOT / "bench" / "results"
TB = ROOT / "scripts" / "testbed.sh"
TB_HOST = "10.123.0.1"
TB_AGENT_PORT = 6111  # not the tests' 6011: an agent of a test run may hold that one
console = Console()


@dataclass
class Opts:
    run_id: str
    cpu: float
    mem: str
    poll: float
    timeout: float
    health_interval: str
    pause: float
    workdir: Path
    subnet_skip: int = 0

    @property
    def labels(self) -> dict[str, str]:
        return {RUN_LABEL: self.run_id}

    def next_subnet(self) -> tuple[str, list[str]]:
        """A fresh /24 (not the one just removed, which the engine may still be releasing)."""
        self.subnet_skip += 1
        subnet = free_subnet(taken_subnets(), BENCH_POOL, skip=self.subnet_skip % 200)
        hosts = [str(h) for h in ipaddress.ip_network(subnet).hosts()]
        return subnet, hosts


@dataclass
class Run:
    method: str
    n: int
    round: int
    up_s: float | None = None
    down_s: float | None = None
    cpu_s: float | None = None
    error: str | None = None
    #: phase -> seconds since the start (floor) or since the session's created_at (troupe)
    phases: dict[str, float] = field(default_factory=dict)
    kernel_phases: dict[str, dict[str, float]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    load1: float = 0.0


# --- A: floor -----------------------------------------------------------------------------


#: Where the floor puts container i: the engine, its configuration, and how to wait (until a
#: deadline) for its sshd; returns when it answered.
Placement = tuple[aiodocker.Docker, dict[str, Any], Callable[[float], Awaitable[float]]]


def sshd_container(o: Opts, i: int, network: str) -> dict[str, Any]:
    """A floor container: the image's sshd on network, with the run's limits and labels."""
    return {
        "Image": IMAGE,
        "Cmd": ["/bin/sh", "-c", SSHD],
        "Hostname": f"k{i}",
        "Labels": o.labels,
        "HostConfig": {
            "NetworkMode": network,
            "NanoCpus": int(o.cpu * 1e9),
            "Memory": parse_size(o.mem),
            "MemorySwap": parse_size(o.mem),
        },
    }


async def timed_floor(
    run: Run,
    n: int,
    o: Opts,
    name: str,
    make_net: Callable[[], Awaitable[Any]],
    place: Callable[[int], Placement],
) -> None:
    """What both floors time: the network, then n containers created and started at once, each
    until its sshd answers; then their removal (always)."""
    made: list[Any] = []
    net = None
    t0, cpu0 = time.perf_counter(), busy_seconds()
    try:
        net = await make_net()
        t_net = time.perf_counter()
        deadline = t0 + o.timeout

        async def one(i: int) -> tuple[float, float, float]:
            dk, config, ready = place(i)
            c = await dk.containers.create(config, name=f"{name}-k{i}")
            made.append(c)
            created = time.perf_counter()
            await c.start()
            return created, time.perf_counter(), await ready(deadline)

        got = await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)
        errors = [g for g in got if isinstance(g, BaseException)]
        if errors:
            raise errors[0]
        times = [g for g in got if not isinstance(g, BaseException)]
        run.up_s = max(t[2] for t in times) - t0
        run.cpu_s = busy_seconds() - cpu0
        run.phases = {
            "network": t_net - t0,
            "created": max(t[0] for t in times) - t0,
            "started": max(t[1] for t in times) - t0,
            "ready": run.up_s,
        }
    finally:
        t1 = time.perf_counter()
        await asyncio.gather(*(c.delete(force=True) for c in made), return_exceptions=True)
        if net is not None:
            await net.delete()
        if run.up_s is not None:
            run.down_s = time.perf_counter() - t1


async def floor(dk: aiodocker.Docker, n: int, o: Opts, run: Run, tag: str) -> None:
    """The floor on one engine: a bridge network with fixed addresses; ready when the host
    connects to every container's port 2200."""
    name = f"{PREFIX}f{n}-{tag}"
    subnet, hosts = o.next_subnet()
    ips = hosts[1 : n + 1]

    def place(i: int) -> Placement:
        config = sshd_container(o, i, name)
        config["NetworkingConfig"] = {
            "EndpointsConfig": {name: {"IPAMConfig": {"IPv4Address": ips[i]}}}
        }

        async def ready(deadline: float) -> float:
            return await wait_ports([ips[i]], SSH_PORT, deadline - time.perf_counter(), o.poll)

        return dk, config, ready

    ipam = {"Config": [{"Subnet": subnet, "Gateway": hosts[0]}]}
    net = {
        "Name": name,
        "CheckDuplicate": True,
        "Driver": "bridge",
        "Labels": o.labels,
        "IPAM": ipam,
    }
    await timed_floor(run, n, o, name, lambda: dk.networks.create(net), place)


async def wait_banner(host: str, port: int, deadline: float, every: float = 0.01) -> float:
    """Connects to host:port until sshd's banner arrives; returns the perf_counter time it did.
    (A published port accepts in docker-proxy before the container's sshd listens.)"""
    while True:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 0.25)
            try:
                banner = await asyncio.wait_for(reader.readexactly(4), 0.5)
            finally:
                writer.close()
            if banner == b"SSH-":
                return time.perf_counter()
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            pass
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{host}:{port}: no sshd banner in time")
        await asyncio.sleep(every)


async def floor_multihost(
    docks: list[aiodocker.Docker], n: int, o: Opts, run: Run, tag: str
) -> None:
    """The floor over the test bed: an attachable overlay network made on node 1 (the swarm's
    manager), n/hosts containers on each node's engine attached to it, each publishing sshd's
    port on its node's address (the host cannot reach overlay addresses); ready when the host
    has read every sshd's banner through those ports."""
    name = f"{PREFIX}fm{n}-{tag}"
    o.subnet_skip += 1
    subnets = list(ipaddress.ip_network(MH_FLOOR_POOL).subnets(new_prefix=24))
    subnet = str(subnets[o.subnet_skip % 200])
    per = n // len(docks)

    def place(i: int) -> Placement:
        node = i // per
        addr, port = f"10.123.0.{11 + node}", MH_FLOOR_PORT + i
        config = sshd_container(o, i, name)
        config["ExposedPorts"] = {f"{SSH_PORT}/tcp": {}}
        binding = {"HostIp": addr, "HostPort": str(port)}
        config["HostConfig"]["PortBindings"] = {f"{SSH_PORT}/tcp": [binding]}
        return docks[node], config, lambda deadline: wait_banner(addr, port, deadline, o.poll)

    ipam = {"Config": [{"Subnet": subnet}]}
    net = {
        "Name": name,
        "CheckDuplicate": True,
        "Driver": "overlay",
        "Attachable": True,
        "Labels": o.labels,
        "IPAM": ipam,
    }
    await timed_floor(run, n, o, name, lambda: docks[0].networks.create(net), place)


# --- B: docker-compose --------------------------------------------------------------------


def compose_file(n: int, o: Opts, subnet: str, ips: list[str]) -> dict[str, Any]:
    """Compose file format 2.4: the last one with cpus/mem_limit and healthchecks together."""
    health = {
        "test": ["CMD", "bash", "-c", f"exec 3<>/dev/tcp/127.0.0.1/{SSH_PORT}"],
        "interval": o.health_interval,
        "timeout": "1s",
        "retries": 1000,
    }
    services = {
        f"k{i}": {
            "image": IMAGE,
            "command": ["/bin/sh", "-c", SSHD.replace("$", "$$")],
            "hostname": f"k{i}",
            "labels": o.labels,
            "cpus": o.cpu,
            "mem_limit": o.mem,
            "memswap_limit": o.mem,
            "healthcheck": health,
            "networks": {"net": {"ipv4_address": ip}},
        }
        for i, ip in enumerate(ips)
    }
    net = {"labels": o.labels, "ipam": {"config": [{"subnet": subnet}]}}
    return {"version": "2.4", "services": services, "networks": {"net": net}}


async def compose_cmd(base: list[str], *args: str) -> None:
    p = await asyncio.create_subprocess_exec(
        *base, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await p.communicate()
    if p.returncode:
        raise RuntimeError(f"docker-compose {' '.join(args)}: {out.decode()[-2000:]}")


async def compose(n: int, o: Opts, run: Run, tag: str) -> None:
    project = f"{PREFIX}c{n}-{tag}"
    subnet, hosts = o.next_subnet()
    ips = hosts[1 : n + 1]
    path = o.workdir / f"{project}.yml"
    path.write_text(json.dumps(compose_file(n, o, subnet, ips), indent=1))  # JSON is YAML
    base = ["docker-compose", "--ansi", "never", "-p", project, "-f", str(path)]
    wall0, t0, cpu0 = time.time(), time.perf_counter(), busy_seconds()
    try:
        await compose_cmd(base, "up", "-d", "--no-color", "--quiet-pull")
        t_up = time.perf_counter()
        t_ready = await wait_ports(ips, SSH_PORT, o.timeout, o.poll)
        run.up_s = t_ready - t0
        run.cpu_s = busy_seconds() - cpu0
        run.phases = {"up_exit": t_up - t0, "ready": run.up_s}
        healthy = await compose_healthy(project, n, wall0)
        if healthy is not None:
            run.phases["healthy"] = healthy
    finally:
        t1 = time.perf_counter()
        try:
            await compose_cmd(base, "down", "-t", "0")
        finally:
            path.unlink(missing_ok=True)
        if run.up_s is not None:
            run.down_s = time.perf_counter() - t1


async def compose_healthy(project: str, n: int, wall0: float, limit: float = 10) -> float | None:
    """When the last container reported healthy, from the engine's events (None: not in time)."""
    filters = {"type": ["container"], "label": [f"com.docker.compose.project={project}"]}
    end = time.perf_counter() + limit
    while time.perf_counter() < end:
        events = await engine_events(wall0, time.time(), filters)
        first: dict[str, int] = {}
        for e in events:
            if str(e.get("status", "")).startswith("health_status: healthy"):
                first.setdefault(e["id"], int(e["timeNano"]))
        if len(first) >= n:
            return max(first.values()) / 1e9 - wall0
        await asyncio.sleep(0.2)
    return None


# --- C: troupe ----------------------------------------------------------------------------


def since_created(info: dict[str, Any], stamps: dict[str, str]) -> dict[str, float]:
    created = datetime.fromisoformat(info["created_at"])
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    out = {}
    for k, v in stamps.items():
        with contextlib.suppress(ValueError, TypeError):
            t = datetime.fromisoformat(v)
            out[k] = (t.replace(tzinfo=t.tzinfo or UTC) - created).total_seconds()
    return out


async def troupe(
    server: TroupeServer, n: int, o: Opts, run: Run, tag: str, mode: str = "single-node"
) -> None:
    body = {
        "name": f"{PREFIX}{n}-{tag}",
        "image": IMAGE,
        "cluster_size": n,
        "cluster_mode": mode,
        "resources": {"cpu": o.cpu, "mem": o.mem},
    }
    async with server.client() as api:
        t0, cpu0 = time.perf_counter(), busy_seconds()
        r = await api.post("/sessions", json=body)
        if r.status_code != 201:
            raise RuntimeError(f"POST /sessions: {r.status_code} {r.text[:500]}")
        sid = r.json()["id"]
        server.sessions.add(sid)
        info: dict[str, Any] = {}
        try:
            info = await session_until(api, sid, "running", limit=o.timeout)
            t_run = time.perf_counter()
            if info["status"] != "RUNNING":
                raise RuntimeError(f"session {info['status']}: {info.get('status_info')}")
            run.up_s = t_run - t0
            run.cpu_s = busy_seconds() - cpu0
            run.phases = {k: float(v) for k, v in (info.get("phases") or {}).items()}
            run.kernel_phases = {
                k["hostname"]: {p: float(v) for p, v in k["phases"].items()}
                for k in info.get("kernels", [])
                if k.get("phases")
            }
            run.extra["timeline"] = since_created(info, info.get("timeline") or {})
            run.extra["agents"] = dict(Counter(k.get("agent") for k in info.get("kernels", [])))
        finally:
            t1 = time.perf_counter()
            if info.get("status") not in ("TERMINATED", "ERROR", "CANCELLED"):
                (await api.delete(f"/sessions/{sid}")).raise_for_status()
                fin = await session_until(api, sid, "final", limit=o.timeout)
                if fin["status"] != "TERMINATED":
                    run.extra["final"] = fin["status"]
            if run.up_s is not None:
                run.down_s = time.perf_counter() - t1


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
    """A multi-node session over the test bed's hosts, ``kernels/hosts`` kernels per host,
    against the floor on the same engines (:func:`floor_multihost`).

    Brings the bed up if it is not (and then down again). Each agent has room for its share
    and no more, so the scheduler must spread the session over an overlay network.
    """
    if kernels % hosts:
        raise ValueError("kernels must be a multiple of hosts")
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
        share = kernels // hosts
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
            stop_server(server)
            if was_up:  # someone else's bed stays: remove only what this run left there
                for i in range(1, hosts + 1):
                    node = f"unix:///run/troupe-tb/tt{i}/docker.sock"
                    sweep(f"{RUN_LABEL}={o.run_id}", node)
                    for sid in server.sessions:
                        sweep(f"troupe.session={sid}", node)
            if not keep:
                shutil.rmtree(server.tmp, ignore_errors=True)
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
    raise RuntimeError(f"agents {sorted(names)} not ALIVE; logs in {server.tmp}")


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
            if "troupe" in methods:
                cpu = max(2.0, max(sizes) * o.cpu)
                mem = max(8 * 1024**3, max(sizes) * parse_size(o.mem))
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
            runs = await rounds(table, sizes, n_rounds, args.warmup, o)
            result.update({"runs": [asdict(r) for r in runs], **summarize(runs, METHODS)})
            print_tables("start-up (up) and teardown (down), seconds", result, console)
        if args.scale and not args.no_multihost:
            if server is not None:
                await destroy_all(server)
                stop_server(server)
                if not args.keep:
                    shutil.rmtree(server.tmp, ignore_errors=True)
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
            stop_server(server)
            if not args.keep:
                shutil.rmtree(server.tmp, ignore_errors=True)
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
    ap.add_argument("--scale-size", type=int, default=32, help="--scale: single-node kernels")
    ap.add_argument("--no-multihost", action="store_true", help="--scale without the test bed")
    ap.add_argument("--hosts", type=int, default=3, help="--scale: test-bed hosts")
    ap.add_argument("--mh-kernels", type=int, default=12, help="--scale: multi-node kernels")
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
