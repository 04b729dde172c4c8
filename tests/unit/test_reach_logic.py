"""Pure parts of ``troupe session tunnel | ssh | ssh-config | cp`` (issue 12): remote paths,
the OpenSSH Host block, the pinned known_hosts line, public key checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from troupe.agent.kernel import RUNNER_MOUNT
from troupe.api.pipe import RUNNER_DIR, copy_command, relay_command
from troupe.client.cli.reach import (
    Remote,
    host_block,
    host_options,
    known_hosts_update,
    parse_remote,
)
from troupe.cluster import generate_ed25519
from troupe.cluster.keys import check_public_key


@pytest.mark.parametrize(
    ("spec", "remote"),
    [
        ("s:data/x", Remote("s", "main1", "/home/work/data/x")),
        ("s:", Remote("s", "main1", "/home/work")),
        ("s:/tmp/a/../b/", Remote("s", "main1", "/tmp/b")),
        ("s/sub2:/etc/hosts", Remote("s", "sub2", "/etc/hosts")),
        ("my.sess-1:a:b", Remote("my.sess-1", "main1", "/home/work/a:b")),
        ("s://x", Remote("s", "main1", "/x")),
        # any role's hostname (docs/contract.md, 'Roles'), not only main1 and subN
        ("train/worker1:/tmp/x", Remote("train", "worker1", "/tmp/x")),
        ("train/ps12:ckpt", Remote("train", "ps12", "/home/work/ckpt")),
        ("t/abcdefghijklmnop3:x", Remote("t", "abcdefghijklmnop3", "/home/work/x")),
    ],
)
def test_remote_specs(spec: str, remote: Remote) -> None:
    assert parse_remote(spec) == remote


@pytest.mark.parametrize(
    "spec",
    [
        *("./a:b", "/abs/a:b", "plain", "s/main2:x", "s/sub0:x", "-s:x"),
        *("s/worker:x", "s/Worker1:x", "s/abcdefghijklmnopq1:x", "s/w0rker1:x"),
    ],
)
def test_local_paths(spec: str) -> None:
    assert parse_remote(spec) is None


def test_host_block_pins_the_host_key_and_quotes_blanks() -> None:
    options = host_options(
        "train",
        "/opt/troupe/bin/troupe session tunnel 1234",
        Path("/home/me/.config/troupe/ssh/known_hosts"),
        "troupe-1234",
        Path("/home/me/my keys/id_ed25519"),
    )
    text = host_block("train", options)
    assert text.splitlines() == [
        "Host train",
        "    User work",
        "    ProxyCommand /opt/troupe/bin/troupe session tunnel 1234",
        "    HostKeyAlias troupe-1234",
        "    UserKnownHostsFile /home/me/.config/troupe/ssh/known_hosts",
        "    StrictHostKeyChecking yes",
        '    IdentityFile "/home/me/my keys/id_ed25519"',
        "    IdentitiesOnly yes",
        "    ServerAliveInterval 30",
    ]
    assert "StrictHostKeyChecking no" not in text
    with pytest.raises(ValueError):
        host_block("x", [("IdentityFile", 'a"b')])


def test_known_hosts_keeps_other_sessions_and_replaces_its_own() -> None:
    text = "troupe-a ssh-ed25519 AAAA1\ntroupe-b ssh-ed25519 BBBB\n"
    out = known_hosts_update(text, "troupe-a", "ssh-ed25519 AAAA2")
    assert out == "troupe-b ssh-ed25519 BBBB\ntroupe-a ssh-ed25519 AAAA2\n"
    assert known_hosts_update("", "troupe-c", "ssh-ed25519 C") == "troupe-c ssh-ed25519 C\n"


def test_public_keys_checked() -> None:
    pub = generate_ed25519(comment="me@laptop").public_openssh
    assert check_public_key(pub + "\n") == pub
    body = pub.split()[1]
    for bad in [
        "",
        "ssh-ed25519",
        f"ssh-dss {body}",
        f'command="sh" ssh-ed25519 {body}',
        f"ssh-ed25519 {body}\nssh-ed25519 {body}",
        f"ssh-ed25519 {body[:-8]}",
        f"ssh-rsa {body}",  # an ed25519 blob labelled rsa
        "-----BEGIN OPENSSH PRIVATE KEY-----",
    ]:
        with pytest.raises(ValueError):
            check_public_key(bad)


def test_runner_commands() -> None:
    assert RUNNER_DIR == RUNNER_MOUNT
    assert relay_command(2200) == ["/bin/sh", "/opt/troupe/relay.sh", "2200"]
    assert copy_command("put", "/tmp", "x") == ["/bin/sh", "/opt/troupe/cp.sh", "put", "/tmp", "x"]
    with pytest.raises(ValueError):
        relay_command(0)
    with pytest.raises(ValueError):
        copy_command("rm", "/")
