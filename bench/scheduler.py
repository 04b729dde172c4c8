"""Time one scheduling pass: 10,000 pending sessions over 1,000 simulated agents.

Prints figures; passes or fails nothing (machines differ). Usage:
    .venv/bin/python bench/scheduler.py [--sessions 10000] [--agents 1000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from troupe.manager.scheduler import AgentState, Request
from troupe.manager.scheduler_backlog import schedule

G = 1024**3


def world(n_sessions: int, n_agents: int, seed: int = 1) -> tuple[list[Request], list[AgentState]]:
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
    return requests, agents


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--agents", type=int, default=1_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    requests, agents = world(args.sessions, args.agents)
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        decision = schedule(requests, agents)
        times.append(time.perf_counter() - t0)
    print(f"scheduler: {args.sessions} pending sessions over {args.agents} agents")
    print(f"  placed {len(decision.placements)}, waiting {len(decision.waiting)}")
    print(
        f"  one pass: median {statistics.median(times) * 1000:.1f} ms, "
        f"min {min(times) * 1000:.1f} ms, max {max(times) * 1000:.1f} ms "
        f"({args.repeat} runs; target < 100 ms)"
    )


if __name__ == "__main__":
    main()
