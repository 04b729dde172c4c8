"""Validation rules of the wire format (shared by API, CLI and UI)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from troupe.api import defaults
from troupe.api.models import (
    ExecRequest,
    Mount,
    SessionCreate,
    format_size,
    image_reference_error,
    parse_size,
)


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
        ({"resources": {"mem": "15m"}}, "resources.mem"),
        ({"resources": {"cpu": 0.009}}, "resources.cpu"),
        ({"image": "UPPER/x"}, "image"),
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


def test_smallest_resources_are_accepted_and_documented() -> None:
    s = SessionCreate.model_validate(
        {"name": "s", "image": "i", "resources": {"cpu": defaults.MIN_CPU, "mem": "16m"}}
    )
    assert (s.resources.cpu, s.resources.mem) == (0.01, defaults.MIN_MEM)
    fields = SessionCreate.model_json_schema()["$defs"]["Resources"]["properties"]
    assert "at least 0.01" in fields["cpu"]["description"]
    assert "at least 16m" in fields["mem"]["description"]


@pytest.mark.parametrize(
    "image",
    [
        "i",
        "troupe/base:0.1.0",
        "localhost:5000/x/y:1",
        "x@sha256:" + "a" * 64,
        "registry.example.com/team/img:v1.2-rc_3@sha256:" + "0" * 64,
        "x/a.b_c__d---e",
        "[::1]:5000/x",
        "MyRegistry.io/x",  # hosts are case-insensitive; path components are not
    ],
)
def test_image_references_accepted(image: str) -> None:
    assert image_reference_error(image) is None
    assert SessionCreate(name="s", image=image).image == image


@pytest.mark.parametrize(
    "image",
    [
        "../containers/abc",
        "a b",
        "UPPER/x",
        "/x",
        "x/",
        "a//b",
        "x/../y",
        "a..b",
        "-x",
        "x:",
        "x:.tag",
        "x@sha256:123",
        "x@" + "a" * 64,
        "x\nx",
        "x\u0000",
        "é",
        "a" * 256,
        "a/" * 127 + "a:" + "t" * 10,
    ],
)
def test_image_references_refused(image: str) -> None:
    assert image_reference_error(image) is not None
    with pytest.raises(ValidationError) as e:
        SessionCreate(name="s", image=image)
    assert e.value.errors()[0]["loc"] == ("image",)


def test_exec_arguments_may_not_contain_nul() -> None:
    assert ExecRequest(command=["sh", "-c", "echo a b"]).command[2] == "echo a b"
    with pytest.raises(ValidationError) as e:
        ExecRequest(command=["echo", "a\0b"])
    assert e.value.errors()[0]["loc"] == ("command",)
    assert "NUL" in str(e.value)
