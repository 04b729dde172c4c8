"""Time the ``troupe`` command as a user meets it: whole processes, start-up included.

Starts its own ``troupe server`` (free port, its own data and config directories, as the tests
do) and one 1-kernel session ``tbench-...``, then runs each command in turn, round after round
(A B A B ...), so that drift of the machine hits them all alike:

    troupe session exec NAME -- true      vs  docker exec CONTAINER true
    troupe session list                   vs  docker ps
    troupe --help                         vs  docker ps
    python -c pass                        (the interpreter's own start-up, for reference)

Prints the median and p90 of each and the ratios of the medians, writes them as JSON to
``bench/results/cli.json`` and removes everything it made. Passes or fails nothing (machines
differ). ``--vs-src DIR`` also times the troupe commands with another source tree first on the
path (e.g. an older checkout's ``src``), for a before/after in one run. Usage:
    .venv/bin/python bench/cli.py [--rounds N] [--vs-src DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.conftest: how the tests start a server

from tests.conftest import (  # noqa: E402
    BASE_IMAGE,
    DOCKER,
    Server,
    docker,
    remove_leftovers,
    session_ids,
    start_server,
    stop_server,
)

TROUPE = str(ROOT / ".venv" / "bin" / "troupe")
RESULTS = ROOT / "bench" / "results" / "cli.json"
#: Apart from the tests' pool (10.89.0.0/16) and a developer's server (10.88.0.0/16).
SUBNET_POOL = "10.87.0.0/16"


def run_once(argv: list[str], env: dict[str, str]) -> float:
    """Seconds from start to exit of one process (output thrown away); a failure stops all."""
    t0 = time.perf_counter()
    r = subprocess.run(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    elapsed = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {r.returncode}: {r.stderr.decode()[-2000:]}")
    return elapsed


def p90(xs: list[float]) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


def commands(
    session: str, container: str, env: dict[str, str], vs_src: str | None
) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Label -> (argv, environment), in the order of a round."""
    troupe = {
        "troupe exec": [TROUPE, "session", "exec", session, "--", "true"],
        "troupe list": [TROUPE, "session", "list"],
        "troupe --help": [TROUPE, "--help"],
    }
    cmds: dict[str, tuple[list[str], dict[str, str]]] = {}
    others = {
        "troupe exec": ("docker exec", [DOCKER, "exec", container, "true"]),
        "troupe list": ("docker ps", [DOCKER, "ps"]),
    }
    for label, argv in troupe.items():
        cmds[label] = (argv, env)
        if vs_src:
            cmds[f"{label} (vs-src)"] = (argv, {**env, "PYTHONPATH": vs_src})
        if label in others:
            other, other_argv = others[label]
            cmds[other] = (other_argv, env)
    cmds["python -c pass"] = ([sys.executable, "-c", "pass"], env)
    return cmds


#: (numerator, denominator) of the ratios printed.
RATIOS = [
    ("troupe exec", "docker exec"),
    ("troupe list", "docker ps"),
    ("troupe --help", "docker ps"),
    ("troupe exec", "troupe exec (vs-src)"),
    ("troupe list", "troupe list (vs-src)"),
    ("troupe --help", "troupe --help (vs-src)"),
]


def measure(server: Server, rounds: int, vs_src: str | None) -> dict[str, object]:
    session = f"tbench-{uuid.uuid4().hex[:6]}"
    env = server.env
    r = server.cli(
        "session", "create", session, "--image", BASE_IMAGE, "--cpu", "0.25", "--mem", "256m",
        "--wait", "--timeout", "120",
    )  # fmt: skip
    if r.returncode != 0:
        raise RuntimeError(f"session create failed: {r.stderr}")
    with server.client() as c:
        container = c.get_session(session).kernels[0].container_id
    assert container, "the session's kernel has no container"
    cmds = commands(session, container, env, vs_src)
    times: dict[str, list[float]] = {label: [] for label in cmds}
    for i in range(rounds + 1):  # round 0 warms the caches up and is not counted
        for label, (argv, cmd_env) in cmds.items():
            t = run_once(argv, cmd_env)
            if i:
                times[label].append(t)
        if i:
            print(f"round {i}/{rounds} done", file=sys.stderr)
    stats = {
        label: {"median": statistics.median(xs), "p90": p90(xs), "runs": xs}
        for label, xs in times.items()
    }
    ratios = {
        f"{a} / {b}": stats[a]["median"] / stats[b]["median"]  # type: ignore[operator]
        for a, b in RATIOS
        if a in stats and b in stats
    }
    return {
        "rounds": rounds,
        "cores": os.cpu_count(),
        "load_before": os.getloadavg()[0],
        "vs_src": vs_src,
        "seconds": stats,
        "ratios_of_medians": ratios,
    }


def report(result: dict[str, object]) -> None:
    stats: dict[str, dict[str, float]] = result["seconds"]  # type: ignore[assignment]
    width = max(len(k) for k in stats)
    print(f"{'command':<{width}}  median ms  p90 ms")
    for label, s in stats.items():
        print(f"{label:<{width}}  {s['median'] * 1000:9.1f}  {s['p90'] * 1000:6.1f}")
    print()
    ratios: dict[str, float] = result["ratios_of_medians"]  # type: ignore[assignment]
    for name, value in ratios.items():
        print(f"{name}: {value:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15, help="counted rounds (default 15)")
    ap.add_argument("--vs-src", help="also time the troupe commands with this source tree")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    vs_src = str(Path(args.vs_src).resolve()) if args.vs_src else None
    tmp = Path(tempfile.mkdtemp(prefix="tbench-cli-"))
    server: Server | None = None
    try:
        server = start_server(tmp, "--subnet-pool", SUBNET_POOL)  # the last --subnet-pool wins
        result = measure(server, args.rounds, vs_src)
    finally:
        if server is not None:
            with contextlib.suppress(Exception), server.client() as c:
                for info in c.list_sessions(all=False):
                    c.destroy_session(info.id)
            stop_server(server)
            remove_leftovers(session_ids(server))
        shutil.rmtree(tmp, ignore_errors=True)
    report(result)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwritten to {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    if docker("info", check=False).returncode != 0:
        sys.exit("Docker engine not answering")
    main()
