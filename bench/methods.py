"""The three ways of getting N containers with sshd that ``bench/ready.py`` times: the raw
Engine API (the floor: on one engine, and over the test bed's hosts), docker-compose, and a
troupe session. Each fills a :class:`Run` with its start-up and teardown times and phases."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiodocker
from common import (
    PREFIX,
    RUN_LABEL,
    TroupeServer,
    busy_seconds,
    engine_events,
    free_subnet,
    session_until,
    taken_subnets,
    wait_ports,
)

from troupe.api.models import parse_size

IMAGE = "troupe/base:0.1.0"
SSH_PORT = 2200
#: What every floor and compose container runs: the sshd a troupe kernel runs, minus troupe.
#: (A container started again keeps the key it made, as a troupe kernel keeps its host key.)
SSHD = (
    "mkdir -p /run/sshd && { [ -e /tmp/hk ] || ssh-keygen -q -t ed25519 -N '' -f /tmp/hk; }"
    f" && exec /usr/sbin/sshd -D -e -p {SSH_PORT} -h /tmp/hk"
)
#: Subnets of floor/compose networks (the bench's troupe server: ready.py's TROUPE_POOL): apart
#: from the tests' 10.89/16, a developer server's default 10.88/16 and ad-hoc servers' 10.7x/10.8x.
BENCH_POOL = "10.186.0.0/16"
#: Subnets of the multi-host floor's overlay networks (on the test bed's engines), and the
#: first of the ports its containers publish on their node's address.
MH_FLOOR_POOL = "10.188.0.0/16"
MH_FLOOR_PORT = 32200


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
    then: Callable[[dict[int, Any]], Awaitable[None]] | None = None,
) -> None:
    """What both floors time: the network, then n containers created and started at once, each
    until its sshd answers; ``then`` on them (by index), untimed; then their removal (always)."""
    made: dict[int, Any] = {}
    net = None
    t0, cpu0 = time.perf_counter(), busy_seconds()
    try:
        net = await make_net()
        t_net = time.perf_counter()
        deadline = t0 + o.timeout

        async def one(i: int) -> tuple[float, float, float]:
            dk, config, ready = place(i)
            c = made[i] = await dk.containers.create(config, name=f"{name}-k{i}")
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
        if then is not None:
            await then(made)
    finally:
        t1 = time.perf_counter()
        await asyncio.gather(*(c.delete(force=True) for c in made.values()), return_exceptions=True)
        if net is not None:
            await net.delete()
        if run.up_s is not None:
            run.down_s = time.perf_counter() - t1


def floor_layout(
    dk: aiodocker.Docker, n: int, o: Opts, name: str
) -> tuple[dict[str, Any], Callable[[int], Placement], list[str]]:
    """The floor's cluster on one engine: its bridge network's configuration, where each
    container goes (fixed addresses; ready when the host connects to its port 2200) and the
    containers' addresses."""
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
    return net, place, ips


async def floor(
    dk: aiodocker.Docker,
    n: int,
    o: Opts,
    run: Run,
    tag: str,
    then: Callable[[dict[int, Any], list[str]], Awaitable[None]] | None = None,
) -> None:
    """The floor on one engine (:func:`floor_layout`), timed by :func:`timed_floor`; ``then``
    on its containers and their addresses before their removal."""
    name = f"{PREFIX}f{n}-{tag}"
    net, place, ips = floor_layout(dk, n, o, name)
    after = None if then is None else lambda made: then(made, ips)
    await timed_floor(run, n, o, name, lambda: dk.networks.create(net), place, after)


async def floor_restart(container: Any, ip: str, o: Opts) -> tuple[float, float, float]:
    """The floor of a killed kernel's restart in place: a floor's running ``container`` (at
    ``ip``) killed (SIGKILL through the API), started again as soon as the engine answers for
    it (done with the death), until its sshd answers again: seconds from the kill to the engine
    done, to started, to answering."""
    await asyncio.sleep(o.pause)
    t0 = time.perf_counter()
    await container.kill(signal="SIGKILL")
    await container.show()  # (the engine answers once it is done with the death)
    t_done = time.perf_counter()
    await container.start()
    t_started = time.perf_counter()
    await wait_ports([ip], SSH_PORT, o.timeout, o.poll)
    return t_done - t0, t_started - t0, time.perf_counter() - t0


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
    manager), the containers spread over the nodes' engines as :func:`shares` says, attached to
    it, each publishing sshd's port on its node's address (the host cannot reach overlay
    addresses); ready when the host has read every sshd's banner through those ports."""
    name = f"{PREFIX}fm{n}-{tag}"
    o.subnet_skip += 1
    subnets = list(ipaddress.ip_network(MH_FLOOR_POOL).subnets(new_prefix=24))
    subnet = str(subnets[o.subnet_skip % 200])
    nodes = [node for node, k in enumerate(shares(n, len(docks))) for _ in range(k)]

    def place(i: int) -> Placement:
        node = nodes[i]
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


def shares(n: int, hosts: int) -> list[int]:
    """n kernels over hosts as evenly as they go, the first hosts taking one more (64 over 3:
    22, 21, 21): the floor's layout, and what each test-bed agent has room for."""
    return [n // hosts + (1 if h < n % hosts else 0) for h in range(hosts)]


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
                gone = await api.delete(f"/sessions/{sid}")
                gone.raise_for_status()
                fin = gone.json()  # the answer comes once the teardown is over
                if fin["status"] not in ("TERMINATED", "ERROR", "CANCELLED"):
                    fin = await session_until(api, sid, "final", limit=o.timeout)
                if fin["status"] != "TERMINATED":
                    run.extra["final"] = fin["status"]
            if run.up_s is not None:
                run.down_s = time.perf_counter() - t1
