"""Time the sessions API of a real ``troupe server`` and measure its memory.

A ``troupe server --no-local-agent`` process (no Docker needed) runs on a free port with its
own data and config directories in a temporary directory. Between runs the server is stopped
and stored sessions (mostly finished, some with 2-4 kernels, a skewed mix of owners) are
written straight into its SQLite file through the store's tables. Then, over HTTP with
keep-alive, one request after another:

- ``GET /v1/sessions`` as ``troupe session list`` sends it (``all=false``), and with
  ``all=true`` (``--all``), as the admin and as the busiest user;
- ``GET /v1/sessions/{name}`` of random stored names, as the admin and as that user.

Memory is the server's VmRSS and VmHWM (peak) from ``/proc/PID/status``: idle with an empty
database, and after the same requests with ``--big`` sessions.

Prints figures and writes ``bench/results/api.json``; passes or fails nothing. Usage:
    .venv/bin/python bench/api.py [--sessions 5000] [--big 10000] [--requests 200]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import common
import httpx
from sqlalchemy import create_engine, func, insert, select

from troupe.manager.auth import hash_key
from troupe.manager.store.models import Kernel, Session, User

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "api.json"
G = 1024**3
PREFIXES = ["train", "eval", "notebook", "sweep", "debug", "infer", "dev", "bench"]
#: the bench user's key (its hash is stored; the key is only ever used here)
USER_KEY = "bench-user-key-" + "0" * 32
#: seconds one case may take: slow answers are timed fewer times (at least 10)
BUDGET = 20.0


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    url: str
    key: str

    def memory(self) -> dict[str, float]:
        """VmRSS and VmHWM in MiB."""
        out: dict[str, float] = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                out[name] = int(value.split()[0]) / 1024
        return out

    def cpu_ms(self) -> float:
        """CPU time the server used so far (user + system, all threads), in ms."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def start(tmp: Path) -> Server:
    """The server on the data in ``tmp`` (started again after each fill), without Docker."""
    s = common.start_server("--no-local-agent", "--log-level", "warning", tmp=tmp)
    return Server(s.proc, s.url, s.key)


# -- filling the database ------------------------------------------------------------------


def iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def fill(db: Path, total: int, seed: int = 1) -> None:
    """Adds stored sessions until the database holds ``total`` (users made on the first call)."""
    rnd = random.Random(seed + total)
    engine = create_engine(f"sqlite:///{db}")
    with engine.begin() as conn:
        have = conn.execute(select(func.count()).select_from(Session)).scalar_one()
        users = list(conn.execute(select(User.id, User.name, User.admin)))
        if len(users) == 1:  # only the admin: add 30 users, one with the bench key
            now = datetime.now(UTC)
            rows = [
                {
                    "id": str(uuid.uuid4()),
                    "name": f"user{i:02d}",
                    "admin": False,
                    "key_hash": hash_key(USER_KEY if i == 0 else uuid.uuid4().hex),
                    "created_at": now,
                    "limits": {},
                }
                for i in range(30)
            ]
            conn.execute(insert(User), rows)
            users = list(conn.execute(select(User.id, User.name, User.admin)))
        # a skewed mix: user00 the busiest, then fewer and fewer; the admin a few
        users.sort(key=lambda u: (u.admin, u.name))
        weights = [1.0 / (i + 1) for i in range(len(users))]
        sessions: list[dict[str, Any]] = []
        kernels: list[dict[str, Any]] = []
        now = datetime.now(UTC)
        for n in range(have, total):
            owner = rnd.choices(users, weights)[0]
            created = now - timedelta(days=20 * (total - n) / total, seconds=rnd.random())
            status = rnd.choices(["TERMINATED", "ERROR", "CANCELLED", "PENDING"], [85, 8, 5, 2])[0]
            final = status != "PENDING"
            size = rnd.choices([1, 2, 3, 4], [70, 15, 5, 10])[0]
            started = created + timedelta(seconds=rnd.uniform(2, 30))
            ended = started + timedelta(minutes=rnd.uniform(1, 600))
            sid = str(uuid.uuid4())
            timeline = {"PENDING": iso(created)}
            if final:
                timeline |= {
                    "SCHEDULED": iso(created),
                    "PREPARING": iso(created),
                    "RUNNING": iso(started),
                    "TERMINATING": iso(ended),
                    status: iso(ended),
                }
            sessions.append(
                {
                    "id": sid,
                    "name": f"{rnd.choice(PREFIXES)}-{rnd.randrange(400)}",
                    "owner_id": owner.id,
                    "status": status,
                    "status_info": {"reason": "exited with code 1"} if status == "ERROR" else {},
                    "timeline": timeline,
                    "type": rnd.choice(["batch", "batch", "interactive"]),
                    "image": rnd.choice(["troupe/base:0.1.0", "troupe/pytorch:0.1.0"]),
                    "cluster_size": size,
                    "cluster_mode": "multi-node" if size > 1 else "single-node",
                    "cpu": rnd.choice([1.0, 2.0, 4.0]),
                    "mem": rnd.choice([2, 4, 8]) * G,
                    "gpu": 0,
                    "mounts": [{"folder": "data", "readonly": True}] if rnd.random() < 0.3 else [],
                    "environ": {"EPOCHS": "10"},
                    "startup_command": "python train.py" if rnd.random() < 0.7 else None,
                    "dist_env": "default",
                    "group": "default",
                    "priority": 0,
                    "uid": 1000,
                    "gid": 1000,
                    "isolated_network": False,
                    "network": f"troupe-{sid[:12]}" if final else None,
                    "subnet": None,
                    "ssh_private_key": "" if final else "-----BEGIN OPENSSH PRIVATE KEY-----",
                    "ssh_public_key": "ssh-ed25519 " + "A" * 68 + " troupe",
                    "exit_code": (1 if status == "ERROR" else 0) if final else None,
                    "created_at": created,
                    "started_at": started if final else None,
                    "terminated_at": ended if final else None,
                    "version": 5,
                }
            )
            for rank in range(size):
                role = "main" if rank == 0 else "sub"
                idx = 1 if rank == 0 else rank
                kernels.append(
                    {
                        "id": str(uuid.uuid4()),
                        "session_id": sid,
                        "hostname": f"{role}{idx}",
                        "role": role,
                        "idx": idx,
                        "rank": rank,
                        "agent_id": f"agent-{rnd.randrange(8)}" if final else None,
                        "container_id": uuid.uuid4().hex * 2 if final else None,
                        "ip": f"10.88.{n % 256}.{rank + 2}" if final else None,
                        "status": "TERMINATED" if final else "PENDING",
                        "timeline": {"RUNNING": iso(started), "TERMINATED": iso(ended)}
                        if final
                        else {},
                        "exit_code": 0 if final else None,
                        "oom_killed": False,
                        "host_public_key": "ssh-ed25519 " + "B" * 68,
                        "host_private_key": "",
                        "version": 3,
                    }
                )
        if sessions:
            conn.execute(insert(Session), sessions)
            conn.execute(insert(Kernel), kernels)
    engine.dispose()


# -- measuring -------------------------------------------------------------------------------


def timed(c: httpx.Client, path: str, params: dict[str, Any] | None = None) -> float:
    t0 = time.perf_counter()
    r = c.get(path, params=params)
    elapsed = time.perf_counter() - t0
    r.raise_for_status()
    return elapsed * 1000


def timed_many(c: httpx.Client, path: str, params: dict[str, Any] | None, n: int) -> list[float]:
    """``n`` timed requests, or fewer (at least 10) once they took :data:`BUDGET` seconds."""
    times: list[float] = []
    deadline = time.monotonic() + BUDGET
    while len(times) < n and (len(times) < 10 or time.monotonic() < deadline):
        times.append(timed(c, path, params))
    return times


def figures(times: list[float]) -> dict[str, float]:
    times = sorted(times)
    return {
        "n": len(times),
        "p50_ms": round(statistics.median(times), 2),
        "p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))], 2),
        "max_ms": round(times[-1], 2),
    }


