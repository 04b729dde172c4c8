"""Roles in the create request (api/models.py, api/roles.py) and in the kernel specs they make
(manager/kernels.py): docs/contract.md, 'Roles'."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from troupe.api import defaults
from troupe.api.models import SessionCreate
from troupe.cluster import build_cluster, generate_ed25519
from troupe.manager.kernels import KernelShape, SessionPlan, kernel_specs

BASE = {"name": "s", "image": "troupe/base:0.1.0"}


def make(**body: Any) -> SessionCreate:
    return SessionCreate.model_validate({**BASE, **body})


def refusal(**body: Any) -> str:
    with pytest.raises(ValidationError) as e:
        make(**body)
    return str(e.value.errors()[0]["msg"]).removeprefix("Value error, ")


def test_no_roles_is_main_and_sub() -> None:
    roles = make(cluster_size=3, resources={"cpu": 2}).resolved_roles()
    assert [(r.name, r.replicas, r.cpu) for r in roles] == [("main", 1, 2), ("sub", 2, 2)]
    assert [(r.name, r.replicas) for r in make().resolved_roles()] == [("main", 1)]


def test_roles_take_the_sessions_values_they_leave_out() -> None:
    req = make(
        type="batch",
        startup_command="train",
        resources={"cpu": 1, "mem": "1g", "gpu": 1},
        roles=[
            {"name": "ps", "resources": {"gpu": 0}, "environ": {"A": "1"}},
            {"name": "worker", "replicas": 3, "image": "troupe/pytorch:0.1.0"},
        ],
    )
    assert req.cluster_size == 5
    main, ps, worker = req.resolved_roles()
    assert (main.name, main.image, main.gpu, main.startup_command) == (
        "main",
        BASE["image"],
        1,
        "train",
    )
    assert (ps.cpu, ps.mem, ps.gpu, ps.environ, ps.startup_command) == (
        1,
        1024**3,
        0,
        {"A": "1"},
        None,
    )
    assert (worker.replicas, worker.image, worker.gpu) == (3, "troupe/pytorch:0.1.0", 1)


def test_main_as_a_role_keeps_its_place_first() -> None:
    req = make(roles=[{"name": "worker"}, {"name": "main", "resources": {"cpu": 2}}])
    assert [(r.name, r.cpu) for r in req.resolved_roles()] == [
        ("main", 2),
        ("worker", defaults.CPU),
    ]
    assert make(roles=[{"name": "main"}], cluster_size=1).cluster_size == 1


@pytest.mark.parametrize(
    ("body", "prefix"),
    [
        ({"roles": [{"name": "main", "replicas": 2}]}, "roles[0].replicas:"),
        ({"roles": [{"name": "a"}, {"name": "b"}, {"name": "a"}]}, "roles[2].name:"),
        ({"roles": [{"name": "sub"}, {"name": "sub1"}]}, "roles[1].name:"),
        ({"roles": [{"name": "x" * 17}]}, "roles[0].name:"),
        ({"roles": [{"name": ""}]}, "roles[0].name:"),
        ({"roles": [{"name": "w", "replicas": -1}]}, "roles[0].replicas:"),
        ({"roles": [{"name": "w"}], "cluster_size": 3}, "cluster_size:"),
        ({"roles": [{"name": "w", "resources": {"mem": "1m"}}]}, "roles[0].resources.mem:"),
        ({"roles": [{"name": "w", "environ": {"1X": "y"}}]}, "roles[0].environ:"),
        ({"roles": []}, "roles:"),
    ],
)
def test_bad_roles_name_the_field(body: dict[str, Any], prefix: str) -> None:
    assert refusal(**body).startswith(prefix)


@given(st.text(max_size=20))
def test_role_names_are_lowercase_words(name: str) -> None:
    ok = name.isascii() and name.isalpha() and name.islower() and 1 <= len(name) <= 16
    try:
        make(roles=[{"name": name}] if name != "main" else [{"name": name, "replicas": 1}])
    except ValidationError:
        assert not ok
    else:
        assert ok


def test_kernel_specs_per_role() -> None:
    key = generate_ed25519()
    contracts = build_cluster(
        "s" * 36, ["s" * 36, "k1", "k2"], "multi-node", layout=[("main", 1), ("worker", 2)]
    )
    worker = KernelShape("troupe/pytorch:0.1.0", 0.25, 2**29, 2, "python w.py")
    plan = SessionPlan(
        session_id="s" * 36,
        owner="u1",
        image="troupe/base:0.1.0",
        network="net",
        batch=True,
        startup_command="python main.py",
        cpu=0.5,
        mem=2**28,
        uid=1000,
        gid=1000,
        ssh_private_key=key.private_openssh,
        ssh_public_key=key.public_openssh,
        mounts={},
        roles={"worker1": worker, "worker2": replace(worker, startup_command=None)},
    )
    keys = {c.hostname: ("PRIV", key.public_openssh) for c in contracts}
    main1, worker1, worker2 = kernel_specs(plan, contracts, keys)
    assert (main1.image, main1.cpu, main1.env["TROUPE_GPUS"]) == ("troupe/base:0.1.0", 0.5, "0")
    assert (worker1.image, worker1.cpu, worker1.env["TROUPE_GPUS"]) == (worker.image, 0.25, "2")
    assert main1.command == ["/bin/sh", "-c", "python main.py"]
    assert worker1.command == ["/bin/sh", "-c", "python w.py"] and worker2.command == []
    files = {f.path: f.content for f in worker2.files}
    assert files["/home/config/hostfile"] == "main1 slots=1\nworker1 slots=2\nworker2 slots=2\n"
    assert files["/job/hostfile"] == files["/home/config/hostfile"]
    assert files["/home/config/resource.txt"] == f"cpu=0.25\nmem={2**29}\ncuda.device=2\n"
    assert "_troupe_wait_go=0" in (files["/home/config/kernel.conf"] or "")
