"""``troupe session apps | open`` (docs/apps.md) against a stand-in SDK client: the table, JSON,
the link on stdout, and a browser only where one makes sense."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from troupe.api import errors as E
from troupe.api.models import AppInfo
from troupe.client.cli import apps as cli_apps
from troupe.main import app

LINK = "http://8888-x.apps.localhost/_troupe/enter?t=abc"


class FakeClient:
    def __init__(self) -> None:
        self.opened: list[tuple[str, str]] = []

    def list_apps(self, ref: str) -> list[AppInfo]:
        return [
            AppInfo(name="jupyter", port=8888, state="running", url="http://8888-x.apps.localhost"),
            AppInfo(name="tensorboard", port=6006, state="failed", url=None, log_tail=["boom"]),
        ]

    def open_app(self, ref: str, target: str) -> AppInfo:
        if target == "70000":
            raise E.Invalid("app: port 70000 is not a port number (1-65535)", status=422)
        self.opened.append((ref, target))
        return AppInfo(name="jupyter", port=8888, state="running", url=LINK)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    c = FakeClient()

    @contextlib.contextmanager
    def client() -> Iterator[Any]:
        from troupe.client.cli.output import api_errors

        with api_errors():
            yield c

    monkeypatch.setattr(cli_apps, "client", client)
    return c


def run(*args: str, **env: str) -> Any:
    return CliRunner().invoke(app, ["session", *args], env={"COLUMNS": "200", **env})


def test_apps_table_and_json(fake: FakeClient) -> None:
    r = run("apps", "s")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["NAME", "PORT", "STATE", "URL"]
    assert lines[2].split() == ["jupyter", "8888", "running", "http://8888-x.apps.localhost"]
    assert lines[3].split() == ["tensorboard", "6006", "failed", "-"]
    assert "boom" in r.stderr and "/home/work/.troupe/apps/tensorboard.log" in r.stderr
    r = run("apps", "s", "--json")
    assert [a["name"] for a in json.loads(r.stdout)] == ["jupyter", "tensorboard"]


def test_open_prints_the_link_and_opens_no_browser_without_one(
    fake: FakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []

    def browse(url: str) -> bool:
        opened.append(url)
        return True

    monkeypatch.setattr("webbrowser.open", browse)
    r = run("open", "s", "jupyter")
    assert r.exit_code == 0, r.output
    assert r.stdout == LINK + "\n"
    assert fake.opened == [("s", "jupyter")]
    assert opened == []  # stdout is no terminal here: no browser
    monkeypatch.setattr(cli_apps, "browser_available", lambda: True)
    assert run("open", "s", "8888").exit_code == 0 and opened == [LINK]
    assert run("open", "s", "8888", "--no-browser").exit_code == 0 and opened == [LINK]
    r = run("open", "s", "jupyter", "--json")
    assert json.loads(r.stdout)["url"] == LINK


def test_open_refused_is_one_line(fake: FakeClient) -> None:
    r = run("open", "s", "70000")
    assert r.exit_code == 1
    assert "error: app: port 70000 is not a port number (1-65535)" in r.stderr


@pytest.mark.parametrize(
    ("env", "tty", "platform", "expected"),
    [
        ({"DISPLAY": ":0"}, True, "linux", True),
        ({"WAYLAND_DISPLAY": "w"}, True, "linux", True),
        ({}, True, "linux", False),  # a text console: no lynx taking over the terminal
        ({"DISPLAY": ":0"}, False, "linux", False),  # a script reading the link
        ({"DISPLAY": ":0", "SSH_CONNECTION": "1 2 3 4"}, True, "linux", False),
        ({"BROWSER": "firefox"}, True, "linux", True),
        ({}, True, "darwin", True),
    ],
)
def test_browser_available(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], tty: bool, platform: str, expected: bool
) -> None:
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "SSH_CONNECTION", "BROWSER"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr("sys.stdout.isatty", lambda: tty)
    monkeypatch.setattr("sys.platform", platform)
    assert cli_apps.browser_available() is expected
