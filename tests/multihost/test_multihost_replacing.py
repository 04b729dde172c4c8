"""Re-placement on the multi-host test bed while a session restarts (docs/policies.md): the
host of ``sub1`` cut off (its agent killed) just as a kernel's failure restarts the session in
place. The restart's call to that agent fails at once; the session waits for the agent's
heartbeat verdict, counts a second restart and is placed again on the other hosts."""

from __future__ import annotations

import time

import pytest

from tests.conftest import BASE_IMAGE
from tests.multihost.bed import (
    ONE_PER_HOST,
    Cluster,
    node_docker,
    start,
    wait_no_kernels,
)
from troupe.api.models import SessionCreate

pytestmark = pytest.mark.docker


def test_agent_lost_while_restarting_places_the_session_again(cluster: Cluster) -> None:
    c = cluster.server.client()
    req = SessionCreate(
        name="twice",
        image=BASE_IMAGE,
        cluster_size=2,
        cluster_mode="multi-node",
        resources=ONE_PER_HOST,
        max_restarts=2,
    )
    start(c, req)
    node = 0
    try:
        info = c.get_session("twice")
        where = {k.hostname: k for k in info.kernels}
        gone = where["sub1"].agent or ""
        node = int(gone.removeprefix("tt"))
        main = int((where["main1"].agent or "").removeprefix("tt"))
        cluster.kill_agent(node)  # sub1's host cut off ...
        killed = node_docker(main, "kill", where["main1"].container_id or "")
        assert killed.returncode == 0, killed.stderr  # ... as main1 fails: a restart in place
        deadline = time.monotonic() + 120
        while True:
            after = c.get_session("twice")
            if after.status == "RUNNING" and after.restarts == 2:
                break
            assert after.status not in ("ERROR", "TERMINATED", "CANCELLED"), after.status_info
            assert time.monotonic() < deadline, (after.status, after.status_info)
            time.sleep(0.5)
        first, second = after.restart_history
        assert (first.kernel, first.agent) == ("main1", None)
        assert (second.kernel, second.agent) == ("sub1", gone)
        assert second.reason.startswith(f"agent {gone} lost")
        hosts = {k.hostname: k.agent for k in after.kernels}
        assert gone not in hosts.values() and len(set(hosts.values())) == 2, hosts
        for k in after.kernels:
            code, out = c.exec("twice", ["printenv", "TROUPE_RESTART_COUNT"], kernel=k.hostname)
            assert (code, out.strip()) == (0, "2"), (k.hostname, out)
        code, out = c.exec("twice", ["sh", "-c", "ssh sub1 hostname"])
        assert (code, out.strip()) == (0, "sub1"), out
        cluster.start_agent(node)
        cluster.server.wait_agents({gone: "ALIVE"})
        wait_no_kernels(node, info.id, timeout=60)  # its leftovers removed once it is back
        assert c.get_session("twice").status == "RUNNING"
    finally:
        c.destroy_session("twice")
        if node and node not in cluster.agents:
            cluster.start_agent(node)
            cluster.server.wait_agents({f"tt{node}": "ALIVE"})
