"""Helpers of the multi-host tests: the test bed's script, a node's engine, and a ``Cluster``
(a manager with no local agent plus one agent per simulated host, each agent in its host's
network namespace talking to that host's dockerd)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import DOCKER, ROOT, Server, start_server, stop_server
from troupe.api.models import Resources, SessionCreate
from troupe.client.sdk import Client

SCRIPT = ROOT / "scripts" / "testbed.sh"
TOKEN = "multihost-token"
N = 3
ONE_PER_HOST = Resources(cpu=0.75, mem=512 * 1024**2)  # agents offer 1 core each
AGENT_PORT = 6011
#: P15: the neighbour table's limits the bed raises (IPv4; IPv6 alike), and what they are at least
NEIGH = {
    f"/proc/sys/net/ipv4/neigh/default/{k}": v
    for k, v in (("gc_thresh2", 8192), ("gc_thresh3", 16384))
}


def tb(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


def node_docker(i: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [DOCKER, "-H", f"unix:///run/troupe-tb/tt{i}/docker.sock", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def host_containers() -> dict[str, tuple[str, bool]]:
    """Host engine containers: id -> (StartedAt, Running)."""
    ids = subprocess.run(
        [DOCKER, "ps", "-aq", "--no-trunc"], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    if not ids:
        return {}
    r = subprocess.run(
        [DOCKER, "inspect", *ids], capture_output=True, text=True, check=False, timeout=60
    )
    out: dict[str, tuple[str, bool]] = {}
    for c in json.loads(r.stdout or "[]"):  # containers may vanish meanwhile (other tests)
        st = c["State"]
        out[c["Id"]] = (st["StartedAt"], st["Running"])
    return out


@dataclass
class Before:
    """The host as it was before the bed: its engine's containers, its neighbour limits."""

    containers: dict[str, tuple[str, bool]] = field(default_factory=dict)
    neigh: dict[str, int] = field(default_factory=dict)


def ensure_bed(images: str) -> None:
    """A healthy bed of N hosts holding ``images``: waits a little for one that an earlier
    module left recovering (an engine it stopped and continued), then ``up``."""
    if Path("/run/troupe-tb/nodes").exists():
        deadline = time.monotonic() + 30
        while tb("status").returncode != 0 and time.monotonic() < deadline:
            time.sleep(1)
    t = time.monotonic()
    r = tb("up", str(N), TB_IMAGES=images)
    print(f"testbed up {N} ({images or 'no images'}): {time.monotonic() - t:.2f} s\n{r.stdout}")
    assert r.returncode == 0, f"up failed:\n{r.stdout}\n{r.stderr}"


def clean_hosts() -> None:
    """Waits until no session's container or network is left on any host; removes and reports
    what is still there after 30 s (a leak of the module that ran)."""
    label = ("--filter", "label=troupe.session")

    def left() -> dict[int, tuple[list[str], list[str]]]:
        found = {}
        for i in range(1, N + 1):
            ps = node_docker(i, "ps", "-aq", *label).stdout.split()
            nets = node_docker(i, "network", "ls", "-q", *label).stdout.split()
            if ps or nets:
                found[i] = (ps, nets)
        return found

    deadline = time.monotonic() + 30
    while (found := left()) and time.monotonic() < deadline:
        time.sleep(0.5)
    for i, (ps, nets) in found.items():
        if ps:
            node_docker(i, "rm", "-f", *ps)
        if nets:
            node_docker(i, "network", "rm", *nets)
    assert not found, f"sessions' containers and networks left on the hosts: {found}"


class Cluster:
    def __init__(self, server: Server, data_root: Path, log_dir: Path) -> None:
        self.server, self.data_root, self.log_dir = server, data_root, log_dir
        self.agents: dict[int, subprocess.Popen[bytes]] = {}

    def start_agent(self, i: int) -> None:
        with open(self.log_dir / f"agent-tt{i}.log", "ab") as out:
            self.agents[i] = subprocess.Popen(
                [
                    *("bash", str(SCRIPT), "exec", str(i), sys.executable, "-m", "troupe"),
                    *("agent", "--manager", self.server.url, "--token", TOKEN),
                    *("--listen", f"10.123.0.{10 + i}:{AGENT_PORT}", "--name", f"tt{i}"),
                    *("--docker-host", f"unix:///run/troupe-tb/tt{i}/docker.sock"),
                    *("--cpu", "1", "--mem", "3g", "--data-root", str(self.data_root)),
                    *("--heartbeat", "0.5"),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill_agent(self, i: int) -> None:
        p = self.agents.pop(i)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()

    def destroy_sessions(self) -> None:
        c = self.server.client()
        for s in c.list_sessions():
            c.destroy_session(s.id)

    def revive(self) -> None:
        """Starts again each agent that is not running (killed by a test, or ended with a
        rebuilt bed) and waits until every agent is ALIVE."""
        for i in range(1, N + 1):
            p = self.agents.get(i)
            if p is None or p.poll() is not None:
                self.start_agent(i)
        self.server.wait_agents({f"tt{i}": "ALIVE" for i in range(1, N + 1)})

    def stop(self) -> None:
        """Destroys every session, then ends the agents and the manager."""
        try:
            self.destroy_sessions()
        finally:
            for i in list(self.agents):
                with contextlib.suppress(ProcessLookupError):  # (a bed's down ends them too)
                    os.killpg(self.agents[i].pid, signal.SIGTERM)
                self.agents.pop(i).wait(30)
            stop_server(self.server)


def start_cluster(tmp: Path) -> Cluster:
    """A manager on the bed's host address with one agent per host, all ALIVE."""
    server = start_server(
        tmp, "--no-local-agent", "--agent-token", TOKEN, "--agent-timeout", "4", host="10.123.0.1"
    )
    cl = Cluster(server, tmp / "shared-data", tmp)
    try:
        for i in range(1, N + 1):
            cl.start_agent(i)
        server.wait_agents({f"tt{i}": "ALIVE" for i in range(1, N + 1)})
    except BaseException:
        cl.stop()
        raise
    return cl


#: The manager and agents that the modules on the bed with images share (see conftest).
SHARED: dict[str, Cluster] = {}


def stop_shared() -> None:
    """Ends the shared manager and agents, if started (before the bed goes)."""
    cl = SHARED.pop("cluster", None)
    if cl is not None:
        cl.stop()


def start(c: Client, req: SessionCreate) -> None:
    c.create_session(req)
    info = c.wait_session(req.name, timeout=240)
    assert info.status == "RUNNING", info.status_info


def wait_no_kernels(node: int, session_id: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while node_docker(node, "ps", "-aq", "--filter", f"label=troupe.session={session_id}").stdout:
        assert time.monotonic() < deadline, f"orphaned kernel on tt{node}"
        time.sleep(0.2)
