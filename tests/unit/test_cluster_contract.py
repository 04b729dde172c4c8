"""The cluster contract of docs/contract.md, 'Environment in every kernel' and 'SSH between
kernels': hostnames, ranks, BACKENDAI_* env, SSH files."""

from __future__ import annotations

import uuid

import pytest
from cryptography.hazmat.primitives import serialization
from hypothesis import given
from hypothesis import strategies as st

from troupe.cluster import (
    CLUSTER_ENV_NAMES,
    KernelContract,
    SSHKeyPair,
    build_cluster,
    cluster_hostnames,
    generate_ed25519,
    hostfile_text,
    known_hosts_text,
    replicas_text,
    role_error,
    ssh_client_config_text,
    sshd_config_text,
)

sizes = st.integers(min_value=1, max_value=64)
modes = st.sampled_from(["single-node", "multi-node"])
dist_envs = st.sampled_from(["default", "per-container"])


def _ids(size: int) -> list[str]:
    return [str(uuid.uuid4()) for _ in range(size)]


def _cluster(size: int, **kwargs: object) -> list[KernelContract]:
    ids = _ids(size)
    return build_cluster(ids[0], ids, "single-node", **kwargs)  # type: ignore[arg-type]


@given(sizes)
def test_hostnames(size: int) -> None:
    hosts = cluster_hostnames(size)
    assert len(hosts) == size
    assert len(set(hosts)) == size
    assert hosts[0] == "main1"
    assert hosts[1:] == [f"sub{i}" for i in range(1, size)]


@given(sizes, modes, dist_envs)
def test_build_cluster(size: int, mode: str, dist_env: str) -> None:
    ids = _ids(size)
    user = {"FOO": "bar", "BACKENDAI_DIST_MASTER_PORT": "12345"}
    kernels = build_cluster(ids[0], ids, mode, user, dist_env)  # type: ignore[arg-type]
    hosts = cluster_hostnames(size)

    assert [k.hostname for k in kernels] == hosts
    assert [k.kernel_id for k in kernels] == ids
    assert [k.rank for k in kernels] == list(range(size))
    assert [k.role for k in kernels] == ["main"] + ["sub"] * (size - 1)
    assert [k.idx for k in kernels] == [1, *range(1, size)]
    main = kernels[0]
    expected_replicas = "main:1" if size == 1 else f"main:1,sub:{size - 1}"
    for k in kernels:
        env = k.env
        assert set(CLUSTER_ENV_NAMES) <= env.keys()
        assert env["BACKENDAI_CLUSTER_SIZE"] == str(size)
        assert env["BACKENDAI_CLUSTER_HOSTS"] == ",".join(hosts)
        assert env["BACKENDAI_CLUSTER_HOSTS"].split(",")[0] == "main1"
        assert env["BACKENDAI_CLUSTER_REPLICAS"] == expected_replicas
        assert env["BACKENDAI_CLUSTER_HOST"] == k.hostname
        assert env["BACKENDAI_CLUSTER_HOST"] == f"{k.role}{k.idx}"
        assert env["BACKENDAI_CLUSTER_IDX"] == str(k.idx)
        assert env["BACKENDAI_CLUSTER_ROLE"] == k.role
        assert env["BACKENDAI_CLUSTER_LOCAL_RANK"] == str(k.rank)
        assert env["BACKENDAI_CLUSTER_MODE"] == mode
        assert env["BACKENDAI_KERNEL_ID"] == k.kernel_id
        assert env["BACKENDAI_SESSION_ID"] == main.env["BACKENDAI_KERNEL_ID"] == ids[0]
        assert env["FOO"] == "bar"
        assert env["BACKENDAI_DIST_MASTER_PORT"] == "12345"
        if dist_env == "per-container":
            assert env["BACKENDAI_DIST_ENV"] == "per-container"
        else:
            assert "BACKENDAI_DIST_ENV" not in env
        # Only the table's names, the user's and the per-container flag: nothing else sneaks in.
        assert env.keys() <= {*CLUSTER_ENV_NAMES, *user, "BACKENDAI_DIST_ENV"}


def test_example_sub2_of_four() -> None:
    """The example of docs/contract.md, 'Environment in every kernel': kernel sub2 of a 4-kernel
    session."""
    sub2 = _cluster(4)[2]
    assert sub2.env["BACKENDAI_CLUSTER_SIZE"] == "4"
    assert sub2.env["BACKENDAI_CLUSTER_HOSTS"] == "main1,sub1,sub2,sub3"
    assert sub2.env["BACKENDAI_CLUSTER_REPLICAS"] == "main:1,sub:3"
    assert sub2.env["BACKENDAI_CLUSTER_HOST"] == "sub2"
    assert sub2.env["BACKENDAI_CLUSTER_IDX"] == "2"
    assert sub2.env["BACKENDAI_CLUSTER_ROLE"] == "sub"
    assert sub2.env["BACKENDAI_CLUSTER_LOCAL_RANK"] == "2"


