"""Time the scheduler: one full pass over N pending sessions on M simulated agents, and the
incremental pass that follows one session's end or one agent's change.

Prints figures; passes or fails nothing (machines differ). Times are the process's CPU time
(``time.process_time``): on a shared machine they move less than wall time. Usage:
    .venv/bin/python bench/scheduler.py [--sessions 10000] [--agents 1000] [--repeat 5]
        [--mixed] [--changes 50] [--compare REV]
``--mixed``: a fifth of the sessions have roles (main + workers of another shape, some with a
parameter server), multi-node more often. ``--baseline REV``: REV's full pass over the plain
world of the same size, interleaved with this tree's (over the world asked for), and the
ratio of the two: issue 27 set its target against ``f6d5663``'s plain pass, and this
machine's speed varies through the day, so only a ratio measured in one process compares
(``--baseline f6d5663 --mixed``). ``--compare REV``: the full pass of the scheduler
as it was at git revision REV (before the backlog: ``f6d5663``; the backlog before its
dead-queue index: ``1a714c4``; before the fresh pass without a heap: ``2ff614e``; before the
int keys: ``352bfb7``; before the plans, the GPU gang walks and the paused collector:
``47f1eff``) in the same run, interleaved, and whether it placed the same.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time
import types
from dataclasses import fields, replace
from typing import Any

from troupe.manager.scheduler import AgentState, Part, Request
from troupe.manager.scheduler_backlog import Backlog, schedule

G = 1024**3


def world(
    n_sessions: int, n_agents: int, seed: int = 1, mixed: bool = False
) -> tuple[list[Request], list[AgentState]]:
    rnd = random.Random(seed)
    groups = ["default", "gpu", "big"]
    agents = [
        AgentState(
            id=f"agent-{i:04d}",
            group=rnd.choice(groups),
            cpu=rnd.choice([8, 16, 32, 64]),
            mem=rnd.choice([32, 64, 128, 256]) * G,
            gpu=rnd.choice([0, 0, 4, 8]),
            cpu_used=rnd.choice([0, 0, 2, 4]),
        )
        for i in range(n_agents)
    ]
    requests = [
        Request(
            session_id=f"s{i:05d}",
            group=rnd.choice(groups),
            mode=rnd.choice(["single-node", "multi-node"]),
            size=rnd.choice([1, 2, 4, 8, 16]),
            cpu=rnd.choice([0.5, 1, 2, 4]),
            mem=rnd.choice([1, 2, 4, 8]) * G,
            gpu=rnd.choice([0, 0, 0, 1]),
            priority=rnd.choice([0, 0, 1, 5]),
            order=float(i),
        )
        for i in range(n_sessions)
    ]
    if mixed:
        requests = [with_roles(r, rnd) if rnd.random() < 0.2 else r for r in requests]
    return requests, agents


def with_roles(r: Request, rnd: random.Random) -> Request:
    """``r`` as main plus workers of another shape (and sometimes a parameter server)."""
    parts = [
        Part("main", 1, r.cpu, r.mem, 0),
        Part("worker", rnd.choice([2, 4, 8]), rnd.choice([1, 2]), rnd.choice([2, 4]) * G, r.gpu),
    ]
    if rnd.random() < 0.3:
        parts.append(Part("ps", 1, 0.5, G, 0))
    mode = "multi-node" if rnd.random() < 0.7 else "single-node"
    return replace(r, mode=mode, size=sum(p.kernels for p in parts), parts=tuple(parts))


#: the scheduler's modules, each after those it imports (a revision's are loaded in this order)
MODULES = (
    "scheduler_shapes",  # (imported by scheduler)
    "scheduler",
    "scheduler_keys",
    "scheduler_take",
    "scheduler_spread",
    "scheduler_report",
    "scheduler_pool",
    "scheduler_queues",
    "scheduler_collector",
    "scheduler_backlog",
)


def old_scheduler(rev: str) -> types.ModuleType:
    """The scheduler as it was at ``rev`` (it needs nothing the tree lacks now): the module
    with ``schedule`` (``scheduler_backlog`` where the revision has it, else ``scheduler``),
    its sibling modules loaded from the same revision under other names."""
    mod = types.ModuleType("old_scheduler")
    for name in MODULES:
        try:
            src = subprocess.run(
                ["git", "show", f"{rev}:src/troupe/manager/{name}.py"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        except subprocess.CalledProcessError:
            if name not in ("scheduler", "scheduler_pool", "scheduler_backlog"):
                continue  # a module the revision did not have yet
            break  # before the backlog: one module
        for sibling in sorted(MODULES, key=len, reverse=True):  # "scheduler" prefixes all
            src = src.replace(f"troupe.manager.{sibling}", f"old_{sibling}")
        mod = types.ModuleType(f"old_{name}")
        sys.modules[mod.__name__] = mod
        exec(compile(src, f"{rev}:{name}.py", "exec"), mod.__dict__)
    if not hasattr(mod, "schedule"):  # the module of the types has what schedule needs
        mod = sys.modules["old_scheduler"]
    return mod


def convert(objs: list[Any], cls: Any, part: Any) -> list[Any]:
    out = []
    for o in objs:
        kw = {f.name: getattr(o, f.name) for f in fields(o) if f.init}
        if "parts" in kw:
            kw["parts"] = tuple(part(*p) for p in kw["parts"])
        out.append(cls(**kw))
    return out


def cpu_ms(fn: Any, *args: Any) -> tuple[float, Any]:
    t0 = time.process_time()
    out = fn(*args)
    return (time.process_time() - t0) * 1000, out


def fmt(times: list[float]) -> str:
    return (
        f"median {statistics.median(times):.1f} ms, min {min(times):.1f}, "
        f"max {max(times):.1f} ({len(times)} runs)"
    )


def incremental(
    requests: list[Any],
    agents: list[Any],
    n: int,
    rnd: random.Random,
    backlog_class: Any = Backlog,
) -> tuple[list[float], list[float]]:
    """Passes after one session's end, and after one agent's change (a new agent, or one
    whose capacity changed), on a backlog that had its full pass; placements only (the
    why-pending report of a waiting session is made when asked for, ``Backlog.why``).
    ``backlog_class``: another revision's, with its own ``requests`` and ``agents``."""
    backlog = backlog_class(agents)
    backlog.add_all(requests)
    decision = backlog.run()
    by_id = {r.session_id: r for r in requests}
    running = sorted(decision.placements)
    ends: list[float] = []
    changes: list[float] = []
    for i in range(n):
        sid = running.pop(rnd.randrange(len(running)))
        r, where = by_id[sid], decision.placements[sid]
        for agent_id in dict.fromkeys(where):
            pool = backlog.pools[r.group]
            a = pool.agent(agent_id)
            held = [k for k, w in zip(r.kernel_shapes(), where, strict=True) if w == agent_id]
            cpu, mem, gpu = (sum(getattr(k, x) for k in held) for x in ("cpu", "mem", "gpu"))
            backlog.set_agent(
                replace(
                    a,
                    cpu_used=a.cpu_used - cpu,
                    mem_used=int(a.mem_used - mem),
                    gpu_used=int(a.gpu_used - gpu),
                )
            )
        ms, d = cpu_ms(backlog.run, False)
        ends.append(ms)
        running += d.placements
        decision.placements.update(d.placements)
        if i % 2:
            a = replace(agents[rnd.randrange(len(agents))], id=f"new-{i}", cpu_used=0)
        else:
            group = rnd.choice(list(backlog.pools))
            a = backlog.pools[group].agent(rnd.choice(list(backlog.pools[group].base)))
            a = replace(a, cpu=a.cpu + 4, mem=a.mem + 8 * G)
        backlog.set_agent(a)
        ms, d = cpu_ms(backlog.run, False)
        changes.append(ms)
        running += d.placements
        decision.placements.update(d.placements)
    return ends, changes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--agents", type=int, default=1_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--mixed", action="store_true")
    ap.add_argument("--changes", type=int, default=50)
    ap.add_argument("--compare", metavar="REV")
    ap.add_argument("--baseline", metavar="REV")
    args = ap.parse_args()
    if args.compare and args.baseline:
        ap.error("--compare and --baseline load another revision each: give one")
    requests, agents = world(args.sessions, args.agents, mixed=args.mixed)
    old = old_scheduler(args.compare or args.baseline) if args.compare or args.baseline else None
    if args.baseline:
        requests_then, agents_then = world(args.sessions, args.agents)  # the plain world
    else:
        requests_then, agents_then = requests, agents
    if old is not None:
        types_mod = sys.modules["old_scheduler"]  # where Request, AgentState and Part live
        old_requests = convert(requests_then, types_mod.Request, types_mod.Part)
        old_agents = convert(agents_then, types_mod.AgentState, types_mod.Part)
    times, old_times, same = [], [], True
    for _ in range(args.repeat):
        ms, decision = cpu_ms(schedule, requests, agents)
        times.append(ms)
        if old is not None:
            ms, old_decision = cpu_ms(old.schedule, old_requests, old_agents)
            old_times.append(ms)
            same = same and old_decision.placements == decision.placements
    kind = "mixed sizes and roles" if args.mixed else "plain"
    print(f"scheduler: {args.sessions} pending sessions ({kind}) over {args.agents} agents")
    print(f"  placed {len(decision.placements)}, waiting {len(decision.waiting)}")
    print(f"  full pass: {fmt(times)}")
    ratio = statistics.median(times) / statistics.median(old_times) if old_times else 0.0
    if old is not None and args.baseline:
        print(f"  {args.baseline}'s full pass over the plain world: {fmt(old_times)}")
        print(f"  this pass / that one: {ratio:.3f}x")
    elif old is not None:
        print(f"  full pass at {args.compare}: {fmt(old_times)}; now/then {ratio:.2f}x")
        print(f"  same placements: {same}")
    if args.changes:
        ends, changes = incremental(requests, agents, args.changes, random.Random(2))
        print(f"  pass after one session's end: {fmt(ends)}")
        print(f"  pass after one agent's change: {fmt(changes)}")
        if old is not None and args.compare and hasattr(old, "Backlog"):
            rnd = random.Random(2)
            ends, changes = incremental(old_requests, old_agents, args.changes, rnd, old.Backlog)
            print(f"  at {args.compare}: after one session's end: {fmt(ends)}")
            print(f"  at {args.compare}: after one agent's change: {fmt(changes)}")


if __name__ == "__main__":
    main()
