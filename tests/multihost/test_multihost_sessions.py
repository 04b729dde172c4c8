"""Multi-node sessions over several hosts: a manager, one agent per simulated host of the test
bed (each agent runs in its host's network namespace and talks to that host's dockerd), and a
Swarm attachable overlay network joining kernels on different hosts."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import BASE_IMAGE, ROOT, TORCH_IMAGE
from tests.multihost.bed import ONE_PER_HOST, Cluster, N, node_docker, start, wait_no_kernels
from troupe.api.models import Mount, Resources, SessionCreate, SessionInfo
from troupe.client.sdk import Client, TroupeError

pytestmark = pytest.mark.docker


def test_agents_report_swarm_and_capacity(cluster: Cluster) -> None:
    agents = {a.name: a for a in cluster.server.client().list_agents()}
    assert agents["tt1"].swarm_manager and not agents["tt2"].swarm_manager
    assert all(a.cpu == 1 and a.status == "ALIVE" for a in agents.values())


def test_multi_node_session_spans_hosts_over_overlay(cluster: Cluster) -> None:
    c = cluster.server.client()
    folder = "mh-data"
    c.create_folder(folder)
    start(
        c,
        SessionCreate(
            name="span",
            image=TORCH_IMAGE,
            cluster_size=3,
            cluster_mode="multi-node",
            resources=ONE_PER_HOST,
            mounts=[Mount(folder=folder)],
        ),
    )
    try:
        info = c.get_session("span")
        assert sorted(k.agent or "" for k in info.kernels) == ["tt1", "tt2", "tt3"]
        net = node_docker(
            1,
            "network",
            "inspect",
            "-f",
            '{{.Driver}} {{.Attachable}} {{index .Options "com.docker.network.driver.mtu"}}',
            info.network or "",
        )
        assert net.stdout.split() == ["overlay", "true", "1450"], net
        # names resolve and ssh works across hosts, in every direction
        for src in ("main1", "sub1", "sub2"):
            code, out = c.exec(
                "span",
                ["sh", "-c", "for h in main1 sub1 sub2; do ssh $h hostname; done"],
                kernel=src,
            )
            assert (code, out) == (0, "main1\nsub1\nsub2\n"), (src, out)
        # overlay kernels also have Docker's gateway bridge: gloo/NCCL/MPI get the overlay one
        for host in ("main1", "sub1", "sub2"):
            code, out = c.exec(
                "span",
                [
                    "sh",
                    "-c",
                    "ip -o -4 addr show dev $GLOO_SOCKET_IFNAME"
                    " | grep -c $(getent hosts $(hostname) | cut -d' ' -f1);"
                    " test $NCCL_SOCKET_IFNAME = $GLOO_SOCKET_IFNAME",
                ],
                kernel=host,
            )
            assert (code, out.strip()) == (0, "1"), (host, out)
        # a data folder on shared storage: written on one host, read on another
        c.exec("span", ["sh", "-c", f"hostname > /home/work/{folder}/who"], kernel="sub2")
        assert c.exec("span", ["cat", f"/home/work/{folder}/who"]) == (0, "sub2\n")
        # the README's torchrun all-reduce, across the three hosts
        launch = (ROOT / "examples/torch-allreduce/launch.sh").read_text()
        code, out = c.exec("span", ["sh", "-c", launch])
        assert code == 0, out
        assert out.count("all_reduce sum=6.0 expected=6.0 OK") == 3, out
    finally:
        c.destroy_session("span")
    for i in range(1, N + 1):  # nothing left on any host, the overlay included
        assert node_docker(i, "ps", "-aq", "--filter", "label=troupe.session").stdout == ""
    assert node_docker(1, "network", "ls", "-q", "--filter", "label=troupe.session").stdout == ""


def test_multi_node_session_that_fits_one_host_uses_a_bridge(cluster: Cluster) -> None:
    c = cluster.server.client()
    start(
        c,
        SessionCreate(
            name="small",
            image=BASE_IMAGE,
            cluster_size=2,
            cluster_mode="multi-node",
            resources=Resources(cpu=0.25, mem=256 * 1024**2),
        ),
    )
    try:
        info = c.get_session("small")
        agents = {k.agent for k in info.kernels}
        assert len(agents) == 1
        i = int(next(iter(agents)).removeprefix("tt"))  # type: ignore[union-attr]
        driver = node_docker(i, "network", "inspect", "-f", "{{.Driver}}", info.network or "")
        assert driver.stdout.strip() == "bridge"
        assert c.exec("small", ["ssh", "sub1", "hostname"]) == (0, "sub1\n")
    finally:
        c.destroy_session("small")


def test_pending_until_resources_free_and_never_fitting_rejected(cluster: Cluster) -> None:
    c = cluster.server.client()
    with pytest.raises(TroupeError) as e:  # 3 x 0.5 cores on one host of 1 core: never
        c.create_session(
            SessionCreate(
                name="huge",
                image=BASE_IMAGE,
                cluster_size=3,
                resources=Resources(cpu=0.5, mem=256 * 1024**2),
            )
        )
    assert e.value.status == 422 and "larger than every agent" in e.value.message
    start(
        c,
        SessionCreate(
            name="blocker",
            image=BASE_IMAGE,
            cluster_size=3,
            cluster_mode="multi-node",
            resources=ONE_PER_HOST,
        ),
    )
    try:
        c.create_session(
            SessionCreate(
                name="waiter",
                image=BASE_IMAGE,
                cluster_size=2,
                resources=Resources(cpu=0.5, mem=256 * 1024**2),
            )
        )
        info = c.wait_session("waiter", until="change", since="PENDING", timeout=3)
        assert info.status == "PENDING"
        deadline = time.monotonic() + 20
        while "pending" not in info.status_info and time.monotonic() < deadline:
            time.sleep(0.2)
            info = c.get_session("waiter")
        report = info.status_info["pending"]
        assert set(report) == {"main1", "sub1"}
        assert any("agent tt2: cpu: needs 1 core, 0.25 cores free" in r for r in report["main1"])
    finally:
        c.destroy_session("blocker")
    info = c.wait_session("waiter", timeout=120)
    assert info.status == "RUNNING", info.status_info
    c.destroy_session("waiter")


def start_spanning(c: Client, name: str, node: int) -> tuple[SessionInfo, str]:
    """A 3-kernel session with one kernel per host; returns it and the kernel on ``node``."""
    start(
        c,
        SessionCreate(
            name=name,
            image=BASE_IMAGE,
            cluster_size=3,
            cluster_mode="multi-node",
            resources=ONE_PER_HOST,
        ),
    )
    info = c.get_session(name)
    return info, next(k.hostname for k in info.kernels if k.agent == f"tt{node}")


def test_lost_agent_fails_its_session_and_leaves_no_orphans(cluster: Cluster) -> None:
    c = cluster.server.client()
    info, on_tt2 = start_spanning(c, "fragile", 2)
    cluster.kill_agent(2)
    final = c.wait_session("fragile", until="final", timeout=60)
    assert final.status == "ERROR"
    assert final.status_info["reason"] == "agent lost"
    assert final.status_info["kernel"] == on_tt2
    for i in (1, 3):  # the kernels on the reachable hosts are gone at once
        assert (
            node_docker(i, "ps", "-aq", "--filter", f"label=troupe.session={info.id}").stdout == ""
        )
    cluster.start_agent(2)
    cluster.server.wait_agents({"tt2": "ALIVE"})
    wait_no_kernels(2, info.id, timeout=30)
    tt2 = next(a for a in c.list_agents() if a.name == "tt2")
    assert (tt2.cpu_free, tt2.kernels) == (tt2.cpu, 0)


def test_agent_whose_engine_stops_answering_is_lost(cluster: Cluster) -> None:
    """A frozen dockerd: the agent withholds its heartbeats, the manager declares it LOST."""
    c = cluster.server.client()
    info, on_tt3 = start_spanning(c, "frozen", 3)
    pid = int(Path("/run/troupe-tb/tt3/docker.pid").read_text())
    os.kill(pid, signal.SIGSTOP)
    try:
        final = c.wait_session("frozen", until="final", timeout=60)
        assert final.status == "ERROR"
        assert (final.status_info["reason"], final.status_info["kernel"]) == ("agent lost", on_tt3)
    finally:
        os.kill(pid, signal.SIGCONT)
    cluster.server.wait_agents({"tt3": "ALIVE"})
    wait_no_kernels(3, info.id, timeout=60)


def test_tunnel_and_ssh_reach_main1_on_another_host(cluster: Cluster, tmp_path: Path) -> None:
    """``troupe session tunnel`` / ``ssh`` go manager -> the agent of main1's host -> sshd, with
    no port published; ``cp`` reaches a sub kernel on a third host the same way."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    key = home / ".ssh" / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    c = cluster.server.client()
    start(
        c,
        SessionCreate(
            name="reach",
            image=BASE_IMAGE,
            cluster_size=3,
            cluster_mode="multi-node",
            resources=ONE_PER_HOST,
            ssh_key=key.with_suffix(".pub").read_text(),
        ),
    )
    env = {**cluster.server.env, "HOME": str(home)}
    troupe = str(ROOT / ".venv/bin/troupe")

    def run(*args: str, input: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [troupe, *args], env=env, input=input, capture_output=True, timeout=120, cwd=home
        )

    try:
        info = c.get_session("reach")
        hosts = {k.hostname: k.agent for k in info.kernels}
        assert len(set(hosts.values())) == 3, hosts
        r = run("session", "tunnel", "reach", input=b"SSH-2.0-probe\r\n")
        assert r.stdout.startswith(b"SSH-2.0-OpenSSH"), r.stderr
        r = run("session", "ssh", "reach", "--", "hostname; ssh sub2 hostname")
        assert (r.returncode, r.stdout.split()) == (0, [b"main1", b"sub2"]), r.stderr
        (home / "f.txt").write_text("across hosts\n")
        r = run("session", "cp", str(home / "f.txt"), "reach/sub2:/tmp/f.txt")
        assert r.returncode == 0, r.stderr
        assert c.exec("reach", ["cat", "/tmp/f.txt"], kernel="sub2") == (0, "across hosts\n")
    finally:
        c.destroy_session("reach")


