"""Helpers shared by the benchmarks: statistics, TCP readiness polling, Docker engine access
(events, label sweeps) and a real ``troupe server`` process with its own data and config dirs.

Everything a benchmark creates carries the label ``tbench.run=<run id>`` (or, for troupe's own
containers, ``troupe.session=<id>``) so that :func:`sweep` can remove it after a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
DOCKER = os.environ.get("TROUPE_DOCKER", "/usr/bin/docker")
RUN_LABEL = "tbench.run"
PREFIX = "tbench-"


# --- statistics ---------------------------------------------------------------------------


def p90(xs: list[float]) -> float:
    """90th percentile, inclusive (with 6 samples: between the 5th and 6th smallest)."""
    if len(xs) == 1:
        return xs[0]
    return statistics.quantiles(xs, n=10, method="inclusive")[8]


def summary(xs: list[float]) -> dict[str, float | int | None]:
    if not xs:
        return {"n": 0, "median": None, "p90": None, "min": None, "max": None}
    return {
        "n": len(xs),
        "median": statistics.median(xs),
        "p90": p90(xs),
        "min": min(xs),
        "max": max(xs),
    }


# --- readiness polling --------------------------------------------------------------------


async def wait_port(ip: str, port: int, deadline: float, every: float = 0.01) -> float:
    """Connects to ip:port until it accepts; returns the perf_counter time it did.

    A refused connection answers at once; an address not yet wired up may swallow the SYN,
    hence the short per-attempt time-out.
    """
    while True:
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(ip, port), 0.25)
        except (OSError, TimeoutError):
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{ip}:{port} not reachable in time") from None
            await asyncio.sleep(every)
            continue
        t = time.perf_counter()
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return t


async def wait_ports(ips: Iterable[str], port: int, timeout: float, every: float = 0.01) -> float:
    """Waits until every address accepts on port; returns when the last one did."""
    deadline = time.perf_counter() + timeout
    times = await asyncio.gather(*(wait_port(ip, port, deadline, every) for ip in ips))
    return max(times)


# --- docker engine ------------------------------------------------------------------------


def docker(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, check=check)


def docker_socket() -> str:
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    return host.removeprefix("unix://")


async def engine_events(
    since: float, until: float, filters: dict[str, list[str]]
) -> list[dict[str, Any]]:
    """Past engine events between two wall-clock times (the engine's clock is ours)."""
    transport = httpx.AsyncHTTPTransport(uds=docker_socket())
    async with httpx.AsyncClient(transport=transport, base_url="http://docker") as c:
        r = await c.get(
            "/events",
            params={
                "since": f"{since:.9f}",
                "until": f"{until:.9f}",
                "filters": json.dumps(filters),
            },
            timeout=10,
        )
        r.raise_for_status()
        return [json.loads(line) for line in r.text.splitlines() if line.strip()]


def free_subnet(taken: set[ipaddress.IPv4Network], pool: str, skip: int = 0) -> str:
    """A /24 of pool that overlaps no existing network (skip: start further into the pool)."""
    subnets = list(ipaddress.IPv4Network(pool).subnets(new_prefix=24))
    for net in subnets[skip:] + subnets[:skip]:
        if not any(net.overlaps(t) for t in taken):
            return str(net)
    raise RuntimeError(f"no free /24 left in {pool}")


def taken_subnets() -> set[ipaddress.IPv4Network]:
    out = docker("network", "inspect", *docker("network", "ls", "-q").stdout.split()).stdout
    taken: set[ipaddress.IPv4Network] = set()
    for net in json.loads(out or "[]"):
        for cfg in (net.get("IPAM") or {}).get("Config") or []:
            with contextlib.suppress(ValueError, KeyError):
                n = ipaddress.ip_network(cfg["Subnet"])
                if isinstance(n, ipaddress.IPv4Network):
                    taken.add(n)
    return taken


def sweep(label: str, host: str | None = None) -> list[str]:
    """Removes every container, then every network, carrying the label (key=value), from the
    local engine or the one at host (e.g. a test-bed node's socket)."""
    at = ("-H", host) if host else ()
    removed: list[str] = []
    ids = docker(*at, "ps", "-aq", "--filter", f"label={label}").stdout.split()
    if ids:
        docker(*at, "rm", "-f", *ids)
        removed += ids
    nets = docker(*at, "network", "ls", "-q", "--filter", f"label={label}").stdout.split()
    if nets:
        docker(*at, "network", "rm", *nets)
        removed += nets
    return removed


# --- troupe server ------------------------------------------------------------------------


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class TroupeServer:
    """A ``troupe server`` process started for the benchmark, and the sessions it made."""

    url: str
    key: str
    tmp: Path
    proc: subprocess.Popen[bytes]
    sessions: set[str] = field(default_factory=set)
    #: whether ``tmp`` is a folder start_server made (stop_server removes it)
    own_tmp: bool = False

    @property
    def log_path(self) -> Path:
        return self.tmp / "server.log"

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=f"{self.url}/v1",
            headers={"Authorization": f"Bearer {self.key}"},
            timeout=httpx.Timeout(30, read=320),
        )


