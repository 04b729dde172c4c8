"""Session files (``troupe session create [NAME] -f FILE``, ``troupe session spec``): the file
is the create request in YAML; flags and NAME override it; errors name the file, the field and
the rule (docs/design.md, 'Session files')."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from troupe.api import specfile
from troupe.api.models import SessionCreate
from troupe.client.cli import session_file, sessions

FULL = """\
# yaml-language-server: $schema=http://127.0.0.1:8090/v1/schemas/session.json
name: train
image: troupe/base:0.1.0
cluster_mode: multi-node
resources: {cpu: 0.5, mem: 1g}
roles:
  - name: worker
    replicas: 2
    image: troupe/pytorch:0.1.0
    resources: {cpu: 0.25}
    environ: {ROLE_VAR: w}
  - name: ps
mounts: [{folder: data, readonly: true}]
environ: {A: "1", B: two}
type: batch
startup_command: python train.py
dist_env: per-container
group: default
priority: 5
max_pending_seconds: 60
uid: 1001
gid: 1002
isolated_network: true
"""


def run(monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[Any, str, int]:
    """The request ``troupe session create ARGS`` sends (None: none), output, exit code."""
    sent: list[Any] = []

    class Fake:
        def create_session(self, req: Any) -> None:
            sent.append(req)
            raise typer.Exit(0)

    @contextmanager
    def client() -> Iterator[Fake]:
        yield Fake()

    monkeypatch.setattr(sessions, "client", client)
    argv = ["create", "--ssh-key", "none", *args]
    r = CliRunner().invoke(sessions.app, argv, env={"COLUMNS": "200"})
    return (sent[0] if sent else None), " ".join(r.output.split()), r.exit_code


def write(tmp_path: Path, text: str, name: str = "session.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_every_field_of_the_file_is_the_requests(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    req, out, code = run(monkeypatch, "-f", write(tmp_path, FULL))
    assert code == 0 and req is not None, out
    expected = yaml.safe_load(FULL) | {"ssh_key": None}
    assert req == SessionCreate.model_validate(expected)
    assert req.cluster_size == 4 and req.resources.mem == 2**30
    assert [r.name for r in req.resolved_roles()] == ["main", "worker", "ps"]


def test_flags_and_name_override_the_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    req, out, _ = run(
        monkeypatch,
        "other",
        "-f",
        path,
        "--cpu",
        "2",
        "-e",
        "B=three",
        "--role",
        "worker:3",
        "--priority",
        "-1",
        "--startup-command",
        "python other.py",
    )
    assert req is not None, out
    assert req.name == "other"
    # a mapping's keys one by one: cpu from the flag, mem from the file; A kept, B replaced
    assert (req.resources.cpu, req.resources.mem) == (2, 2**30)
    assert req.environ == {"A": "1", "B": "three"}
    # a list is replaced whole
    assert [(r.name, r.replicas) for r in req.roles or []] == [("worker", 3)]
    assert (req.priority, req.type.value, req.uid) == (-1, "batch", 1001)
    assert req.startup_command == "python other.py"


def test_a_file_without_name_takes_the_argument(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = write(tmp_path, "image: troupe/base:0.1.0\n")
    req, out, _ = run(monkeypatch, "from-arg", "-f", path)
    assert req is not None and req.name == "from-arg", out
    req, out, code = run(monkeypatch, "-f", path)
    assert req is None and code == 2
    assert "error: name: required: give NAME or name: in the session file" in out


def test_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[Any] = []

    class Fake:
        def create_session(self, req: Any) -> None:
            sent.append(req)
            raise typer.Exit(0)

    @contextmanager
    def client() -> Iterator[Fake]:
        yield Fake()

    monkeypatch.setattr(sessions, "client", client)
    argv = ["create", "--ssh-key", "none", "-f", "-"]
    r = CliRunner().invoke(sessions.app, argv, input="name: s\nimage: troupe/base:0.1.0\n")
    assert r.exit_code == 0 and sent[0].name == "s", r.output


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("- a\n- b\n", "{f}: a session file is a mapping of the create request's fields, not a"),
        ("", "{f}: a session file is a mapping of the create request's fields, not empty"),
        ("name: [x\n", "{f}: line 2: not valid YAML"),
        (
            "name: a\nname: b\nimage: troupe/base:0.1.0\n",
            "{f}: line 2: not valid YAML: key 'name' is given twice",
        ),
        ("name: s\nimage: troupe/base:0.1.0\ncolour: red\n", "{f}: colour: Extra inputs are not"),
        ("name: s\nimage: troupe/base:0.1.0\nresources: {cpux: 1}\n", "{f}: resources.cpux:"),
        (
            "name: s\nimage: troupe/base:0.1.0\nroles: [{name: main, replicas: 2}]\n",
            "{f}: roles[0].replicas: role main has exactly one replica",
        ),
        (
            "name: s\nimage: troupe/base:0.1.0\nroles: [{name: w}, {name: w}]\n",
            "{f}: roles[1].name: role 'w' is given twice",
        ),
        (
            "name: s\nimage: troupe/base:0.1.0\nroles: [{name: sub}, {name: sub1}]\n",
            "{f}: roles[1].name: 'sub1' must be a lowercase word",
        ),
        (
            "name: s\nimage: troupe/base:0.1.0\nroles: [{name: w, replicas: 0}]\n",
            "{f}: roles[0].replicas: must be at least 1",
        ),
        (
            "name: s\nimage: troupe/base:0.1.0\nroles: [{name: w}, {name: v, replicas: x}]\n",
            "{f}: roles[1].replicas: must be a whole number",
        ),
        ("name: s\nimage: troupe/base:0.1.0\nroles: []\n", "{f}: roles: give at least one"),
        ("name: s\nimage: troupe/base:0.1.0\nresources: {mem: lots}\n", "{f}: resources.mem:"),
        ("name: s\n", "error: image: required: give --image or image: in the session file"),
    ],
)
def test_bad_files_name_the_file_the_field_and_the_rule(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str, words: str
) -> None:
    path = write(tmp_path, text)
    req, out, code = run(monkeypatch, "-f", path)
    assert req is None and code == 2, out
    assert words.format(f=path) in out, out
    assert out.count("error:") == 1


def test_a_flags_error_names_no_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    _, out, code = run(monkeypatch, "-f", path, "--mem", "lots")
    assert code == 2 and out.startswith("error: resources.mem:"), out
    _, out, code = run(monkeypatch, "-f", path, "--role", "main:2")
    assert code == 2 and out.startswith("error: roles[0].replicas:"), out


def test_a_missing_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = str(tmp_path / "nope.yaml")
    _, out, code = run(monkeypatch, "-f", path)
    assert code == 2 and f"error: {path}: cannot read the session file" in out, out


def test_dump_round_trips_and_points_at_the_schema() -> None:
    req = SessionCreate.model_validate(yaml.safe_load(FULL))
    text = specfile.dump(req, "http://127.0.0.1:8090/")
    head = "# yaml-language-server: $schema=http://127.0.0.1:8090/v1/schemas/session.json\n"
    assert text.startswith(head)
    assert SessionCreate.model_validate(yaml.safe_load(text)) == req
    # only what differs from the defaults
    assert "ssh_key" not in text and "readonly: true" in text


def test_spec_prints_the_servers_request(monkeypatch: pytest.MonkeyPatch) -> None:
    req = SessionCreate.model_validate(yaml.safe_load(FULL))

    class Fake:
        url = "http://h:1"

        def session_spec(self, ref: str) -> SessionCreate:
            assert ref == "train"
            return req

    @contextmanager
    def client() -> Iterator[Fake]:
        yield Fake()

    monkeypatch.setattr(session_file, "client", client)
    r = CliRunner().invoke(sessions.app, ["spec", "train"])
    assert r.exit_code == 0, r.output
    assert SessionCreate.model_validate(yaml.safe_load(r.output)) == req
