"""A session's clocks on the real engine (docs/policies.md): a time limit ends an interactive
session within a few seconds of the limit, with the reason; an idle timeout ends an untouched
session, while one with an open ``exec`` (``sleep 60``) or a busy loop in a kernel stays."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import (
    BASE_IMAGE,
    ROOT,
    Server,
    docker,
    remove_leftovers,
    session_ids,
    start_server,
    stop_server,
)
from troupe.api.models import SessionInfo

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def clocked(tmp_path_factory: pytest.TempPathFactory, docker_engine: None) -> Iterator[Server]:
    """A server whose reaper looks every half second and whose agent samples every second."""
    s = start_server(
        tmp_path_factory.mktemp("clocks"), "--reap-interval", "0.5", "--metrics-interval", "1"
    )
    try:
        yield s
    finally:
        with contextlib.suppress(Exception):
            c = s.client()
            for info in c.list_sessions():
                c.destroy_session(info.id)
        stop_server(s)
        remove_leftovers(session_ids(s))


def create(s: Server, name: str, *options: str) -> SessionInfo:
    r = s.cli(
        "session", "create", name, "-i", BASE_IMAGE, "--cpu", "0.25", "--mem", "128m",
        *options, "--wait", "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return SessionInfo.model_validate_json(r.stdout)


def final(s: Server, name: str, timeout: float) -> SessionInfo:
    with s.client() as c:
        info = c.wait_session(name, until="final", timeout=timeout)
    assert info.status.is_final, info
    return info


def ran_for(info: SessionInfo) -> float:
    assert info.started_at is not None and info.terminated_at is not None
    return (info.terminated_at - info.started_at).total_seconds()


def nothing_left(session_id: str) -> bool:
    label = f"label=troupe.session={session_id}"
    return not docker("ps", "-aq", "--filter", label).stdout.strip()


def test_time_limit_ends_an_interactive_session_with_the_reason(clocked: Server) -> None:
    s = create(clocked, "limited", "--time-limit", "10s")
    assert s.time_limit == 10 and s.deadline is not None
    info = clocked.cli("session", "info", "limited")
    assert "time limit" in info.stdout and "10 s (stop grace 10 s), reached" in info.stdout
    end = final(clocked, "limited", timeout=60)
    assert end.status.value == "TERMINATED", end
    assert end.status_info["reason"] == "time limit reached"
    # the kernel's processes took the SIGTERM at once: no need to wait out the grace (10 s)
    assert 10 <= ran_for(end) < 15, ran_for(end)
    assert nothing_left(end.id)
    shown = clocked.cli("session", "info", end.id)
    assert "time limit reached" in shown.stdout, shown.stdout


def test_idle_timeout_ends_only_the_untouched_session(clocked: Server, tmp_path: Path) -> None:
    # the two kept busy first: the untouched one, made last, ends after their timeout too
    execed = create(clocked, "execed", "--idle-timeout", "20s")
    busy = create(clocked, "busy", "--idle-timeout", "20s")
    loop = "nohup sh -c 'while :; do :; done' >/dev/null 2>&1 &"
    r = clocked.cli("session", "exec", "busy", "--", "sh", "-c", loop)
    assert r.returncode == 0, r.stderr
    with open(tmp_path / "exec.out", "w") as out:
        sleeper = subprocess.Popen(
            [str(ROOT / ".venv/bin/troupe"), "session", "exec", "execed", "--", "sleep", "60"],
            env=clocked.env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        untouched = create(clocked, "untouched", "--idle-timeout", "20s")
        assert untouched.idle_timeout == 20 and untouched.time_limit is None
        time.sleep(5)
        shown = clocked.cli("session", "info", "untouched").stdout
        assert "idle reclaim: idle for " in shown and ", ends in " in shown, shown
        assert "idle reclaim: in use" in clocked.cli("session", "info", "execed").stdout
        end = final(clocked, "untouched", timeout=60)
        assert end.status_info["reason"] == "idle for 20 s", end
        assert 20 <= ran_for(end) < 30, ran_for(end)
        assert nothing_left(end.id)
        time.sleep(5)  # the reaper (every 0.5 s) past the others' timeout too
        with clocked.client() as c:
            for info in (execed, busy):
                now = c.get_session(info.id)
                assert now.status.value == "RUNNING", now
                assert now.idle_since is None, now
        assert sleeper.poll() is None  # the exec still runs
    finally:
        sleeper.kill()
        sleeper.wait()