def start_server(
    *extra: str, host: str = "127.0.0.1", subnet_pool: str | None = None, tmp: Path | None = None
) -> TroupeServer:
    """Starts ``troupe server`` like the tests do (tests/conftest.py): free port, own dirs
    (in ``tmp``, e.g. to start again on the same data; default: a new temporary one)."""
    own_tmp = tmp is None
    tmp = tmp or Path(tempfile.mkdtemp(prefix=PREFIX))
    port = free_port(host)
    cfg = tmp / "config"
    env = {**os.environ, "TROUPE_CONFIG_DIR": str(cfg)}
    argv = [sys.executable, "-m", "troupe", "server", "--host", host, "--port", str(port)]
    argv += ["--data-dir", str(tmp / "data"), *extra]
    if subnet_pool:
        argv += ["--subnet-pool", subnet_pool]
    with open(tmp / "server.log", "ab") as log:
        proc = subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://{host}:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"troupe server exited:\n{(tmp / 'server.log').read_text()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/v1/health", timeout=1).status_code == 200:
                break
        time.sleep(0.1)
    else:
        stop_process(proc)
        raise RuntimeError(f"troupe server did not answer:\n{(tmp / 'server.log').read_text()}")
    key = json.loads((cfg / "credentials.json").read_text())["api_key"]
    return TroupeServer(url, key, tmp, proc, own_tmp=own_tmp)


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """SIGTERM to the process group we started (start_new_session), SIGKILL if it lingers."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


async def created(api: httpx.AsyncClient, server: TroupeServer, b: dict[str, Any]) -> str:
    """POST /v1/sessions of ``b``: the new session's id, remembered for :func:`destroy_all`."""
    r = await api.post("/sessions", json=b)
    if r.status_code != 201:
        raise RuntimeError(f"POST /sessions: {r.status_code} {r.text[:500]}")
    sid: str = r.json()["id"]
    server.sessions.add(sid)
    return sid


async def session_until(
    api: httpx.AsyncClient, sid: str, until: str, limit: float = 600
) -> dict[str, Any]:
    """Long-polls /wait until the session is RUNNING (until=running) or over (until=final)."""
    final = {"TERMINATED", "ERROR", "CANCELLED"}
    deadline = time.perf_counter() + limit
    while True:
        r = await api.get(f"/sessions/{sid}/wait", params={"until": until, "timeout": 300})
        r.raise_for_status()
        info: dict[str, Any] = r.json()
        if info["status"] in final or (until == "running" and info["status"] == "RUNNING"):
            return info
        if time.perf_counter() > deadline:
            raise TimeoutError(f"session {sid} still {info['status']}")


async def destroy_all(server: TroupeServer) -> None:
    """Destroys every session the benchmark created that is not over yet."""
    async with server.client() as api:
        for sid in list(server.sessions):
            with contextlib.suppress(httpx.HTTPError, TimeoutError):
                r = await api.get(f"/sessions/{sid}")
                if r.status_code == 200 and r.json()["status"] not in (
                    "TERMINATED",
                    "ERROR",
                    "CANCELLED",
                ):
                    await api.delete(f"/sessions/{sid}")
                    await session_until(api, sid, "final", limit=120)


def stop_server(server: TroupeServer, keep: bool = False) -> None:
    """Stops the server, then removes whatever containers/networks its sessions left, and
    the folder start_server made for it (its data and log) unless ``keep`` or the
    environment's ``TBENCH_KEEP=1`` (any bench: to read the server's log afterwards)."""
    stop_process(server.proc)
    for sid in server.sessions:
        sweep(f"troupe.session={sid}")
    if not server.own_tmp:
        return
    if keep or os.environ.get("TBENCH_KEEP") == "1":
        print(f"server folder kept: {server.tmp}", file=sys.stderr)
    else:
        shutil.rmtree(server.tmp, ignore_errors=True)


# --- report -------------------------------------------------------------------------------

#: Order of phase rows; anything else comes after, by name.
PHASES = ["scheduled", "network", "created", "started", "entrypoint", "up_exit", "ready"]
PHASES += ["healthy"]
PHASE_ORIGIN = {
    "troupe": "seconds since the session's created_at",
    "floor": "seconds since the first API call",
    "compose": "seconds since `up -d` was run",
}


