"""A manager without a local agent and an agent process talking to it over HTTP (loopback).

The same code paths as agents on other hosts, without the multi-host test bed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import (
    BASE_IMAGE,
    Server,
    docker,
    free_port,
    remove_leftovers,
    session_ids,
    start_agent,
    start_server,
    stop_server,
)
from troupe.api.models import Resources, SessionCreate

pytestmark = pytest.mark.docker
TOKEN = "test-agent-token"
SMALL = Resources(cpu=0.25, mem=256 * 1024**2)


@pytest.fixture
def manager(tmp_path: Path, docker_engine: None) -> Iterator[Server]:
    srv = start_server(tmp_path, "--no-local-agent", "--agent-token", TOKEN, "--agent-timeout", "3")
    try:
        yield srv
    finally:
        stop_server(srv)
        remove_leftovers(session_ids(srv))


def test_remote_agent_runs_sessions_and_is_lost_when_silent(
    manager: Server, tmp_path: Path
) -> None:
    port = free_port()
    agent = start_agent(manager, "far", port, tmp_path / "agent.log", cpu="1", token=TOKEN)
    try:
        manager.wait_agents({"far": "ALIVE"}, timeout=30)
        c = manager.client()
        with pytest.raises(Exception, match="larger than every agent"):
            c.create_session(
                SessionCreate(
                    name="big",
                    image=BASE_IMAGE,
                    cluster_size=3,
                    resources=Resources(cpu=0.5, mem=256 * 1024**2),
                )
            )
        c.create_session(SessionCreate(name="r", image=BASE_IMAGE, cluster_size=2, resources=SMALL))
        info = c.wait_session("r", timeout=120)
        assert info.status == "RUNNING", info.status_info
        assert {k.agent for k in info.kernels} == {"far"}
        assert c.exec("r", ["ssh", "sub1", "hostname"]) == (0, "sub1\n")
        code, _ = c.exec("r", ["sh", "-c", "echo to-log; exit 3"], kernel="sub1")
        assert code == 3
        # a terminal through the manager's and the agent's websockets
        r = subprocess.run(
            [str(Path(__file__).parents[2] / ".venv/bin/troupe"), "session", "shell", "r"],
            input="hostname; exit 4\n",
            env=manager.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 4 and "main1" in r.stdout, r

        # the agent dies: after the heartbeat time-out the session fails, naming the kernel
        os.killpg(agent.pid, signal.SIGKILL)
        agent.wait()
        final = c.wait_session("r", until="final", timeout=30)
        assert final.status == "ERROR"
        assert final.status_info["reason"] == "agent lost"
        assert final.status_info["kernel"] == "main1"
        manager.wait_agents({"far": "LOST"}, timeout=30)

        # it comes back: the orphaned kernels are removed, resources are not double counted
        agent = start_agent(manager, "far", port, tmp_path / "agent.log", cpu="1", token=TOKEN)
        manager.wait_agents({"far": "ALIVE"}, timeout=30)
        deadline = time.monotonic() + 30
        while docker("ps", "-aq", "--filter", f"label=troupe.session={info.id}").stdout.strip():
            assert time.monotonic() < deadline, "orphans of the lost session remain"
            time.sleep(0.2)
        a = next(a for a in c.list_agents() if a.name == "far")
        assert (a.cpu_free, a.kernels) == (a.cpu, 0)
    finally:
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGTERM)
            agent.wait(20)