def test_lost_agent_of_sub1_restarts_the_session_on_the_other_hosts(cluster: Cluster) -> None:
    """With restarts left, a session whose kernel's agent is LOST is placed again on the hosts
    that fit and runs again (docs/policies.md); the lost host's part is removed once its agent
    is back."""
    c = cluster.server.client()
    req = SessionCreate(
        name="moves",
        image=BASE_IMAGE,
        cluster_size=2,
        cluster_mode="multi-node",
        resources=ONE_PER_HOST,
        max_restarts=1,
    )
    start(c, req)
    try:
        info = c.get_session("moves")
        gone = next(k.agent for k in info.kernels if k.hostname == "sub1") or ""
        node = int(gone.removeprefix("tt"))
        cluster.kill_agent(node)
        deadline = time.monotonic() + 120
        while True:
            after = c.get_session("moves")
            if after.status == "RUNNING" and after.restarts == 1:
                break
            assert after.status not in ("ERROR", "TERMINATED", "CANCELLED"), after.status_info
            assert time.monotonic() < deadline, (after.status, after.status_info)
            time.sleep(0.5)
        agents = {k.hostname: k.agent for k in after.kernels}
        assert gone not in agents.values() and len(set(agents.values())) == 2, agents
        assert after.restart_history[0].kernel == "sub1"
        for k in after.kernels:
            code, out = c.exec("moves", ["printenv", "TROUPE_RESTART_COUNT"], kernel=k.hostname)
            assert (code, out.strip()) == (0, "1"), (k.hostname, out)
        code, out = c.exec("moves", ["sh", "-c", "ssh sub1 hostname"])
        assert (code, out.strip()) == (0, "sub1"), out
        cluster.start_agent(node)
        cluster.server.wait_agents({gone: "ALIVE"})
        wait_no_kernels(node, info.id, timeout=60)
        assert c.get_session("moves").status == "RUNNING"
    finally:
        c.destroy_session("moves")
