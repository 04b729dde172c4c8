"""A restart in place on the real engine (docs/policies.md, "A restart, in place"): the
surviving kernels' containers are not started again (the same ``State.StartedAt``) while every
process of their last attempt is gone; the supervising entrypoint passes the command's exit
code on, lets SIGINT reach it and passes a time limit's SIGTERM to it. The failed kernel's
container is started again on its death, held (nothing of the kernel runs) until the restart is
decided: restarted, its attempt's exit code and lines are kept; not restarted, it goes with the
session. A kernel whose command fails keeps its container running: its supervisor reports the
failure on its report FIFO and waits, held in place; the engine sees no death."""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

from tests.conftest import BASE_IMAGE, docker
from tests.integration.test_restarts import batch, c, final, running_again, unique
from troupe.agent.kernel import runner_dir
from troupe.api.models import SessionInfo
from troupe.client.sdk import Client

__all__ = ["c"]  # (the fixture, shared with test_restarts)

#: Attempt 0 sleeps; attempt 1 waits for /tmp/stop (main1's own /tmp: the same container).
COMMAND = (
    'echo "attempt $TROUPE_RESTART_COUNT"; '
    'if [ "$TROUPE_RESTART_COUNT" = 1 ]; then '
    "while [ ! -e /tmp/stop ]; do sleep 0.2; done; exit 3; fi; sleep 600"
)


def started_at(container: str) -> str:
    return docker("inspect", "-f", "{{.State.StartedAt}}", container).stdout.strip()


