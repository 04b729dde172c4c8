"""Session files end to end (real server, Docker): ``troupe session spec NAME > s.yaml``,
destroy, ``troupe session create -f s.yaml`` gives the same session; each bad file gives its
one-line error and creates nothing (docs/design.md, 'Session files')."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Server
from tests.e2e.test_cli import BASE, failed, ok, troupe, unique

pytestmark = pytest.mark.docker


def shape(info: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (k["hostname"], k["role"], k["image"], k["resources"], k["status"]) for k in info["kernels"]
    ]


def test_spec_round_trip(server: Server, tmp_path: Path) -> None:
    name = unique("spec")
    try:
        ok(
            troupe(
                server,
                "session",
                "create",
                name,
                "--image",
                BASE,
                "--cpu",
                "0.25",
                "--mem",
                "256m",
                "--role",
                "worker:2,cpu=0.125,mem=128m",
                "-e",
                "GREETING=hi there",
                "--priority",
                "3",
                "--ssh-key",
                "none",
                "--wait",
            )
        )
        first = json.loads(ok(troupe(server, "session", "info", name, "--json")))
        text = ok(troupe(server, "session", "spec", name))
        assert text.startswith("# yaml-language-server: $schema=")
        assert f"{server.url}/v1/schemas/session.json" in text.splitlines()[0]
        spec = tmp_path / "s.yaml"
        spec.write_text(text)
        ok(troupe(server, "session", "destroy", name))

        ok(troupe(server, "session", "create", "-f", str(spec), "--ssh-key", "none", "--wait"))
        again = json.loads(ok(troupe(server, "session", "info", name, "--json")))
        assert again["id"] != first["id"]
        assert shape(again) == shape(first)
        assert [k["hostname"] for k in again["kernels"]] == ["main1", "worker1", "worker2"]
        keys = ("image", "cluster_size", "resources", "priority", "type", "mounts", "uid")
        assert {k: again[k] for k in keys} == {k: first[k] for k in keys}
        out = ok(
            troupe(server, "session", "exec", name, "-k", "worker2", "--", "printenv", "GREETING")
        )
        assert out.strip() == "hi there"
        # and the spec of the new session is the same file
        assert ok(troupe(server, "session", "spec", name)) == text
    finally:
        troupe(server, "session", "destroy", name)


BAD = [
    ("- a\n", "a session file is a mapping"),
    ("name: [x\n", "not valid YAML"),
    ("image: {base}\ncolour: red\n", "colour: Extra inputs are not permitted"),
    ("image: {base}\nroles: [{{name: main, replicas: 2}}]\n", "roles[0].replicas: role main"),
    (
        "image: {base}\nroles: [{{name: w}}, {{name: w}}]\n",
        "roles[1].name: role 'w' is given twice",
    ),
    ("image: {base}\nroles: [{{name: sub}}, {{name: sub1}}]\n", "roles[1].name: 'sub1' must be"),
    ("image: {base}\nroles: [{{name: W}}]\n", "roles[0].name: 'W' must be a lowercase word"),
    ("image: {base}\nroles: [{{name: w, replicas: 0}}]\n", "roles[0].replicas: must be at least 1"),
    ("image: {base}\nroles: [{{name: w, replicas: 5000}}]\n", "roles: 5001 kernels in total"),
]


@pytest.mark.parametrize(("text", "words"), BAD)
def test_bad_files(server: Server, tmp_path: Path, text: str, words: str) -> None:
    name = unique("bad")
    path = tmp_path / "s.yaml"
    path.write_text(text.format(base=BASE))
    r = troupe(server, "session", "create", name, "-f", str(path), "--ssh-key", "none")
    err = failed(r, "error:", words)
    assert len(err.strip().splitlines()) == 1, err
    if "kernels in total" not in words:  # that one the server refuses
        assert str(path) in err, err
    listed = ok(troupe(server, "session", "list", "--all"))
    assert name not in listed
