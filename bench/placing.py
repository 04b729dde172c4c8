"""Time the manager's placing pass in its real stack, in-process: SQLite on disk (the
manager's own engine and schema), the store, the fleet's agent rows, the change bus and
``troupe.manager.life.placing``; no agent is called (a placing pass asks none).

The world: ``--agents`` agents of 8 cores and 32 GiB, each full with 4 RUNNING sessions of
2 cores and 8 GiB, and ``--sessions`` PENDING sessions of mixed shapes (most of them the
running ones' shape, some larger, some multi-node, a tenth with roles) waiting for room. Each
round ends one running session (the real teardown) and times the pass that follows (it
places one waiting session in the freed room), three ways, interleaved:
- **kept**: the manager's :class:`~troupe.manager.life.placing.Placer`, which keeps its
  backlog between passes;
- **full**: :func:`~troupe.manager.life.placing.place_pending`, a backlog built afresh from
  the database (what every pass did before);
- **old** (``--compare REV``): ``place_pending`` of ``placing.py`` as it was at REV.

Prints wall and CPU time (``time.process_time``, the aiosqlite thread included) per pass;
passes or fails nothing. Usage:
    .venv/bin/python bench/placing.py [--sessions 10000] [--agents 1000] [--rounds 5]
        [--compare REV] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import random
import shutil
import subprocess
import sys
import tempfile
import time
import types
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from common import ROOT, summary
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.agent import AgentBackend
from troupe.api.lifecycle import (
    AgentStatus,
    KernelStatus,
    SessionStatus,
    begin,
    transition,
    utcnow,
)
from troupe.api.models import SessionCreate
from troupe.manager.auth import create_user
from troupe.manager.changes import ChangeBus
from troupe.manager.config import ServerConfig
from troupe.manager.fleet import Fleet
from troupe.manager.life import Life, placing, teardown
from troupe.manager.life.admission import new_session
from troupe.manager.logs import LogStore
from troupe.manager.store.db import make_engine, migrate
from troupe.manager.store.models import Agent, Session
from troupe.manager.store.unit import Store, changes_of

S, K = SessionStatus, KernelStatus
G = 1024**3
IMAGE = "troupe/base:0.1.0"
#: the kernel statuses a RUNNING session's kernels pass
KERNEL_LINE = (K.RUNNING,)


def _no_agent(name: str, address: str, token: str) -> AgentBackend:
    raise AssertionError("the placing pass calls no agent")


def old_placing(rev: str) -> types.ModuleType:
    """``placing.py`` as it was at ``rev`` (it needs nothing the tree lacks now)."""
    src = subprocess.run(
        ["git", "show", f"{rev}:src/troupe/manager/life/placing.py"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    mod = types.ModuleType("old_placing")
    sys.modules[mod.__name__] = mod
    exec(compile(src, f"{rev}:placing.py", "exec"), mod.__dict__)
    return mod


def pending_body(rnd: random.Random, i: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": f"p{i}",
        "image": IMAGE,
        "priority": rnd.choice([0, 0, 0, 1]),
        "resources": {"cpu": 2.0, "mem": 8 * G},
    }
    kind = rnd.random()
    if kind < 0.2:
        body["resources"] = {"cpu": rnd.choice([3.0, 4.0, 6.0]), "mem": 8 * G}
    elif kind < 0.35:
        body |= {"cluster_size": rnd.choice([2, 4]), "cluster_mode": "multi-node"}
    elif kind < 0.45:
        body["roles"] = [{"name": "worker", "replicas": 2, "resources": {"cpu": 1.0}}]
        body["cluster_mode"] = rnd.choice(["single-node", "multi-node"])
    return body


async def build(life: Life, n_sessions: int, n_agents: int) -> list[str]:
    """The world, stored; the ids of the running sessions."""
    rnd = random.Random(1)
    async with life.store() as db:
        owner, _ = await create_user(db, "bench", True)
        await db.commit()
    running: list[str] = []

    async def agents(db: AsyncSession) -> None:
        changes = changes_of(db)
        for i in range(n_agents):
            a = Agent(id=f"agent-{i:05d}", name=f"agent-{i:05d}", group="default")
            begin(a, AgentStatus.ALIVE, changes)
            a.cpu, a.mem, a.gpu, a.gpus, a.last_heartbeat = 8.0, 32 * G, 0, [], utcnow()
            db.add(a)

    await life.store.write(agents)
    t0 = utcnow().timestamp()
    batch = 500
    for start in range(0, n_agents * 4, batch):

        async def runs(db: AsyncSession, start: int = start) -> None:
            changes = changes_of(db)
            for i in range(start, min(start + batch, n_agents * 4)):
                req = SessionCreate.model_validate(
                    {"name": f"r{i}", "image": IMAGE, "resources": {"cpu": 2.0, "mem": 8 * G}}
                )
                s = new_session(str(uuid.uuid4()), owner, req, {}, changes)
                s.kernels[0].agent_id = f"agent-{i // 4:05d}"
                for to in (S.SCHEDULED, S.PREPARING, S.RUNNING):
                    transition(s, to, changes)
                for to in KERNEL_LINE:
                    transition(s.kernels[0], to, changes)
                db.add(s)
                running.append(s.id)

        await life.store.write(runs)
    for start in range(0, n_sessions, batch):

        async def pend(db: AsyncSession, start: int = start) -> None:
            changes = changes_of(db)
            for i in range(start, min(start + batch, n_sessions)):
                req = SessionCreate.model_validate(pending_body(rnd, i))
                s = new_session(str(uuid.uuid4()), owner, req, {}, changes)
                s.created_at = s.created_at.fromtimestamp(t0 + i * 1e-3, s.created_at.tzinfo)
                db.add(s)

        await life.store.write(pend)
    return running


async def timed(run: Callable[[], Awaitable[Any]]) -> tuple[float, float, Any]:
    cpu, wall = time.process_time(), time.perf_counter()
    out = await run()
    return (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000, out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    """The rounds, on a database in a new folder (removed at the end)."""
    tmp = Path(tempfile.mkdtemp(prefix="tbench-placing-"))
    try:
        return await rounds(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def rounds(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    cfg = ServerConfig(data_dir=tmp / "data", config_dir=tmp / "config")
    cfg.data_dir.mkdir(parents=True)
    engine = make_engine(cfg.database_url)
    await migrate(engine)
    store = Store(engine, ChangeBus())
    fleet = Fleet(cfg, store, {}, _no_agent)
    life = Life(cfg, store, fleet, LogStore(cfg.logs_dir))
    t = time.perf_counter()
    running = await build(life, args.sessions, args.agents)
    print(f"world stored in {time.perf_counter() - t:.1f} s")
    old = old_placing(args.compare) if args.compare else None
    placer = placing.Placer(life)
    placer.listen()
    first_wall, first_cpu, _ = await timed(placer.place)
    print(
        f"first pass (backlog built, every report written): {first_wall:.0f} ms wall,"
        f" {first_cpu:.0f} ms CPU"
    )
    ways: dict[str, Callable[[], Awaitable[Any]]] = {
        "kept": placer.place,
        "full": lambda: placing.place_pending(life),
    }
    if old is not None:
        ways["old"] = lambda: old.place_pending(life)
    rnd = random.Random(2)
    times: dict[str, dict[str, list[float]]] = {w: {"wall": [], "cpu": []} for w in ways}
    placed: dict[str, list[int]] = {w: [] for w in ways}

    async def no_preparer(sid: str) -> None:
        return None

    prof = cProfile.Profile()
    for _ in range(args.rounds):
        for way, run in ways.items():
            sid = running.pop(rnd.randrange(len(running)))
            await teardown.teardown(life, sid, S.TERMINATED, {"reason": "bench"}, no_preparer)
            if args.profile and way == "kept":
                prof.enable()
            wall, cpu, result = await timed(run)
            prof.disable()
            times[way]["wall"].append(wall)
            times[way]["cpu"].append(cpu)
            placed[way].append(len(result.placed))
            running.extend(result.placed)
            if way != "kept":  # the kept backlog catches up with the other ways' placements
                await placer.place()
    if args.profile:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    async with store() as db:
        waiting = (
            await db.execute(select(func.count()).where(Session.status == S.PENDING))
        ).scalar_one()
    await engine.dispose()
    print(
        f"placing: {args.sessions} pending sessions over {args.agents} full agents; "
        f"{waiting} still waiting at the end"
    )
    for way in ways:
        w, c = summary(times[way]["wall"]), summary(times[way]["cpu"])
        print(
            f"  {way:>4}: wall median {w['median']:.1f} ms (min {w['min']:.1f}, max "
            f"{w['max']:.1f}), CPU median {c['median']:.1f} ms; placed per pass {placed[way]}"
        )
    return {
        "sessions": args.sessions,
        "agents": args.agents,
        "rounds": args.rounds,
        "compare": args.compare,
        "times_ms": times,
        "placed": placed,
        "first_pass_ms": {"wall": first_wall, "cpu": first_cpu},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--agents", type=int, default=1_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--compare", metavar="REV")
    ap.add_argument("--profile", action="store_true", help="cProfile of the kept passes")
    args = ap.parse_args()
    out = asyncio.run(main_async(args))
    out["uptime"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"  uptime: {out['uptime']}")
    results = ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "placing.json").write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