def commands(container: str) -> list[str]:
    """Every process's command line in a container."""
    script = 'for p in /proc/[0-9]*; do tr "\\0" " " < "$p/cmdline"; echo; done'
    out = docker("exec", container, "sh", "-c", script).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def test_survivors_keep_their_containers_and_lose_their_processes(c: Client) -> None:
    name = unique("inplace")
    c.create_session(batch(name, COMMAND, max_restarts=1))
    before = c.wait_session(name, until="running", timeout=180)
    assert before.status == "RUNNING", before.status_info
    ids = {k.hostname: k.container_id or "" for k in before.kernels}
    starts = {h: started_at(cid) for h, cid in ids.items()}
    for host in ("main1", "sub2"):
        docker("exec", "-d", ids[host], "sleep", "1000")
    deadline = time.monotonic() + 10
    while "sleep 1000" not in commands(ids["sub2"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "sleep 1000" in commands(ids["sub2"])

    docker("kill", ids["sub1"])
    after = running_again(c, name, 1)
    assert {k.hostname: k.container_id for k in after.kernels} == ids
    assert started_at(ids["sub1"]) != starts["sub1"]  # the failed one: started again
    for host in ("main1", "sub2"):
        assert started_at(ids[host]) == starts[host], host  # the survivors: not
        procs = commands(ids[host])
        assert "sleep 1000" not in procs and "sleep 600" not in procs, (host, procs)
    for host in ids:
        code, out = c.exec(name, ["printenv", "TROUPE_RESTART_COUNT"], kernel=host)
        assert (code, out.strip()) == (0, "1"), (host, out)
    code, out = c.exec(name, ["sh", "-c", "ssh sub2 'echo $TROUPE_RESTART_COUNT'"])
    assert (code, out.strip()) == (0, "1"), out

    # the command's exit code is the session's; each attempt's lines under their attempt
    c.exec(name, ["touch", "/tmp/stop"])
    info = final(c, name)
    assert (info.status, info.exit_code, info.restarts) == ("TERMINATED", 3, 1), info
    lines = list(c.logs(name, container="main1"))
    assert [x for x in lines if "attempt" in x] == ["[main1#0] attempt 0", "[main1#1] attempt 1"]


def test_sigint_reaches_a_supervised_command(c: Client) -> None:
    name = unique("sigint")
    req = batch(name, "trap - INT; sleep 100", size=1, max_restarts=1, no_restart_exit_codes=[130])
    c.create_session(req)
    info = c.wait_session(name, until="running", timeout=180)
    main1 = info.kernels[0].container_id or ""
    deadline = time.monotonic() + 20
    while "sleep 100" not in commands(main1) and time.monotonic() < deadline:
        time.sleep(0.2)
    kill = (
        'for p in /proc/[0-9]*; do [ "$(tr "\\0" " " < $p/cmdline)" = "sleep 100 " ]'
        " && kill -INT ${p#/proc/}; done"
    )
    t0 = time.monotonic()
    docker("exec", main1, "sh", "-c", kill, check=False)  # (ends with the container)
    info = final(c, name, timeout=60)
    assert time.monotonic() - t0 < 30  # not the 100 s of a sleep that ignores SIGINT
    assert (info.status, info.exit_code, info.restarts) == ("ERROR", 130, 0), info


def test_time_limit_terms_a_supervised_command(c: Client) -> None:
    name = unique("limit")
    command = "trap 'echo got TERM; exit 7' TERM; sleep 600 & wait"
    req = batch(name, command, size=2, max_restarts=1, time_limit=8, stop_grace=120)
    c.create_session(req)
    info = final(c, name, timeout=120)
    assert info.status_info["reason"] == "time limit reached", info
    assert info.started_at and info.terminated_at
    # the command took the SIGTERM at once: the grace (120 s) was not waited out
    assert (info.terminated_at - info.started_at).total_seconds() < 60
    assert "got TERM" in list(c.logs(name, container="main1"))


def containers(sid: str) -> list[str]:
    return docker("ps", "-aq", "--filter", f"label=troupe.session={sid}").stdout.split()


def test_the_failed_kernel_held_then_restarted_keeps_its_attempt(c: Client) -> None:
    name = unique("held")
    command = 'echo "attempt $TROUPE_RESTART_COUNT on $BACKENDAI_CLUSTER_HOST"; sleep 600'
    c.create_session(batch(name, command, size=2, max_restarts=1, success_policy="all"))
    before = c.wait_session(name, until="running", timeout=180)
    assert before.status == "RUNNING", before.status_info
    sub1 = next(k.container_id or "" for k in before.kernels if k.hostname == "sub1")
    deadline = time.monotonic() + 30
    while "attempt 0" not in docker("logs", sub1).stdout and time.monotonic() < deadline:
        time.sleep(0.2)  # (its command runs once the session is RUNNING)
    docker("kill", sub1)
    after = running_again(c, name, 1)
    assert next(k.container_id for k in after.kernels if k.hostname == "sub1") == sub1
    failure = after.restart_history[0]
    assert (failure.kernel, failure.exit_code, failure.attempt) == ("sub1", 137, 0), failure
    assert "attempt 0 on sub1" in failure.last_logs
    assert_both_attempts_logged(c, name)
    code, out = c.exec(name, ["printenv", "TROUPE_RESTART_COUNT"], kernel="sub1")
    assert (code, out.strip()) == (0, "1"), out


def assert_both_attempts_logged(c: Client, name: str) -> None:
    """sub1's log has attempt 0's line and attempt 1's, each under its attempt (attempt 1's
    command starts once the session is RUNNING again)."""
    want = ["[sub1#0] attempt 0 on sub1", "[sub1#1] attempt 1 on sub1"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        lines = [x for x in c.logs(name, container="sub1") if "attempt" in x]
        if lines == want:
            break
        time.sleep(0.3)
    assert lines == want


def test_a_failure_not_restarted_leaves_no_held_container(c: Client) -> None:
    """A no-restart exit code, and a failure with no restarts left: the failed kernel's
    container, started again on its death, goes with the session."""
    at_once = unique("atonce")
    c.create_session(
        batch(at_once, "sleep 600", size=2, max_restarts=2, no_restart_exit_codes=[137])
    )
    spent = unique("spent")
    c.create_session(batch(spent, "sleep 600", size=2, max_restarts=1))
    for name in (at_once, spent):
        info = c.wait_session(name, until="running", timeout=180)
        assert info.status == "RUNNING", info.status_info
    docker("kill", kernel(c.get_session(at_once), "sub1"))
    docker("kill", kernel(c.get_session(spent), "sub1"))
    running_again(c, spent, 1)
    docker("kill", kernel(c.get_session(spent), "sub1"))
    info = final(c, at_once)
    assert (info.status, info.exit_code, info.restarts) == ("ERROR", 137, 0), info
    assert not containers(info.id)
    info = final(c, spent)
    assert (info.status, info.restarts, info.status_info["kernel"]) == ("ERROR", 1, "sub1"), info
    assert not containers(info.id)


def test_destroyed_while_held(c: Client) -> None:
    """Held while its session is not restarted (here: in a time limit's grace, main1 taking no
    SIGTERM): sub1's container runs again but nothing of its kernel; the session's end removes
    it."""
    name = unique("grace")
    req = batch(
        name, "trap '' TERM; sleep 600", size=2, max_restarts=1, time_limit=3, stop_grace=300
    )
    info = c.create_session(req)
    sub1 = kernel(c.wait_session(name, until="running", timeout=180), "sub1")
    first = started_at(sub1)
    deadline = time.monotonic() + 60
    while started_at(sub1) == first and time.monotonic() < deadline:
        time.sleep(0.2)  # (the time limit's SIGTERM ends sub1; its agent starts it, held)
    assert started_at(sub1) != first
    assert docker("inspect", "-f", "{{.State.Running}}", sub1).stdout.strip() == "true"
    time.sleep(1)
    procs = commands(sub1)
    assert not any("sshd" in p or "sleep" in p or "ready.sh" in p for p in procs), procs
    held = c.get_session(name)
    assert held.status == "RUNNING" and held.restarts == 0, held
    assert next(k.status for k in held.kernels if k.hostname == "sub1") == "EXITED"
    c.destroy_session(name)
    assert final(c, name).status == "TERMINATED"
    assert not containers(info.id)


def kernel(info: SessionInfo, host: str) -> str:
    return next(k.container_id or "" for k in info.kernels if k.hostname == host)


def test_a_failed_command_keeps_its_container_running(c: Client) -> None:
    """sub1's command fails (exit 5) on attempt 0: its container is neither stopped nor started
    again (the same ``State.StartedAt``, no ``die`` event), the restart record has its exit code
    and lines, attempt 1 runs in the same container; its failure with no restarts left ends the
    session with its code, and the held container goes with the session."""
    name = unique("crash")
    command = (
        'echo "attempt $TROUPE_RESTART_COUNT on $BACKENDAI_CLUSTER_HOST"; '
        '[ "$BACKENDAI_CLUSTER_HOST" = sub1 ] || exec sleep 600; '
        "while [ ! -e /tmp/fail ]; do sleep 0.1; done; rm /tmp/fail; exit 5"
    )
    info = c.create_session(batch(name, command, size=2, max_restarts=1, success_policy="all"))
    before = c.wait_session(name, until="running", timeout=180)
    assert before.status == "RUNNING", before.status_info
    sub1 = kernel(before, "sub1")
    first = started_at(sub1)
    c.exec(name, ["touch", "/tmp/fail"], kernel="sub1")
    after = running_again(c, name, 1)
    assert kernel(after, "sub1") == sub1 and started_at(sub1) == first
    # "--until 0s" is cut to whole seconds by the CLI: within the second of ``first`` the engine
    # refuses it as before ``--since``. An absolute time with its fraction is never before it.
    until = f"{time.time() + 0.01:.6f}"
    died = docker("events", "--since", first, "--until", until, "--filter", f"container={sub1}")
    assert " die " not in died.stdout, died.stdout
    failure = after.restart_history[0]
    assert (failure.kernel, failure.exit_code, failure.attempt) == ("sub1", 5, 0), failure
    assert "attempt 0 on sub1" in failure.last_logs
    assert_both_attempts_logged(c, name)
    c.exec(name, ["touch", "/tmp/fail"], kernel="sub1")
    end = final(c, name)
    assert (end.status, end.exit_code, end.restarts) == ("ERROR", 5, 1), end
    assert end.status_info["kernel"] == "sub1", end.status_info
    assert not containers(info.id)


def test_a_command_killed_for_memory_is_made_anew_not_held(c: Client) -> None:
    """sub1's command is killed for memory on attempt 0 (128 MiB, 300 MiB asked for): not held
    in place (its kernel's memory count says so): its container dies, the restart record says
    it was the memory, and the restart makes the kernel anew (a new container)."""
    name = unique("oom")
    command = (
        'if [ "$BACKENDAI_CLUSTER_HOST$TROUPE_RESTART_COUNT" = sub10 ]; then '
        "exec python3 -c 'b = bytearray(300 << 20)'; fi; exec sleep 600"
    )
    c.create_session(batch(name, command, size=2, max_restarts=1, success_policy="all"))
    after = running_again(c, name, 1)
    failure = after.restart_history[0]
    assert (failure.kernel, failure.exit_code, failure.oom_killed) == ("sub1", 137, True), failure
    assert failure.reason == "kernel ran out of memory", failure
    first = docker("ps", "-aq", "--filter", f"label=troupe.session={after.id}").stdout.split()
    assert len(first) == 2 and kernel(after, "sub1")[:12] in first


#: Holds 1 GiB (a process with much memory takes long to end: its memory is freed before its
#: files are closed), with threads (a main thread may be a zombie while another one frees
#: what they share), and listens on port 2200, like a kernel's sshd; once /tmp/go exists, the
#: entrypoint's sweep (how long it took), then whether anything still listens on port 2200
#: (0x0898, LISTEN).
SWEEP_DRIVER = """
. /t/sweep.sh
_troupe_sig=""
python3 -c '
import socket, threading, time
for _ in range(4):
    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
b = bytearray(1 << 30)
for i in range(0, len(b), 4096):
    b[i] = 1
s = socket.socket()
s.bind(("", 2200))
s.listen()
open("/tmp/up", "w").close()
time.sleep(3600)' &
while [ ! -e /tmp/go ]; do sleep 0.05; done
t0=$(date +%s%N)
_troupe_sweep ""
echo "the sweep took $(( ($(date +%s%N) - t0) / 1000000 )) ms"
echo "listeners after the sweep: $(cat /proc/net/tcp /proc/net/tcp6 | grep -c ':0898 .* 0A ')"
sleep 600
"""


def test_the_sweep_waits_until_the_killed_processes_are_gone(
    docker_engine: None, tmp_path: Path
) -> None:
    """The supervisor's sweep returns only once what it killed is gone, and not much later: at
    a small CPU share a killed process may end long after its SIGKILL, and an old sshd still
    bound to port 2200 would make the next attempt's sshd fail to bind (after it went to the
    background: no PID file, and the kernel is never ready)."""
    entrypoint = (Path(runner_dir()) / "entrypoint.sh").read_text()
    sweep = re.search(r"^_troupe_sweep\(\) \{\n.*?^\}\n", entrypoint, re.M | re.S)
    assert sweep, "no _troupe_sweep in entrypoint.sh"
    (tmp_path / "sweep.sh").write_text(sweep.group(0))
    (tmp_path / "driver.sh").write_text(SWEEP_DRIVER)
    name = f"test-sweep-{uuid.uuid4().hex[:12]}"
    try:
        docker(
            *("run", "-d", "--init", "--name", name, "--network", "none"),
            *("-v", f"{tmp_path}:/t:ro", BASE_IMAGE, "sh", "/t/driver.sh"),
        )
        deadline = time.monotonic() + 60
        while docker("exec", name, "test", "-e", "/tmp/up", check=False).returncode:
            assert time.monotonic() < deadline, docker("logs", name, check=False).stderr
            time.sleep(0.2)
        docker("update", "--cpus", "0.05", name)  # (the memory was touched at full speed)
        docker("exec", name, "touch", "/tmp/go")
        deadline = time.monotonic() + 60
        while "listeners" not in (out := docker("logs", name).stdout):
            assert time.monotonic() < deadline, out
            time.sleep(0.2)
        assert "listeners after the sweep: 0" in out, out
        took = re.search(r"the sweep took (\d+) ms", out)
        assert took and int(took.group(1)) < 15_000, out  # (it ended: not the 30 s bound)
    finally:
        docker("rm", "-f", name, check=False)
