"""The runner's ``app.sh`` (apps in main1, docs/apps.md) run here, on this machine, with a
directory of its own: states, start, reuse, a failed start's log lines, the time-out that
leaves nothing running; and the manager reading its report."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from troupe.agent.kernel import runner_dir
from troupe.manager.apps.state import AppStatus, parse_report

APP_SH = Path(runner_dir()) / "app.sh"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def app_sh(*args: str, shell: str = "/bin/sh") -> tuple[int, str]:
    p = subprocess.run(
        [shell, str(APP_SH), *args], capture_output=True, text=True, timeout=60, check=False
    )
    return p.returncode, p.stdout


def report(out: str, name: str, port: int) -> AppStatus:
    return parse_report(out, {name: port})[name]


@pytest.fixture
def apps(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "apps"
    yield d
    for pid_file in d.glob("*.pid"):  # nothing this test started outlives it
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)


def live_members(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that have not ended (zombies not reaped yet have)."""
    live = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            live.append(int(stat.parent.name))
    return live


def server(port: int) -> str:
    return f"exec {sys.executable} -m http.server --bind 127.0.0.1 {port}"


@pytest.mark.parametrize("shell", ["/bin/sh", "/bin/bash"])
def test_start_reuse_and_status(apps: Path, shell: str) -> None:
    port = free_port()
    code, out = app_sh("status", str(apps), f"web:{port}", shell=shell)
    assert code == 0 and report(out, "web", port).state == "stopped"
    code, out = app_sh("start", str(apps), "web", str(port), "30", server(port), shell=shell)
    assert (code, report(out, "web", port).state) == (0, "running"), out
    pid = (apps / "web.pid").read_text()
    code, out = app_sh("start", str(apps), "web", str(port), "30", server(port), shell=shell)
    assert (code, report(out, "web", port).state) == (0, "running")
    assert (apps / "web.pid").read_text() == pid  # reused, not started again
    assert "Serving HTTP" in (apps / "web.log").read_text()
    # it dies: failed, with its log; the next start starts it again
    os.killpg(int(pid), signal.SIGKILL)
    deadline = time.monotonic() + 10
    while True:
        code, out = app_sh("status", str(apps), f"web:{port}", shell=shell)
        if report(out, "web", port).state == "failed" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    status = report(out, "web", port)
    assert status.state == "failed", out
    assert any("starting web" in line for line in status.log_tail)
    code, out = app_sh("start", str(apps), "web", str(port), "30", server(port), shell=shell)
    assert (code, report(out, "web", port).state) == (0, "running"), out
    assert (apps / "web.pid").read_text() != pid
    assert (apps / "web.log.1").exists()  # the previous run's log is kept


def test_a_failed_start_reports_its_log_lines(apps: Path) -> None:
    port = free_port()
    code, out = app_sh("start", str(apps), "bad", str(port), "30", "echo 'no such module'; exit 3")
    status = report(out, "bad", port)
    assert code == 1 and status.state == "failed" and status.detail == "exited with code 3"
    assert "no such module" in status.log_tail


def test_an_app_that_never_answers_is_killed(apps: Path) -> None:
    port = free_port()
    started = time.monotonic()
    code, out = app_sh("start", str(apps), "slow", str(port), "1", "echo waiting; sleep 300")
    assert time.monotonic() - started < 10
    status = report(out, "slow", port)
    assert code == 1 and status.state == "failed"
    assert "did not answer" in status.detail and "waiting" in status.log_tail
    assert live_members(int((apps / "slow.pid").read_text())) == []  # its whole group ended


def test_any_port_answers_without_a_pid_file(apps: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        _, out = app_sh("status", str(apps), f"{port}:{port}")
        assert report(out, str(port), port).state == "running"
    _, out = app_sh("status", str(apps), f"{port}:{port}")
    assert report(out, str(port), port) == AppStatus(str(port), port, "stopped")


def test_parse_report_keeps_only_the_apps_asked_and_cuts_long_lines() -> None:
    out = "noise\napp a running \napp b failed exited with code 2\nlog b " + "x" * 5000 + "\n"
    out += "app c running\nlog a hello\napp a bogus\n"
    got = parse_report(out, {"a": 1, "b": 2})
    assert set(got) == {"a", "b"}
    assert got["a"] == AppStatus("a", 1, "running", "", ["hello"])
    assert got["b"].detail == "exited with code 2" and len(got["b"].log_tail[0]) == 1000
