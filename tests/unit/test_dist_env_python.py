"""troupe.cluster.dist.derive_dist_env: the reference for setup_dist_environ.sh
(docs/contract.md, 'Environment in every kernel')."""

from __future__ import annotations

import json

import pytest

from troupe.cluster import derive_dist_env
from troupe.cluster.dist import LAUNCHER_NAMES

HOSTS4 = "main1,sub1,sub2,sub3"
TF4_RANK2 = (
    '{"cluster": {"worker": ["main1:29500", "sub1:29501", "sub2:29502", "sub3:29503"]}, '
    '"task": {"type": "worker", "index": 2}}'
)

LAUNCHERS4_RANK2 = {
    "PET_NNODES": "4",
    "PET_NODE_RANK": "2",
    "PET_MASTER_ADDR": "main1",
    "PET_MASTER_PORT": "29500",
    "OMPI_MCA_orte_default_hostfile": "/home/config/hostfile",
    "PRTE_MCA_prte_default_hostfile": "/home/config/hostfile",
}


def _env(size: str = "4", hosts: str = HOSTS4, rank: str = "2", **extra: str) -> dict[str, str]:
    return {
        "BACKENDAI_CLUSTER_SIZE": size,
        "BACKENDAI_CLUSTER_HOSTS": hosts,
        "BACKENDAI_CLUSTER_LOCAL_RANK": rank,
        **extra,
    }


def test_spec_example() -> None:
    assert derive_dist_env(_env()) == {
        "MASTER_ADDR": "main1",
        "MASTER_PORT": "29500",
        "TF_CONFIG": TF4_RANK2,
        **LAUNCHERS4_RANK2,
    }


def test_launcher_variables_never_override_the_users() -> None:
    """A value the user set stays, even empty; WORLD_SIZE/RANK/LOCAL_RANK stay unset."""
    env = _env(PET_NNODES="1", OMPI_MCA_orte_default_hostfile="")
    derived = derive_dist_env(env)
    assert "PET_NNODES" not in derived and "OMPI_MCA_orte_default_hostfile" not in derived
    assert derived["PET_NODE_RANK"] == "2"
    assert not {"WORLD_SIZE", "RANK", "LOCAL_RANK"} & derived.keys()


def test_tf_config_structure() -> None:
    tf = json.loads(derive_dist_env(_env(rank="0"))["TF_CONFIG"])
    assert tf == {
        "cluster": {"worker": ["main1:29500", "sub1:29501", "sub2:29502", "sub3:29503"]},
        "task": {"type": "worker", "index": 0},
    }


@pytest.mark.parametrize("size", ["1", "0", "", "abc", "-4", "+4", " 4", "4.0", "1" * 19, "01"])
def test_nothing_without_a_cluster(size: str) -> None:
    assert derive_dist_env(_env(size=size, hosts="main1")) == {}
    assert derive_dist_env(_env(size=size)) == {}


def test_nothing_without_size_or_hosts() -> None:
    assert derive_dist_env({}) == {}
    assert derive_dist_env({"BACKENDAI_CLUSTER_HOSTS": HOSTS4}) == {}
    assert derive_dist_env({"BACKENDAI_CLUSTER_SIZE": "4"}) == {}
    assert derive_dist_env(_env(hosts="")) == {}


@pytest.mark.parametrize("hosts", ["main1,sub1,", ",main1", "main1,,sub1", 'ma"in1,sub1', "a b,c"])
def test_nothing_for_unusable_hosts(hosts: str) -> None:
    assert derive_dist_env(_env(hosts=hosts)) == {}


def test_leading_zeros_are_decimal() -> None:
    out = derive_dist_env(_env(size="004", rank="002", BACKENDAI_DIST_ENV="per-container"))
    assert out["TF_CONFIG"] == TF4_RANK2
    assert out["WORLD_SIZE"] == "4"
    assert out["RANK"] == "2"


@pytest.mark.parametrize("rank", ["", "x", "-1", "1" * 19])
def test_non_numeric_rank_is_zero(rank: str) -> None:
    tf = json.loads(derive_dist_env(_env(rank=rank))["TF_CONFIG"])
    assert tf["task"] == {"type": "worker", "index": 0}
    env = _env()
    del env["BACKENDAI_CLUSTER_LOCAL_RANK"]
    assert json.loads(derive_dist_env(env)["TF_CONFIG"])["task"]["index"] == 0


