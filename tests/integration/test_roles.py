"""A session of several roles on the real engine (docs/contract.md, 'Roles'): main on
troupe/base with 0.5 CPU, worker:2 on troupe/pytorch with 0.25 CPU each."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.conftest import BASE_IMAGE, TORCH_IMAGE, Server, docker
from troupe.api.models import Resources, RoleSpec, SessionCreate
from troupe.api.roles import RoleResources
from troupe.client.sdk import Client
from troupe.cluster import build_cluster, derive_dist_env

pytestmark = pytest.mark.docker
HOSTS = ["main1", "worker1", "worker2"]


def env_of(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def sh(c: Client, name: str, script: str, kernel: str = "main1") -> tuple[int, str]:
    return c.exec(name, ["sh", "-c", script], kernel=kernel)


def test_roles_images_cpus_variables_and_ssh(server: Server) -> None:
    c = server.client()
    name = f"roles-{uuid.uuid4().hex[:6]}"
    worker = RoleSpec(
        name="worker", replicas=2, image=TORCH_IMAGE, resources=RoleResources(cpu=0.25)
    )
    req = SessionCreate(
        name=name,
        image=BASE_IMAGE,
        resources=Resources(cpu=0.5, mem=256 * 1024**2),
        roles=[worker],
    )
    c.create_session(req)
    info = c.wait_session(name, until="running", timeout=180)
    try:
        assert info.status == "RUNNING", info.status_info
        assert [k.hostname for k in info.kernels] == HOSTS
        images = {"main1": BASE_IMAGE, "worker1": TORCH_IMAGE, "worker2": TORCH_IMAGE}
        nano = {"main1": 500_000_000, "worker1": 250_000_000, "worker2": 250_000_000}
        for k in info.kernels:
            assert k.image == images[k.hostname]
            out = docker(
                "inspect", "-f", "{{.Config.Image}} {{.HostConfig.NanoCpus}}", k.container_id or ""
            ).stdout.split()
            assert out == [images[k.hostname], str(nano[k.hostname])], k.hostname
        expected = {
            k.hostname: k.env
            for k in build_cluster(
                info.id,
                [k.id for k in info.kernels],
                "single-node",
                layout=[("main", 1), ("worker", 2)],
            )
        }
        for host in HOSTS:
            want = {**expected[host], **derive_dist_env(expected[host])}
            assert want["BACKENDAI_CLUSTER_REPLICAS"] == "main:1,worker:2"
            assert want["BACKENDAI_CLUSTER_HOSTS"] == ",".join(HOSTS)
            assert want["MASTER_ADDR"] == "main1"
            code, out = sh(c, name, "env", kernel=host)  # exec into the kernel
            assert code == 0, out
            code, out2 = sh(c, name, f"ssh {host} env 2>/tmp/e; cat /tmp/e >&2")  # from main1
            assert code == 0, out2
            for env in (env_of(out), env_of(out2)):
                for key, value in want.items():
                    assert env.get(key) == value, (host, key)
                assert env["BACKENDAI_CLUSTER_ROLE"] == host.rstrip("12")
                assert env["BACKENDAI_CLUSTER_IDX"] == host[-1]
                assert env["BACKENDAI_CLUSTER_LOCAL_RANK"] == str(HOSTS.index(host))
            tf = json.loads(env_of(out)["TF_CONFIG"])
            assert tf["cluster"] == {"worker": ["main1:29500", "worker1:29501", "worker2:29502"]}
        code, out = sh(c, name, "ssh worker2 hostname 2>/tmp/e; cat /tmp/e")
        assert (code, out) == (0, "worker2\n")
        code, out = sh(c, name, "cat /home/config/hostfile")
        assert out == "main1 slots=1\nworker1 slots=1\nworker2 slots=1\n"
    finally:
        c.destroy_session(name)


def test_batch_role_commands_start_with_the_session(server: Server) -> None:
    """A role's startup command runs in each of its kernels once the session is ready; main1's
    command is the session's result."""
    c = server.client()
    name = f"rolesb-{uuid.uuid4().hex[:6]}"
    worker = RoleSpec(
        name="worker",
        replicas=1,
        startup_command="echo $BACKENDAI_CLUSTER_HOST > /tmp/hello; exec sleep 600",
    )
    main = (
        "for i in $(seq 100); do"
        ' [ "$(ssh worker1 cat /tmp/hello 2>/dev/null)" = worker1 ] && exit 7; sleep 0.2;'
        " done; exit 1"
    )
    req = SessionCreate(
        name=name,
        image=BASE_IMAGE,
        type="batch",
        startup_command=main,
        resources=Resources(cpu=0.25, mem=256 * 1024**2),
        roles=[worker],
    )  # type: ignore[arg-type]
    c.create_session(req)
    try:
        info = c.wait_session(name, until="final", timeout=180)
        assert (info.status, info.exit_code) == ("TERMINATED", 7), info.status_info
    finally:
        c.destroy_session(name)
