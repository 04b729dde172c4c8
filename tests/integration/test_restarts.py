"""Whole-session restarts and success rules on the real engine (docs/policies.md): a failed
attempt restarts every kernel in place (same names, addresses, network, folders) with
``TROUPE_RESTART_COUNT`` in every kernel; the rules that end a session at once; the logs of
every attempt."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import (
    BASE_IMAGE,
    Server,
    docker,
    remove_leftovers,
    session_ids,
    start_server,
    stop_server,
)
from troupe.api.models import Mount, Resources, SessionCreate, SessionInfo
from troupe.client.sdk import Client

pytestmark = pytest.mark.docker
SMALL = Resources(cpu=0.25, mem=128 * 1024**2)


def unique(prefix: str) -> str:
    return f"rs-{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def c(server: Server) -> Iterator[Client]:
    made: set[str] = set()
    with server.client() as client:
        create = client.create_session

        def tracked(req: SessionCreate) -> SessionInfo:
            info = create(req)
            made.add(info.id)
            return info

        client.create_session = tracked  # type: ignore[method-assign]
        yield client
        for sid in made:
            with contextlib.suppress(Exception):
                client.destroy_session(sid)
    remove_leftovers(made)


def batch(name: str, command: str, size: int = 3, **kw: object) -> SessionCreate:
    return SessionCreate(
        name=name,
        image=BASE_IMAGE,
        cluster_size=size,
        resources=SMALL,
        type="batch",
        startup_command=command,
        **kw,  # type: ignore[arg-type]
    )


def final(c: Client, name: str, timeout: float = 240) -> SessionInfo:
    info = c.wait_session(name, until="final", timeout=timeout)
    assert info.status.is_final, info
    return info


def running_again(c: Client, name: str, restarts: int, timeout: float = 240) -> SessionInfo:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = c.get_session(name)
        if info.status == "RUNNING" and info.restarts == restarts:
            return info
        assert not info.status.is_final, info
        time.sleep(0.3)
    raise AssertionError(c.get_session(name))


def test_failed_attempt_then_success_ends_terminated_with_both_logs(c: Client) -> None:
    name = unique("retry")
    command = 'echo "attempt $TROUPE_RESTART_COUNT"; [ "$TROUPE_RESTART_COUNT" -ge 1 ]'
    c.create_session(batch(name, command, max_restarts=2))
    info = final(c, name)
    assert (info.status, info.exit_code, info.restarts) == ("TERMINATED", 0, 1), info
    [r] = info.restart_history
    assert (r.attempt, r.kernel, r.exit_code) == (0, "main1", 1)
    assert "attempt 0" in r.last_logs, r
    lines = list(c.logs(name, container="main1"))
    assert any(x.startswith("[main1#0] attempt 0") for x in lines), lines
    assert any(x.startswith("[main1#1] attempt 1") for x in lines), lines
    # all kernels merged: the same lines, each with its kernel and attempt
    assert [x for x in c.logs(name) if x.startswith("[main1#")] == lines


def test_killed_sub_kernel_restarts_the_whole_session(c: Client, server: Server) -> None:
    folder = unique("data")
    c.create_folder(folder)
    name = unique("kill")
    wait_stop = f"while [ ! -e /home/work/{folder}/stop ]; do sleep 0.2; done"
    c.create_session(batch(name, wait_stop, max_restarts=1, mounts=[Mount(folder=folder)]))
    before = c.wait_session(name, until="running", timeout=180)
    assert before.status == "RUNNING", before.status_info
    code, out = c.exec(name, ["sh", "-c", f"echo kept > /home/work/{folder}/file"])
    assert code == 0, out
    sub1 = next(k for k in before.kernels if k.hostname == "sub1")
    docker("kill", sub1.container_id or "")
    after = running_again(c, name, 1)
    assert after.restart_history[0].kernel == "sub1"
    ips = {k.hostname: k.ip for k in before.kernels}
    assert {k.hostname: k.ip for k in after.kernels} == ips
    assert after.network == before.network and after.subnet == before.subnet
    for k in after.kernels:
        code, out = c.exec(name, ["printenv", "TROUPE_RESTART_COUNT"], kernel=k.hostname)
        assert (code, out.strip()) == (0, "1"), (k.hostname, out)
    # over SSH too (another entry path), and the data folder kept what was written
    code, out = c.exec(
        name, ["sh", "-c", f"ssh sub1 printenv TROUPE_RESTART_COUNT; cat /home/work/{folder}/file"]
    )
    assert (code, out.split()) == (0, ["1", "kept"]), out
    code, out = c.exec(name, ["touch", f"/home/work/{folder}/stop"])
    info = final(c, name)
    assert (info.status, info.exit_code, info.restarts) == ("TERMINATED", 0, 1), info


def test_killed_sub_kernel_without_restarts_fails_as_before(c: Client) -> None:
    name = unique("nokill")
    c.create_session(batch(name, "sleep 600", size=2))
    info = c.wait_session(name, until="running", timeout=180)
    sub1 = next(k for k in info.kernels if k.hostname == "sub1")
    docker("kill", sub1.container_id or "")
    info = final(c, name)
    assert info.status == "ERROR" and info.status_info["kernel"] == "sub1", info
    assert info.restarts == 0


def test_no_restart_exit_code_and_success_all(c: Client) -> None:
    stop = unique("stop")
    c.create_session(batch(stop, "exit 2", size=2, max_restarts=3, no_restart_exit_codes=[2]))
    every = unique("all")
    command = '[ "$BACKENDAI_CLUSTER_HOST" != sub2 ] || exit 1'
    c.create_session(batch(every, command, success_policy="all"))
    info = final(c, stop)
    assert (info.status, info.exit_code, info.restarts) == ("ERROR", 2, 0), info.status_info
    assert info.status_info["reason"] == "exit code 2 ends the session (no_restart_exit_codes)"
    info = final(c, every)
    assert (info.status, info.exit_code) == ("ERROR", 1), info.status_info
    assert info.status_info["kernel"] == "sub2", info


def test_manager_killed_in_the_middle_of_a_restart(tmp_path: Path, docker_engine: None) -> None:
    """The manager dies (SIGKILL) while a session is RESTARTING: once back, the session ends
    ERROR with the reason, and nothing of it is left on the engine."""
    srv = start_server(tmp_path)
    try:
        c = srv.client()
        name = unique("mid")
        c.create_session(batch(name, "sleep 600", max_restarts=2))
        info = c.wait_session(name, until="running", timeout=180)
        assert info.status == "RUNNING", info.status_info
        sub1 = next(k for k in info.kernels if k.hostname == "sub1")
        docker("kill", sub1.container_id or "")
        deadline = time.monotonic() + 60
        while c.get_session(name).status != "RESTARTING":
            assert time.monotonic() < deadline, c.get_session(name)
            time.sleep(0.05)
        srv.proc.kill()
        srv.proc.wait()
        srv = start_server(tmp_path)
        c = srv.client()
        info = c.wait_session(name, until="final", timeout=120)
        assert info.status == "ERROR", info
        assert info.status_info == {
            "reason": "manager restarted while the session was restarting",
            "restarts": 1,
        }
        label = f"label=troupe.session={info.id}"
        assert docker("ps", "-aq", "--filter", label).stdout.split() == []
        assert docker("network", "ls", "-q", "--filter", label).stdout.split() == []
    finally:
        stop_server(srv)
        remove_leftovers(session_ids(srv))