def measure(server: Server, db: Path, requests: int) -> dict[str, dict[str, Any]]:
    engine = create_engine(f"sqlite:///{db}")
    with engine.connect() as conn:
        user_id = conn.execute(select(User.id).where(User.name == "user00")).scalar_one()
        all_names = list(conn.execute(select(Session.name).distinct()).scalars())
        user_names = list(
            conn.execute(select(Session.name).where(Session.owner_id == user_id).distinct())
            .scalars()
            .all()
        )
    engine.dispose()
    rnd = random.Random(7)
    out: dict[str, dict[str, Any]] = {}
    for who, key, names in (
        ("admin", server.key, all_names),
        ("user", USER_KEY, user_names),
    ):
        with httpx.Client(
            base_url=f"{server.url}/v1", headers={"Authorization": f"Bearer {key}"}, timeout=60
        ) as c:
            cases: list[tuple[str, str, dict[str, Any] | None]] = [
                ("GET /v1/sessions", "/sessions", {"all": False}),
                ("GET /v1/sessions?all=true", "/sessions", {"all": True}),
            ]
            for label, path, params in cases:
                body = c.get(path, params=params).json()
                for _ in range(5):
                    timed(c, path, params)
                cpu = server.cpu_ms()
                times = timed_many(c, path, params, requests)
                cpu = (server.cpu_ms() - cpu) / len(times)
                out[f"{label} ({who})"] = {
                    **figures(times),
                    "cpu_ms": round(cpu, 2),
                    "items": len(body),
                }
            picks = [rnd.choice(names) for _ in range(requests + 5)]
            for name in picks[:5]:
                timed(c, f"/sessions/{name}")
            cpu = server.cpu_ms()
            times = [timed(c, f"/sessions/{name}") for name in picks[5:]]
            cpu = (server.cpu_ms() - cpu) / len(times)
            label = f"GET /v1/sessions/{{name}} ({who})"
            out[label] = {**figures(times), "cpu_ms": round(cpu, 2), "items": 1}
    return out


def table(title: str, rows: dict[str, dict[str, Any]]) -> None:
    print(f"\n{title}")
    print(
        f"  {'request':<40} {'items':>5} {'n':>4} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}"
        f" {'cpu ms':>7}"
    )
    for label, f in rows.items():
        print(
            f"  {label:<40} {f['items']:>5} {f['n']:>4} {f['p50_ms']:>8.2f} {f['p99_ms']:>8.2f}"
            f" {f['max_ms']:>8.2f} {f['cpu_ms']:>7.2f}"
        )
    print("  (cpu ms: the server's CPU time per request, all threads; steadier than latency)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sessions", type=int, default=5_000, help="stored sessions for latency")
    ap.add_argument("--big", type=int, default=10_000, help="stored sessions for memory")
    ap.add_argument("--requests", type=int, default=200, help="requests per case")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    result: dict[str, Any] = {
        "sessions": args.sessions,
        "big": args.big,
        "requests": args.requests,
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "at": iso(datetime.now(UTC)),
    }
    with tempfile.TemporaryDirectory(prefix="troupe-bench-api-") as d:
        tmp = Path(d)
        db = tmp / "data" / "troupe.db"
        server = start(tmp)
        try:
            time.sleep(2)
            httpx.get(
                f"{server.url}/v1/sessions", headers={"Authorization": f"Bearer {server.key}"}
            )
            time.sleep(1)
            result["memory_idle_empty_mib"] = server.memory()
        finally:
            common.stop_process(server.proc)

        for n, key in ((args.sessions, "latency"), (args.big, "big")):
            t0 = time.perf_counter()
            fill(db, n)
            filled = time.perf_counter() - t0
            server = start(tmp)
            try:
                time.sleep(1)
                idle = server.memory()
                rows = measure(server, db, args.requests)
                after = server.memory()
            finally:
                common.stop_process(server.proc)
            result[key] = {
                "stored_sessions": n,
                "fill_seconds": round(filled, 1),
                "requests": rows,
                "memory_idle_mib": idle,
                "memory_after_mib": after,
            }
            table(f"{n} stored sessions (filled in {filled:.1f} s)", rows)
            print(
                f"  server memory: idle VmRSS {idle['VmRSS']:.1f} MiB; after the requests "
                f"VmRSS {after['VmRSS']:.1f} MiB, VmHWM {after['VmHWM']:.1f} MiB"
            )
    mem = result["memory_idle_empty_mib"]
    print(f"\nempty database, idle: VmRSS {mem['VmRSS']:.1f} MiB, VmHWM {mem['VmHWM']:.1f} MiB")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
