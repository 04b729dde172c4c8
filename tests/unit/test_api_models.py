"""Validation rules of the wire format (shared by API, CLI and UI)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from troupe.api.models import Mount, SessionCreate, format_size, parse_size


@pytest.mark.parametrize(
    ("text", "n"),
    [
        ("512m", 512 * 2**20),
        ("1g", 2**30),
        ("1.5GiB", 3 * 2**29),
        (1024, 1024),
        ("2048", 2048),
        ("10k", 10240),
    ],
)
def test_parse_size(text: object, n: int) -> None:
    assert parse_size(text) == n


@pytest.mark.parametrize("bad", ["lots", "", "1x", True, -1.5, None])
def test_parse_size_rejects(bad: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        parse_size(bad)


def test_format_size() -> None:
    assert (format_size(2**30), format_size(3 * 2**20), format_size(1000)) == ("1g", "3m", "1000")


def test_mount_parse() -> None:
    assert Mount.parse("data:ro") == Mount(folder="data", readonly=True)
    assert Mount.parse("data") == Mount(folder="data")
    with pytest.raises(ValueError):
        Mount.parse("data:rx")


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"environ": {"A-B": "1"}}, "environ"),
        ({"environ": {"BACKENDAI_X": "1"}}, "environ"),
        ({"environ": {"BACKENDAI_DIST_MASTER_PORT": "abc"}}, "environ"),
        ({"type": "batch"}, "startup_command"),
        ({"startup_command": "x"}, "startup_command"),
        ({"mounts": [{"folder": "a"}, {"folder": "a"}]}, "mounts"),
        ({"cluster_size": 0}, "cluster_size"),
        ({"resources": {"mem": "1m"}}, "mem"),
        ({"uid": 0}, "uid"),
    ],
)
def test_session_create_rejects(fields: dict[str, object], where: str) -> None:
    with pytest.raises(ValidationError) as e:
        SessionCreate.model_validate({"name": "s", "image": "i", **fields})
    assert where in str(e.value)


def test_user_may_set_dist_master_port() -> None:
    s = SessionCreate(name="s", image="i", environ={"BACKENDAI_DIST_MASTER_PORT": "3000"})
    assert s.environ["BACKENDAI_DIST_MASTER_PORT"] == "3000"
