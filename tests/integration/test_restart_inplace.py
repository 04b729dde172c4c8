"""A restart in place on the real engine (docs/policies.md, "A restart, in place"): the
surviving kernels' containers are not started again (the same ``State.StartedAt``) while every
process of their last attempt is gone; the supervising entrypoint passes the command's exit
code on, lets SIGINT reach it and passes a time limit's SIGTERM to it."""

from __future__ import annotations

import time

from tests.conftest import docker
from tests.integration.test_restarts import batch, c, final, running_again, unique
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
