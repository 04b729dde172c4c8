"""The test bed's hosts pull from a registry instead of ``docker load``: a session whose image
lives only in the TLS + auth registry (on the bed's bridge, 10.123.0.1) starts on the three
hosts after a pull on each (one per host, with progress), the CA installed by the agents."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import start_server, stop_server
from tests.multihost.test_multihost_sessions import ONE_PER_HOST, TOKEN, Cluster, N, node_docker, tb
from tests.registry_fixture import PASSWORD, USER, LocalRegistry, start_registry

from troupe.api.models import SessionCreate

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def bed(
    tmp_path_factory: pytest.TempPathFactory, docker_engine: None
) -> Iterator[tuple[Cluster, LocalRegistry]]:
    up = tb("up", str(N), TB_IMAGES="")  # no images copied: the hosts pull
    assert up.returncode == 0, up.stdout + up.stderr
    tmp = tmp_path_factory.mktemp("multihost-registry")
    try:
        reg = start_registry(tmp / "registry", address="10.123.0.1")
    except BaseException:
        tb("down", TB_FAST="1")
        raise
    try:
        server = start_server(
            tmp,
            "--no-local-agent",
            "--agent-token",
            TOKEN,
            "--agent-timeout",
            "4",
            host="10.123.0.1",
        )
    except BaseException:
        reg.close()
        tb("down", TB_FAST="1")
        raise
    cl = Cluster(server, tmp / "shared-data", tmp)
    try:
        for i in range(1, N + 1):
            cl.start_agent(i)
        server.wait_agents({f"tt{i}": "ALIVE" for i in range(1, N + 1)})
        yield cl, reg
    finally:
        try:
            c = server.client()
            for s in c.list_sessions():
                c.destroy_session(s.id)
        finally:
            for i in list(cl.agents):
                os.killpg(cl.agents[i].pid, signal.SIGTERM)
                cl.agents[i].wait(30)
            stop_server(server)
            reg.close()
            tb("down", TB_FAST="1")


def test_hosts_pull_from_the_registry(bed: tuple[Cluster, LocalRegistry], tmp_path: Path) -> None:
    cl, reg = bed
    image = reg.push("multihost", 16 * 1024**2)
    for i in range(1, N + 1):
        assert node_docker(i, "image", "inspect", image).returncode != 0
    pw = tmp_path / "pw"
    pw.write_text(PASSWORD)
    pw.chmod(0o600)
    r = cl.server.cli(
        *("registry", "add", reg.host, "--username", USER, "--password-file", str(pw)),
        *("--ca-file", str(reg.ca)),
    )
    assert r.returncode == 0, r.stderr
    c = cl.server.client()
    c.create_session(
        SessionCreate(
            name="pulled",
            image=image,
            cluster_size=N,
            cluster_mode="multi-node",
            resources=ONE_PER_HOST,
        )
    )
    seen: dict[str, int] = {}
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        info = c.get_session("pulled")
        for p in info.status_info.get("pulling") or []:
            seen[p["agent"]] = max(seen.get(p["agent"], 0), p["total_bytes"])
        if info.status != "PREPARING" and info.status != "PENDING" and info.status != "SCHEDULED":
            break
        time.sleep(0.2)
    assert info.status == "RUNNING", info.status_info
    assert "pulled" in info.phases
    assert sorted(seen) == [f"tt{i}" for i in range(1, N + 1)], seen
    assert all(total > 16 * 1024**2 for total in seen.values()), seen
    log = cl.server.log_path.read_text()
    for i in range(1, N + 1):
        assert log.count(f"pulling {image} on agent tt{i}") == 1
        assert node_docker(i, "image", "inspect", image).returncode == 0
    code, out = c.exec("pulled", ["sh", "-c", "for h in sub1 sub2; do ssh $h hostname; done"])
    assert (code, out) == (0, "sub1\nsub2\n")
    c.destroy_session("pulled")
