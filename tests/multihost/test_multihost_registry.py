"""The test bed's hosts pull from a registry instead of ``docker load``: a session whose image
lives only in the TLS + auth registry (on the bed's bridge, 10.123.0.1) starts on the three
hosts after a pull on each (one per host, with progress), the CA installed by the agents."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.multihost.bed import (
    ONE_PER_HOST,
    Before,
    Cluster,
    N,
    clean_hosts,
    ensure_bed,
    node_docker,
    start_cluster,
)
from tests.registry_fixture import PASSWORD, USER, LocalRegistry, start_registry
from troupe.api.models import SessionCreate

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def bed(
    testbed: Before, tmp_path_factory: pytest.TempPathFactory, docker_engine: None
) -> Iterator[tuple[Cluster, LocalRegistry]]:
    """The shared bed without copied images (its first module: see conftest), a registry on
    the bed's bridge and the module's own manager and agents."""
    ensure_bed("")  # no images copied: the hosts pull
    tmp = tmp_path_factory.mktemp("multihost-registry")
    reg = start_registry(tmp / "registry", address="10.123.0.1")
    try:
        cl = start_cluster(tmp)
        try:
            yield cl, reg
        finally:
            cl.stop()
    finally:
        reg.close()
        for i in range(1, N + 1):  # what the hosts pulled: the next module starts without it
            for ref in reg.images:
                node_docker(i, "image", "rm", "-f", ref)
        clean_hosts()


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