@pytest.mark.parametrize("name", ["MASTER_ADDR", "MASTER_PORT", "TF_CONFIG"])
@pytest.mark.parametrize("value", ["", "user-value"])
def test_user_set_values_kept(name: str, value: str) -> None:
    out = derive_dist_env(_env(**{name: value}))
    assert name not in out
    assert len(out) == 2 + len(LAUNCHER_NAMES)


@pytest.mark.parametrize("name", ["WORLD_SIZE", "RANK", "WORLD_RANK", "LOCAL_RANK"])
@pytest.mark.parametrize("value", ["", "7"])
def test_user_set_per_container_values_kept(name: str, value: str) -> None:
    out = derive_dist_env(_env(BACKENDAI_DIST_ENV="per-container", **{name: value}))
    assert name not in out
    assert len(out) == 6 + len(LAUNCHER_NAMES)


@pytest.mark.parametrize(
    ("knob", "port"),
    [
        ("12345", 12345),
        ("1", 1),
        ("65535", 65535),
        ("0080", 80),
        ("0", 29500),
        ("65536", 29500),
        ("", 29500),
        ("abc", 29500),
        ("12a", 29500),
        ("9" * 30, 29500),
    ],
)
def test_master_port_knob(knob: str, port: int) -> None:
    out = derive_dist_env(_env(size="3", hosts="main1,sub1,sub2", BACKENDAI_DIST_MASTER_PORT=knob))
    assert out["MASTER_PORT"] == str(port)
    workers = json.loads(out["TF_CONFIG"])["cluster"]["worker"]
    assert workers == [f"main1:{port}", f"sub1:{port + 1}", f"sub2:{port + 2}"]


def test_per_container() -> None:
    out = derive_dist_env(_env(BACKENDAI_DIST_ENV="per-container"))
    assert out == {
        "MASTER_ADDR": "main1",
        "MASTER_PORT": "29500",
        "TF_CONFIG": TF4_RANK2,
        "WORLD_SIZE": "4",
        "RANK": "2",
        "WORLD_RANK": "2",
        "LOCAL_RANK": "0",
        **LAUNCHERS4_RANK2,
    }


@pytest.mark.parametrize("flag", ["", "default", "PER-CONTAINER", "per-container "])
def test_per_container_needs_exact_flag(flag: str) -> None:
    assert set(derive_dist_env(_env(BACKENDAI_DIST_ENV=flag))) == {
        "MASTER_ADDR",
        "MASTER_PORT",
        "TF_CONFIG",
        *LAUNCHER_NAMES,
    }


def test_input_not_modified() -> None:
    env = _env(BACKENDAI_DIST_ENV="per-container")
    before = dict(env)
    derive_dist_env(env)
    assert env == before


# --- roles: TF_CONFIG's task types (docs/contract.md, 'Roles') ---------------------------------


def _tf(hosts: str, rank: int) -> dict[str, object]:
    size = str(len(hosts.split(",")))
    out: dict[str, object] = json.loads(derive_dist_env(_env(size, hosts, str(rank)))["TF_CONFIG"])
    return out


def test_tf_config_ps_makes_main_the_chief() -> None:
    hosts = "main1,ps1,worker1,worker2"
    cluster = {
        "chief": ["main1:29500"],
        "worker": ["worker1:29502", "worker2:29503"],
        "ps": ["ps1:29501"],
    }
    assert _tf(hosts, 0) == {"cluster": cluster, "task": {"type": "chief", "index": 0}}
    assert _tf(hosts, 1) == {"cluster": cluster, "task": {"type": "ps", "index": 0}}
    assert _tf(hosts, 3) == {"cluster": cluster, "task": {"type": "worker", "index": 1}}


def test_tf_config_without_ps_main_is_a_worker() -> None:
    tf = _tf("main1,worker1,evaluator1,data1", 3)
    assert tf["cluster"] == {
        "worker": ["main1:29500", "worker1:29501", "data1:29503"],
        "evaluator": ["evaluator1:29502"],
    }
    assert tf["task"] == {"type": "worker", "index": 2}


def test_tf_config_chief_role_keeps_main_a_worker() -> None:
    tf = _tf("main1,chief1,ps1", 0)
    assert tf["cluster"] == {
        "chief": ["chief1:29501"],
        "worker": ["main1:29500"],
        "ps": ["ps1:29502"],
    }
    assert tf["task"] == {"type": "worker", "index": 0}


def test_hosts_without_roles_stay_workers_in_order() -> None:
    tf = _tf("main1,sub1,sub2", 2)
    assert tf == {
        "cluster": {"worker": ["main1:29500", "sub1:29501", "sub2:29502"]},
        "task": {"type": "worker", "index": 2},
    }