def test_size_one_is_plain_session() -> None:
    (main,) = _cluster(1)
    assert main.env["BACKENDAI_CLUSTER_REPLICAS"] == "main:1"
    assert main.env["BACKENDAI_CLUSTER_HOSTS"] == "main1"
    assert (main.role, main.idx, main.rank) == ("main", 1, 0)


@pytest.mark.parametrize(
    "name", ["BACKENDAI_CLUSTER_SIZE", "BACKENDAI_KERNEL_ID", "BACKENDAI_DIST_ENV", "BACKENDAI_"]
)
def test_reserved_names_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="reserved"):
        _cluster(2, user_environ={name: "x"})


def test_master_port_knob_allowed_and_other_names_kept() -> None:
    user = {"BACKENDAI_DIST_MASTER_PORT": "23456", "backendai_lower": "1", "MASTER_PORT": "1"}
    for k in _cluster(3, user_environ=user):
        assert {n: k.env[n] for n in user} == user


def test_mismatched_session_id_rejected() -> None:
    ids = _ids(3)
    with pytest.raises(ValueError, match="main1"):
        build_cluster(ids[1], ids, "multi-node")


def test_empty_and_duplicate_kernels_rejected() -> None:
    with pytest.raises(ValueError):
        build_cluster("s", [], "single-node")
    with pytest.raises(ValueError, match="unique"):
        build_cluster("a", ["a", "b", "a"], "single-node")


def test_invalid_mode_rejected() -> None:
    with pytest.raises(ValueError):
        build_cluster("a", ["a"], "both")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        build_cluster("a", ["a"], "single-node", dist_env="per-process")  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [0, -1])
def test_size_below_one_rejected(size: int) -> None:
    with pytest.raises(ValueError):
        cluster_hostnames(size)


def test_hostfile() -> None:
    assert hostfile_text(["main1", "sub1"]) == "main1 slots=1\nsub1 slots=1\n"
    assert hostfile_text(cluster_hostnames(3), slots=4) == (
        "main1 slots=4\nsub1 slots=4\nsub2 slots=4\n"
    )
    with pytest.raises(ValueError):
        hostfile_text(["main1"], slots=0)
    with pytest.raises(ValueError):
        hostfile_text(["main1\nevil"])


def test_known_hosts() -> None:
    text = known_hosts_text(
        {
            "main1": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA1 root@main1",
            "sub1": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB2",
            "sub2": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIC3 a comment with spaces\n",
        }
    )
    assert text == (
        "[main1]:2200 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA1\n"
        "[sub1]:2200 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB2\n"
        "[sub2]:2200 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIC3\n"
    )
    assert known_hosts_text({}) == ""
    with pytest.raises(ValueError):
        known_hosts_text({"main1": "ssh-ed25519"})


def test_ssh_client_config() -> None:
    text = ssh_client_config_text(["main1", "sub1", "sub2"])
    lines = text.splitlines()
    assert lines[0] == "Host main1 sub1 sub2"
    options = dict(line.split(None, 1) for line in lines[1:])
    assert options == {
        "Port": "2200",
        "User": "work",
        "IdentityFile": "~/.ssh/id_cluster",
        "IdentitiesOnly": "yes",
        "StrictHostKeyChecking": "yes",
        "UserKnownHostsFile": "~/.ssh/known_hosts",
        "LogLevel": "ERROR",
        "BatchMode": "yes",
        "ConnectTimeout": "10",
        "ServerAliveInterval": "30",
    }
    assert text.endswith("\n")
    assert "StrictHostKeyChecking no" not in text
    with pytest.raises(ValueError):
        ssh_client_config_text([])
    with pytest.raises(ValueError):
        ssh_client_config_text(["main1"], identity_file="a\nHost *")


def test_sshd_config() -> None:
    text = sshd_config_text("/etc/troupe/ssh_host_ed25519_key", "/home/work/.ssh/authorized_keys")
    options = dict(line.split(None, 1) for line in text.splitlines())
    assert options["Port"] == "2200"
    assert options["HostKey"] == "/etc/troupe/ssh_host_ed25519_key"
    assert options["AuthorizedKeysFile"] == "/home/work/.ssh/authorized_keys"
    assert options["AllowUsers"] == "work"
    assert options["PasswordAuthentication"] == "no"
    assert options["KbdInteractiveAuthentication"] == "no"
    assert options["PermitRootLogin"] == "no"
    assert options["PubkeyAuthentication"] == "yes"
    assert options["PermitUserEnvironment"] == "yes"
    assert options["Subsystem"] == "sftp internal-sftp"
    assert options["PidFile"] == "/run/sshd-troupe.pid"
    custom = sshd_config_text("/k", "/a", port=2222, user="alice")
    assert "Port 2222\n" in custom
    assert "AllowUsers alice\n" in custom
    with pytest.raises(ValueError):
        sshd_config_text("/k", "/a", port=0)


