"""Roles on the multi-host test bed (docs/contract.md, roles; docs/lifecycle.md, placing): a
multi-node session whose roles fit no single host spreads them over the hosts and its kernels
reach each other by role hostname; a single-node session with roles waits PENDING, its report
naming the role's kernel that does not fit, until one host has room for every role."""

from __future__ import annotations

import time

import pytest

from tests.conftest import BASE_IMAGE, TORCH_IMAGE
from tests.multihost.bed import Cluster, start
from troupe.api.models import Resources, RoleSpec, SessionCreate
from troupe.api.roles import RoleResources

pytestmark = pytest.mark.docker
MIB = 1024**2


def test_roles_spread_over_hosts_when_no_host_holds_them(cluster: Cluster) -> None:
    c = cluster.server.client()
    worker = RoleSpec(
        name="worker",
        replicas=2,
        image=TORCH_IMAGE,
        resources=RoleResources(cpu=0.75, mem=384 * MIB),
    )
    start(  # 0.25 + 2 x 0.75 cores: more than any host's 1 core
        c,
        SessionCreate(
            name="roles-span",
            image=BASE_IMAGE,
            cluster_mode="multi-node",
            resources=Resources(cpu=0.25, mem=256 * MIB),
            roles=[worker],
        ),
    )
    try:
        info = c.get_session("roles-span")
        where = {k.hostname: k.agent for k in info.kernels}
        assert sorted(where) == ["main1", "worker1", "worker2"]
        assert where["worker1"] != where["worker2"], where  # each worker needs a host
        each = "echo $(hostname) $BACKENDAI_CLUSTER_ROLE $BACKENDAI_CLUSTER_IDX"
        loop = f"for h in worker1 worker2; do ssh $h '{each}'; done"
        code, out = c.exec("roles-span", ["sh", "-c", loop])
        assert (code, out) == (0, "worker1 worker 1\nworker2 worker 2\n"), out
        code, out = c.exec("roles-span", ["printenv", "BACKENDAI_CLUSTER_REPLICAS"])
        assert (code, out) == (0, "main:1,worker:2\n")
    finally:
        c.destroy_session("roles-span")


def test_single_node_roles_wait_naming_the_role_that_does_not_fit(cluster: Cluster) -> None:
    c = cluster.server.client()
    # one kernel of 0.6 cores on every host: 0.4 left on each
    start(
        c,
        SessionCreate(
            name="roles-block",
            image=BASE_IMAGE,
            cluster_size=3,
            cluster_mode="multi-node",
            resources=Resources(cpu=0.6, mem=256 * MIB),
        ),
    )
    worker = RoleSpec(name="worker", replicas=1, resources=RoleResources(cpu=0.5))
    try:
        c.create_session(
            SessionCreate(
                name="roles-wait",
                image=BASE_IMAGE,
                resources=Resources(cpu=0.25, mem=256 * MIB),
                roles=[worker],
            )
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            info = c.get_session("roles-wait")
            if "pending" in (info.status_info or {}):
                break
            time.sleep(0.5)
        assert info.status == "PENDING", info
        report = " ".join(" ".join(v) for v in info.status_info["pending"].values())
        assert "worker1" in info.status_info["pending"], info.status_info
        assert "worker" in report, report
    finally:
        c.destroy_session("roles-block")
    try:  # room on one host again: every role there, on a bridge
        running = c.wait_session("roles-wait", timeout=240)
        assert running.status == "RUNNING", running.status_info
        assert len({k.agent for k in running.kernels}) == 1
        assert c.exec("roles-wait", ["ssh", "worker1", "hostname"]) == (0, "worker1\n")
    finally:
        c.destroy_session("roles-wait")