def busy_seconds() -> float:
    """CPU time the whole machine has spent so far (all cores, all processes), in seconds:
    the difference over a start-up says how much work it took, which on a machine with few
    cores is what its time mostly depends on (Linux: /proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


class RunLike(Protocol):
    method: str
    n: int
    up_s: float | None
    down_s: float | None
    error: str | None
    phases: dict[str, float]
    kernel_phases: dict[str, dict[str, float]]
    #: the machine's CPU seconds (all cores) from the request until ready
    cpu_s: float | None


def summarize(runs: Sequence[RunLike], methods: Sequence[str]) -> dict[str, Any]:
    """Median/p90 per (method, N), ratios of troupe's medians to the others', phase medians."""
    stats: dict[str, dict[str, Any]] = {}
    for m in methods:
        for n in sorted({r.n for r in runs if r.method == m}):
            these = [r for r in runs if r.method == m and r.n == n]
            ok = [r for r in these if r.error is None]
            stats.setdefault(m, {})[str(n)] = {
                "up": summary([r.up_s for r in ok if r.up_s is not None]),
                "down": summary([r.down_s for r in ok if r.down_s is not None]),
                "cpu": summary([r.cpu_s for r in ok if r.cpu_s is not None]),
                "failed": len(these) - len(ok),
                "phases": phase_medians(ok),
            }
    ratios: dict[str, dict[str, float | None]] = {}
    for size, t in stats.get("troupe", {}).items():
        for other in ("floor", "compose"):
            o = stats.get(other, {}).get(size)
            if o is None:
                continue
            for what in ("up", "down"):
                a, b = t[what]["median"], o[what]["median"]
                ratios.setdefault(size, {})[f"troupe/{other} {what}"] = a / b if a and b else None
    return {"stats": stats, "ratios": ratios}


def phase_medians(runs: Sequence[RunLike]) -> dict[str, float]:
    """Median per phase: the run's own phases, and the slowest kernel's ("kernels.<phase>")."""
    per: dict[str, list[float]] = {}
    for r in runs:
        for p, v in r.phases.items():
            per.setdefault(p, []).append(v)
        for p in {p for k in r.kernel_phases.values() for p in k}:
            slowest = max(k[p] for k in r.kernel_phases.values() if p in k)
            per.setdefault(f"kernels.{p}", []).append(slowest)
    return {p: statistics.median(v) for p, v in per.items()}


def _phase_key(p: str) -> tuple[bool, int, str]:
    base = p.removeprefix("kernels.")
    return (p.startswith("kernels."), PHASES.index(base) if base in PHASES else 99, p)


def _s(x: float | None, unit: str = "") -> str:
    return "-" if x is None else f"{x:.2f}{unit}"


def print_tables(title: str, result: dict[str, Any], console: Console | None = None) -> None:
    """The summary as Rich tables: times, ratios, and per method its phase medians."""
    console = console or Console()
    t = Table(title=title, caption="CPU up: the machine's CPU seconds (all cores), median")
    heads = ("method", "N", "ok", "up median", "up p90", "down median", "down p90", "CPU up")
    for col in heads:
        t.add_column(col, justify="left" if col == "method" else "right")
    for m, per_n in result["stats"].items():
        for n, s in per_n.items():
            ok = str(s["up"]["n"]) + (f" ({s['failed']} failed)" if s["failed"] else "")
            up, down, cpu = s["up"], s["down"], s.get("cpu") or {}
            t.add_row(
                m, n, ok, _s(up["median"]), _s(up["p90"]), _s(down["median"]), _s(down["p90"]),
                _s(cpu.get("median")),
            )  # fmt: skip
    console.print(t)
    if result["ratios"]:
        cols = [
            f"troupe/{o} {w}"
            for w in ("up", "down")
            for o in ("floor", "compose")
            if any(f"troupe/{o} {w}" in v for v in result["ratios"].values())
        ]
        rt = Table(title="troupe's median / the other's median")
        rt.add_column("N", justify="right")
        for c in cols:
            rt.add_column(c, justify="right")
        for n, v in result["ratios"].items():
            rt.add_row(n, *(_s(v.get(c), "x") for c in cols))
        console.print(rt)
    for m, per_n in result["stats"].items():
        names = sorted({p for s in per_n.values() for p in s["phases"]}, key=_phase_key)
        if not names:
            if m == "troupe":
                console.print("troupe: this server reports no `phases`")
            continue
        pt = Table(title=f"{m}: phase medians, {PHASE_ORIGIN.get(m, 'seconds')}")
        pt.add_column("phase")
        for n in per_n:
            pt.add_column(f"N={n}", justify="right")
        for p in names:
            label = p.replace("kernels.", "slowest kernel: ")
            pt.add_row(label, *(_s(s["phases"].get(p)) for s in per_n.values()))
        console.print(pt)