def test_key_pair_round_trip() -> None:
    pair = generate_ed25519("troupe-session")
    assert pair.private_openssh.startswith("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    key_type, b64, comment = pair.public_openssh.split(" ")
    assert (key_type, comment) == ("ssh-ed25519", "troupe-session")
    private = serialization.load_ssh_private_key(pair.private_openssh.encode(), password=None)
    public = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    assert public.decode() == f"{key_type} {b64}"
    assert generate_ed25519().public_openssh.count(" ") == 1
    assert generate_ed25519().private_openssh != pair.private_openssh
    with pytest.raises(ValueError):
        generate_ed25519("two\nlines")


def test_key_pair_repr_hides_private_key() -> None:
    pair = generate_ed25519("c")
    body = "".join(pair.private_openssh.splitlines()[1:-1])
    for text in (repr(pair), str(pair), f"{pair}", repr([pair])):
        assert "PRIVATE" not in text
        assert body[:16] not in text
        assert pair.public_openssh in text
    assert isinstance(pair, SSHKeyPair)


# --- roles (docs/contract.md, 'Roles') ---------------------------------------------------------

role_layouts = st.lists(
    st.tuples(st.text("abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=16), st.integers(1, 5)),
    max_size=5,
    unique_by=lambda r: r[0],
).filter(lambda rs: all(n != "main" for n, _ in rs))


@given(role_layouts, dist_envs)
def test_build_cluster_with_roles(roles: list[tuple[str, int]], dist_env: str) -> None:
    layout = [("main", 1), *roles]
    size = sum(r for _, r in layout)
    ids = _ids(size)
    kernels = build_cluster(
        ids[0],
        ids,
        "multi-node",
        {"FOO": "top"},
        dist_env,
        layout=layout,
        role_environ={n: {"FOO": n} for n, _ in roles},
    )
    hosts = [f"{n}{i}" for n, r in layout for i in range(1, r + 1)]
    assert [k.hostname for k in kernels] == hosts
    assert len(set(hosts)) == size  # no two roles' hosts collide
    assert [k.rank for k in kernels] == list(range(size))
    assert [(k.role, k.idx) for k in kernels] == [
        (n, i) for n, r in layout for i in range(1, r + 1)
    ]
    replicas = ",".join(f"{n}:{r}" for n, r in layout)
    for k in kernels:
        env = k.env
        assert set(CLUSTER_ENV_NAMES) <= env.keys()
        assert env["BACKENDAI_CLUSTER_REPLICAS"] == replicas
        assert env["BACKENDAI_CLUSTER_HOSTS"] == ",".join(hosts)
        assert env["BACKENDAI_CLUSTER_ROLE"] == k.role
        assert env["BACKENDAI_CLUSTER_IDX"] == str(k.idx)
        assert env["BACKENDAI_CLUSTER_LOCAL_RANK"] == str(k.rank)
        assert env["BACKENDAI_CLUSTER_HOST"] == f"{k.role}{k.idx}"
        assert env["FOO"] == ("top" if k.role == "main" else k.role)


def test_roles_example() -> None:
    ids = _ids(5)
    layout = [("main", 1), ("worker", 3), ("ps", 1)]
    kernels = build_cluster(ids[0], ids, "multi-node", layout=layout)
    assert [k.hostname for k in kernels] == ["main1", "worker1", "worker2", "worker3", "ps1"]
    assert kernels[4].env["BACKENDAI_CLUSTER_REPLICAS"] == "main:1,worker:3,ps:1"
    assert replicas_text(layout) == "main:1,worker:3,ps:1"
    assert cluster_hostnames(3) == cluster_hostnames([("main", 1), ("sub", 2)])


@pytest.mark.parametrize(
    ("layout", "why"),
    [
        ([("worker", 1)], "first role must be main"),
        ([("main", 2)], "first role must be main"),
        ([("main", 1), ("sub1", 1)], "lowercase letters"),
        ([("main", 1), ("Sub", 1)], "lowercase letters"),
        ([("main", 1), ("a" * 17, 1)], "lowercase letters"),
        ([("main", 1), ("ps", 1), ("ps", 2)], "given twice"),
        ([("main", 1), ("main", 1)], "given twice"),
        ([("main", 1), ("ps", 0)], "at least one replica"),
    ],
)
def test_bad_layouts(layout: list[tuple[str, int]], why: str) -> None:
    assert why in (role_error(layout) or "")
    ids = _ids(max(1, sum(max(r, 0) for _, r in layout)))
    with pytest.raises(ValueError, match=why):
        build_cluster(ids[0], ids, "multi-node", layout=layout)


def test_role_environ_reserved_refused() -> None:
    ids = _ids(2)
    with pytest.raises(ValueError, match="BACKENDAI_X"):
        build_cluster(
            ids[0],
            ids,
            "multi-node",
            layout=[("main", 1), ("ps", 1)],
            role_environ={"ps": {"BACKENDAI_X": "1"}},
        )


def test_hostfile_slots_per_host() -> None:
    assert hostfile_text(["main1", "worker1"], [1, 4]) == "main1 slots=1\nworker1 slots=4\n"
    with pytest.raises(ValueError):
        hostfile_text(["main1", "worker1"], [1])
