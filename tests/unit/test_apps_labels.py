"""The apps an image declares in its labels (src/troupe/api/apps.py, docs/contract.md "Apps")."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from troupe.api.apps import SERVICE_PORTS_LABEL, AppDecl, command_label, parse_service_ports

ROOT = Path(__file__).resolve().parents[2]

names = st.from_regex(r"[a-z][a-z0-9-]{0,15}", fullmatch=True)
protocols = st.sampled_from(["http", "tcp", "pty", "preopen", "vnc"])
ports = st.integers(1, 65535)


def labels(ports_value: str, **commands: str) -> dict[str, str]:
    return {SERVICE_PORTS_LABEL: ports_value} | {command_label(k): v for k, v in commands.items()}


def test_pytorch_style_labels() -> None:
    got = parse_service_ports(
        labels("jupyter:http:8888,tensorboard:http:6006", jupyter="jupyter lab", tensorboard="tb")
    )
    assert got == [
        AppDecl("jupyter", "http", 8888, "jupyter lab"),
        AppDecl("tensorboard", "http", 6006, "tb"),
    ]


@pytest.mark.parametrize("value", [None, "", "  "])
def test_no_label_or_an_empty_one_declares_no_app(value: str | None) -> None:
    assert parse_service_ports({} if value is None else {SERVICE_PORTS_LABEL: value}) == []


def test_an_app_without_a_command_is_declared_with_none() -> None:
    got = parse_service_ports(labels("web:http:8080,other:tcp:22", other="  "))
    assert [(a.name, a.command) for a in got] == [("web", None), ("other", None)]


def test_a_command_for_an_undeclared_app_is_ignored() -> None:
    """A FROM image's inherited command labels may outnumber the apps the new image keeps."""
    got = parse_service_ports(labels("jupyter:http:8888", jupyter="j", tensorboard="tb"))
    assert got == [AppDecl("jupyter", "http", 8888, "j")]


def test_spaces_around_entries_are_allowed() -> None:
    assert [a.port for a in parse_service_ports(labels(" a:http:1 , b:http:2 "))] == [1, 2]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("jupyter", "is not name:protocol:port"),
        ("jupyter:http", "is not name:protocol:port"),
        ("jupyter:http:8888:1", "is not name:protocol:port"),
        ("vscode:http:[8180,8181]", "port lists ([...]) are not supported"),
        ("jupyter:http:8888,", "is not name:protocol:port"),
        (",jupyter:http:8888", "is not name:protocol:port"),
        ("a:http:1,,b:http:2", "is not name:protocol:port"),
        ("Jupyter:http:8888", "app name 'Jupyter'"),
        ("1app:http:8888", "app name '1app'"),
        ("my_app:http:8888", "app name 'my_app'"),
        ("-app:http:8888", "app name '-app'"),
        (":http:8888", "app name ''"),
        ("app:HTTP:8888", "protocol 'HTTP'"),
        ("app::8888", "protocol ''"),
        ("app:http:0", "port '0'"),
        ("app:http:65536", "port '65536'"),
        ("app:http:-1", "port '-1'"),
        ("app:http:", "port ''"),
        ("app:http:80a", "port '80a'"),
        ("app:http:+80", "port '+80'"),
        ("app:http:٨٠", "port '٨٠'"),  # Arabic-Indic digits: int() would take them
        ("app:http:" + "9" * 5000, "port '99999"),
        ("a:http:1,a:tcp:2", "app 'a' is declared twice"),
        ("a:http:8888,b:http:8888", "port 8888 is declared twice ('a' and 'b')"),
    ],
)
def test_malformed_labels_raise_value_error_saying_what_is_wrong(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as e:
        parse_service_ports(labels(value))
    assert str(e.value).startswith(f"{SERVICE_PORTS_LABEL}: ")


@given(st.lists(st.tuples(names, protocols, ports, st.none() | st.text(min_size=1))))
def test_declared_apps_come_back_in_order(
    apps: list[tuple[str, str, int, str | None]],
) -> None:
    seen_names: set[str] = set()
    seen_ports: set[int] = set()
    unique = []
    for name, protocol, port, cmd in apps:
        if name not in seen_names and port not in seen_ports:
            seen_names.add(name)
            seen_ports.add(port)
            unique.append((name, protocol, port, cmd))
    value = ",".join(f"{n}:{p}:{port}" for n, p, port, _ in unique)
    commands = {command_label(n): c for n, _, _, c in unique if c is not None}
    got = parse_service_ports({SERVICE_PORTS_LABEL: value, **commands})
    assert got == [AppDecl(n, p, port, (c or "").strip() or None) for n, p, port, c in unique]


@given(names, ports)
def test_ports_outside_1_to_65535_are_refused(name: str, port: int) -> None:
    with pytest.raises(ValueError, match="is not a number in 1-65535"):
        parse_service_ports(labels(f"{name}:http:{port + 65535}"))


@given(st.text(max_size=40))
def test_any_label_text_parses_or_raises_value_error(value: str) -> None:
    try:
        apps = parse_service_ports(labels(value))
    except ValueError as e:
        assert str(e).startswith(f"{SERVICE_PORTS_LABEL}: ")
    else:
        assert all(1 <= a.port <= 65535 and re.fullmatch("[a-z][a-z0-9-]*", a.name) for a in apps)


def _dockerfile_labels(path: Path) -> dict[str, str]:
    """The LABEL instructions of a Dockerfile (continuation lines joined, shell-quoted)."""
    text = re.sub(r"\\\n", " ", path.read_text())
    found: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("LABEL "):
            for word in shlex.split(line[len("LABEL ") :]):
                key, _, value = word.partition("=")
                found[key] = value
    return found


def test_the_pytorch_images_labels_declare_jupyter_and_tensorboard() -> None:
    """Caught here, without the engine, before an image build: tests/integration/
    test_apps_image.py checks the built image and that each command serves its port."""
    got = parse_service_ports(_dockerfile_labels(ROOT / "images/pytorch/Dockerfile"))
    assert [(a.name, a.protocol, a.port) for a in got] == [
        ("jupyter", "http", 8888),
        ("tensorboard", "http", 6006),
    ]
    for app in got:
        assert app.command and f"--port={app.port}" in app.command, app
        assert "--ip=127.0.0.1" in app.command or "--host=127.0.0.1" in app.command, app
