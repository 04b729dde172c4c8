"""Sessions of several roles (docs/design.md, 'Roles'; docs/contract.md, 'Roles') through the
API with the fake agent: each kernel's spec is its role's, quotas count every role, bad input
is refused naming the field, a session that does not fit names the role and the kernel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.inprocess.conftest import IMAGE, Harness
from tests.inprocess.fake_agent import FakeAgent
from tests.inprocess.helpers import error_of, get_when, heartbeats, running
from tests.inprocess.test_hardening_users import create, new_user, refused, set_limits
from troupe.api.agent import KernelSpec

TORCH = "troupe/pytorch:0.1.0"
G = 1024**3


def spec(h: Harness, s: dict[str, Any], host: str) -> KernelSpec:
    return h.local.container(s["id"], host).spec


def file_of(sp: KernelSpec, path: str) -> str:
    return next(f.content for f in sp.files if f.path == path) or ""


async def test_roles_give_each_kernel_its_roles_image_resources_and_environ(
    manager: Harness,
) -> None:
    manager.local.image_names.add(TORCH)
    roles = [
        {"name": "worker", "replicas": 2, "image": TORCH, "resources": {"cpu": 0.25}},
        {"name": "ps", "replicas": 1, "resources": {"mem": "512m"}, "environ": {"X": "ps"}},
    ]
    s = await running(
        manager,
        "r",
        resources={"cpu": 0.5, "mem": "1g"},
        environ={"X": "top", "Y": "y"},
        roles=roles,
    )
    assert s["cluster_size"] == 4
    hosts = ["main1", "worker1", "worker2", "ps1"]
    assert [k["hostname"] for k in s["kernels"]] == hosts
    assert [(k["role"], k["idx"], k["rank"]) for k in s["kernels"]] == [
        ("main", 1, 0),
        ("worker", 1, 1),
        ("worker", 2, 2),
        ("ps", 1, 3),
    ]
    want = {
        "main1": (IMAGE, 0.5, G),
        "worker1": (TORCH, 0.25, G),
        "worker2": (TORCH, 0.25, G),
        "ps1": (IMAGE, 0.5, 512 * 1024**2),
    }
    for k in s["kernels"]:
        image, cpu, mem = want[k["hostname"]]
        assert (k["image"], k["resources"]["cpu"], k["resources"]["mem"]) == (image, cpu, mem)
        sp = spec(manager, s, k["hostname"])
        assert (sp.image, sp.cpu, sp.mem) == (image, cpu, mem)
        env = sp.env
        assert env["BACKENDAI_CLUSTER_REPLICAS"] == "main:1,worker:2,ps:1"
        assert env["BACKENDAI_CLUSTER_HOSTS"] == ",".join(hosts)
        assert env["BACKENDAI_CLUSTER_ROLE"] == k["role"]
        assert env["BACKENDAI_CLUSTER_IDX"] == str(k["idx"])
        assert env["BACKENDAI_CLUSTER_LOCAL_RANK"] == str(k["rank"])
        assert env["X"] == ("ps" if k["role"] == "ps" else "top") and env["Y"] == "y"
        assert file_of(sp, "/home/config/hostfile") == "".join(f"{h} slots=1\n" for h in hosts)
        assert f"cpu={cpu:g}\n" in file_of(sp, "/home/config/resource.txt")
    # the agents count each kernel's own cores: 0.5 + 2 x 0.25 + 0.5
    agents = (await manager.client.get("/agents")).json()
    assert agents[0]["cpu_free"] == pytest.approx(4 - 1.5)


async def test_no_roles_is_main_and_sub_as_before(manager: Harness) -> None:
    s = await running(manager, "plain", cluster_size=3, resources={"cpu": 0.5})
    assert [k["hostname"] for k in s["kernels"]] == ["main1", "sub1", "sub2"]
    assert {k["image"] for k in s["kernels"]} == {IMAGE}
    env = spec(manager, s, "sub2").env
    assert env["BACKENDAI_CLUSTER_REPLICAS"] == "main:1,sub:2"
    assert (env["BACKENDAI_CLUSTER_ROLE"], env["BACKENDAI_CLUSTER_IDX"]) == ("sub", "2")


async def test_main_given_as_a_role_and_batch_commands_per_role(manager: Harness) -> None:
    roles = [
        {"name": "main", "resources": {"cpu": 1}, "startup_command": "echo main"},
        {"name": "worker", "replicas": 2, "startup_command": "echo worker"},
        {"name": "ps"},
    ]
    s = await running(
        manager, "b", type="batch", cluster_size=4, roles=roles, resources={"cpu": 0.5}
    )
    assert [k["hostname"] for k in s["kernels"]] == ["main1", "worker1", "worker2", "ps1"]
    assert spec(manager, s, "main1").cpu == 1
    assert spec(manager, s, "main1").command == ["/bin/sh", "-c", "echo main"]
    assert spec(manager, s, "worker2").command == ["/bin/sh", "-c", "echo worker"]
    assert spec(manager, s, "ps1").command == []
    # the kernels with a command wait for the session to be ready, and are told "go"
    assert "_troupe_wait_go=1" in file_of(spec(manager, s, "worker1"), "/home/config/kernel.conf")
    assert "_troupe_wait_go=0" in file_of(spec(manager, s, "ps1"), "/home/config/kernel.conf")
    assert manager.local.calls.count("signal_go") == 3


BAD: list[tuple[dict[str, Any], str, str]] = [
    ({"roles": [{"name": "main", "replicas": 2}]}, "roles[0].replicas", "exactly one"),
    ({"roles": [{"name": "ps"}, {"name": "ps"}]}, "roles[1].name", "twice"),
    ({"roles": [{"name": "sub"}, {"name": "sub1"}]}, "roles[1].name", "lowercase word"),
    ({"roles": [{"name": "Worker"}]}, "roles[0].name", "lowercase word"),
    ({"roles": [{"name": "work-er"}]}, "roles[0].name", "lowercase word"),
    ({"roles": [{"name": "w", "replicas": 0}]}, "roles[0].replicas", "at least 1"),
    ({"roles": []}, "roles", "at least one role"),
    ({"roles": [{"name": "w", "replicas": 2}], "cluster_size": 2}, "cluster_size", "total of 3"),
    ({"roles": [{"name": "w", "replicas": 10_000}]}, "roles", "at most"),
    ({"roles": [{"name": "w", "image": "Bad Image"}]}, "roles[0].image", "image reference"),
    ({"roles": [{"name": "w", "environ": {"BACKENDAI_X": "1"}}]}, "roles[0].environ", "reserved"),
    ({"roles": [{"name": "w", "startup_command": "x"}]}, "roles[0].startup_command", "batch"),
    ({"roles": [{"name": "w", "resources": {"cpu": 0.001}}]}, "roles[0].resources.cpu", "least"),
    ({"roles": [{"name": "w", "image": "troupe/nope:1"}]}, "roles[0].image", "not found"),
]


@pytest.mark.parametrize(("body", "field", "words"), BAD, ids=[b[1] + ":" + b[2] for b in BAD])
async def test_bad_roles_are_refused_naming_the_field(
    manager: Harness, body: dict[str, Any], field: str, words: str
) -> None:
    r = await manager.client.post("/sessions", json={"name": "bad", "image": IMAGE, **body})
    assert r.status_code == 422, r.text
    err = error_of(r)
    assert err["field"] == field and words in err["message"], err
    assert (await manager.client.get("/sessions")).json() == []  # nothing created


async def test_quotas_count_every_role(manager: Harness) -> None:
    bob, _ = await new_user(manager, "bob")
    await set_limits(manager, "bob", cpu=2, kernels=5, gpu=0)
    roles = [{"name": "worker", "replicas": 2, "resources": {"cpu": 1}}]
    refused(
        await create(bob, "big", resources={"cpu": 0.5}, roles=roles),
        "resources",
        "2.5 cores over 3 kernels of every role",
        "limit of 2 (cpu)",
    )
    small = [{"name": "worker", "replicas": 2, "resources": {"cpu": 0.5}}]
    assert (await create(bob, "ok", resources={"cpu": 0.25}, roles=small)).status_code == 201
    usage = (await manager.client.get("/users/bob")).json()["usage"]
    assert usage["kernels"] == 3 and usage["cpu"] == pytest.approx(1.25)
    gpu = [{"name": "worker", "resources": {"cpu": 0.25, "gpu": 1}}]
    refused(await create(bob, "gpu", resources={"cpu": 0.25}, roles=gpu), "resources", "(gpu)")


async def test_pending_and_never_fitting_sessions_name_the_role_and_kernel(
    manager: Harness,
) -> None:
    await running(manager, "hog", resources={"cpu": 3})
    roles = [{"name": "worker", "resources": {"cpu": 1}}]
    await manager.create("late", resources={"cpu": 0.5}, roles=roles)
    s = await get_when(manager, "late", lambda s: "pending" in s["status_info"])
    assert s["status"] == "PENDING"
    lines = " ".join(s["status_info"]["pending"]["worker1"])
    assert "role worker, kernel worker1" in lines and "cpu" in lines, lines
    # a role no agent can ever hold is refused at once, naming it
    r = await manager.client.post(
        "/sessions",
        json={"name": "never", "image": IMAGE, "roles": [{"name": "gpu", "resources": {"gpu": 1}}]},
    )
    err = error_of(r)
    assert err["field"] == "roles" and "role gpu, kernel gpu1" in err["message"], err


async def test_multi_node_roles_spread_when_no_agent_holds_them_all(manager: Harness) -> None:
    r1 = await manager.register("r1", group="grp", cpu=2)
    r2 = await manager.register("r2", group="grp", cpu=1)
    roles = [{"name": "worker", "replicas": 2, "resources": {"cpu": 1}}]
    async with heartbeats(r1, "r1"), heartbeats(r2, "r2"):  # ALIVE (LOST after 1 s silent)
        s = await running(
            manager,
            "spread",
            group="grp",
            cluster_mode="multi-node",
            resources={"cpu": 0.5},
            roles=roles,
        )
        # main1 first on the roomiest; then the workers, the roomiest first again
        assert [k["agent"] for k in s["kernels"]] == ["r1", "r1", "r2"]
        # single-node, no agent of the group can ever hold them: refused, naming role and kernel
        body = {"name": "one", "image": IMAGE, "group": "grp", "roles": roles}
        r = await manager.client.post("/sessions", json={**body, "resources": {"cpu": 0.25}})
    err = error_of(r)
    assert err["code"] == "does_not_fit" and err["field"] == "roles", err
    assert "role worker, kernel worker2: agent r1: cpu: needs 1 core" in err["message"], err


async def test_gpu_roles_get_their_own_devices_and_hostfile_slots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CPU-only main next to GPU workers: only the workers hold GPUs."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    h = Harness(tmp_path)
    h.local = FakeAgent("local", gpus=2)
    h.agents = {"local": h.local}
    await h.start()
    try:
        roles = [{"name": "worker", "replicas": 2, "resources": {"gpu": 1}}]
        s = await running(h, "g", resources={"cpu": 0.5}, roles=roles)
        assert [k["gpus"] for k in s["kernels"]] == [[], ["GPU-local-0"], ["GPU-local-1"]]
        sp = spec(h, s, "worker2")
        assert sp.gpus == ["GPU-local-1"] and sp.env["TROUPE_GPUS"] == "1"
        assert spec(h, s, "main1").env["TROUPE_GPUS"] == "0"
        hostfile = "main1 slots=1\nworker1 slots=1\nworker2 slots=1\n"
        assert file_of(sp, "/home/config/hostfile") == hostfile
        agents = (await h.client.get("/agents")).json()
        assert agents[0]["gpu_free"] == 0
    finally:
        await h.stop()
