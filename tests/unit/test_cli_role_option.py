"""``troupe session create --role NAME:REPLICAS[,image=][,cpu=][,mem=][,gpu=]``: the option's
parser, and the request it makes (docs/design.md, 'Roles')."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from troupe.client.cli import sessions
from troupe.client.cli.role_option import parse_role


def test_parse_role() -> None:
    assert parse_role("worker:2") == {"name": "worker", "replicas": 2}
    assert parse_role("worker:2,image=troupe/pytorch:0.1.0,cpu=0.25,mem=1g,gpu=1") == {
        "name": "worker",
        "replicas": 2,
        "image": "troupe/pytorch:0.1.0",
        "resources": {"cpu": 0.25, "mem": "1g", "gpu": 1},
    }


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("worker", "NAME:REPLICAS"),
        ("worker:x", "NAME:REPLICAS"),
        ("worker:2,foo=1", "not one of"),
        ("worker:2,cpu", "not one of"),
        ("worker:2,cpu=a", "not a number"),
        ("worker:2,gpu=0.5", "not a number"),
        ("worker:2,cpu=1,cpu=2", "twice"),
    ],
)
def test_parse_role_refuses(spec: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_role(spec)


def run(monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[Any, str, int]:
    """The request ``troupe session create s ... ARGS`` sends (None: none), its output and
    exit code; the fake client stops the command once it has the request."""
    sent: list[Any] = []

    class Fake:
        def create_session(self, req: Any) -> None:
            sent.append(req)
            raise typer.Exit(0)

    @contextmanager
    def client() -> Iterator[Fake]:
        yield Fake()

    monkeypatch.setattr(sessions, "client", client)
    argv = ["create", "s", "-i", "troupe/base:0.1.0", "--ssh-key", "none", *args]
    r = CliRunner().invoke(sessions.app, argv, env={"COLUMNS": "200"})
    return (sent[0] if sent else None), r.output, r.exit_code


def test_create_with_roles(monkeypatch: pytest.MonkeyPatch) -> None:
    req, out, _ = run(
        monkeypatch,
        "--cpu",
        "0.5",
        "--role",
        "worker:2,image=troupe/pytorch:0.1.0,cpu=0.25",
        "--role",
        "ps:1,mem=512m",
    )
    assert req is not None, out
    assert req.cluster_size == 4
    roles = req.resolved_roles()
    assert [(r.name, r.replicas, r.image, r.cpu) for r in roles] == [
        ("main", 1, "troupe/base:0.1.0", 0.5),
        ("worker", 2, "troupe/pytorch:0.1.0", 0.25),
        ("ps", 1, "troupe/base:0.1.0", 0.5),
    ]
    assert roles[2].mem == 512 * 1024**2


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--role", "worker"], "roles[0]: --role 'worker': must start with NAME:REPLICAS"),
        (["--role", "main:2"], "roles[0].replicas: role main has exactly one replica"),
        (["--role", "ps:1", "--role", "sub1:1"], "roles[1].name"),
        (["--role", "w:2", "--cluster-size", "2"], "cluster_size: 2 is not the roles' total"),
    ],
)
def test_create_refuses_bad_roles(
    monkeypatch: pytest.MonkeyPatch, args: list[str], words: str
) -> None:
    req, out, code = run(monkeypatch, *args)
    assert req is None and code == 2 and words in " ".join(out.split()), out


def test_info_shows_each_kernels_role_image_and_resources(monkeypatch: pytest.MonkeyPatch) -> None:
    from troupe.api.models import SessionInfo

    def kernel(host: str, role: str, rank: int, image: str, cpu: float) -> dict[str, Any]:
        resources = {"cpu": cpu, "mem": 2**28, "gpu": 0}
        return {
            "id": host,
            "hostname": host,
            "role": role,
            "idx": 1,
            "rank": rank,
            "image": image,
            "resources": resources,
            "status": "RUNNING",
        }

    info = SessionInfo.model_validate(
        {
            "id": "i",
            "name": "s",
            "owner": "u",
            "status": "RUNNING",
            "type": "interactive",
            "image": "troupe/base:0.1.0",
            "cluster_size": 2,
            "cluster_mode": "single-node",
            "resources": {"cpu": 0.5, "mem": 2**28, "gpu": 0},
            "mounts": [],
            "dist_env": "default",
            "group": "default",
            "priority": 0,
            "uid": 1000,
            "gid": 1000,
            "isolated_network": False,
            "created_at": "2026-01-01T00:00:00Z",
            "kernels": [
                kernel("main1", "main", 0, "troupe/base:0.1.0", 0.5),
                kernel("worker1", "worker", 1, "troupe/pytorch:0.1.0", 0.25),
            ],
        }
    )

    class Fake:
        def get_session(self, name: str) -> SessionInfo:
            return info

    @contextmanager
    def client() -> Iterator[Fake]:
        yield Fake()

    monkeypatch.setattr(sessions, "client", client)
    r = CliRunner().invoke(sessions.app, ["info", "s"], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    assert "(per kernel; each kernel's below)" in r.output
    worker = next(line for line in r.output.splitlines() if "worker1" in line)
    assert "worker" in worker and "troupe/pytorch:0.1.0" in worker and "cpu 0.25" in worker
