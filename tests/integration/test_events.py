"""Session events against the real Docker engine (docs/events.md): a session created by a
user, one of its kernels killed with ``docker kill``, and a session destroyed by an admin list
those steps with the right actors, through the API and ``troupe session events --json``; the
user's creation is in ``troupe user audit``."""

from __future__ import annotations

import contextlib
import json
import time
import uuid

import pytest

from tests.conftest import BASE_IMAGE, Server, docker
from troupe.api.models import Resources, SessionCreate

pytestmark = pytest.mark.docker
SMALL = Resources(cpu=0.25, mem=256 * 1024**2)


def steps(events: list[dict[str, object]]) -> list[tuple[object, object, object]]:
    return [(e["kind"], e["status"] or e["kernel"], e["actor"]) for e in events]


def test_events_of_a_killed_kernel_and_an_admin_destroy(server: Server) -> None:
    admin = server.client()
    user = f"ev-{uuid.uuid4().hex[:6]}"
    key = admin.create_user(user).api_key
    assert key
    c = server.client(key)
    killed, destroyed = f"{user}-kill", f"{user}-gone"
    for name in (killed, destroyed):
        c.create_session(
            SessionCreate(name=name, image=BASE_IMAGE, cluster_size=2, resources=SMALL)
        )
    for name in (killed, destroyed):
        assert c.wait_session(name, until="running", timeout=180).status == "RUNNING"

    # a kernel killed: its exit (137) and the session's failure, by the system
    info = c.get_session(killed)
    sub1 = next(k for k in info.kernels if k.hostname == "sub1")
    assert sub1.container_id
    docker("kill", sub1.container_id)
    assert c.wait_session(killed, until="final", timeout=60).status == "ERROR"
    r = server.cli("session", "events", killed, "--json", key=key)
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert steps(events) == [
        ("status", "PENDING", f"user {user}"),
        ("status", "SCHEDULED", "scheduler"),
        ("status", "PREPARING", "system"),
        ("status", "RUNNING", "system"),
        ("kernel-exit", "sub1", "system"),
        ("status", "TERMINATING", "system"),
        ("status", "ERROR", "system"),
    ]
    assert events[4]["message"] == "exited with code 137"
    assert events[5]["message"] == "kernel exited"

    # destroyed by the admin (not the owner): the admin is the actor
    admin.destroy_session(c.get_session(destroyed).id)
    gone = [e.model_dump() for e in c.session_events(destroyed)]
    assert steps(gone)[-2:] == [
        ("status", "TERMINATING", "admin admin"),
        ("status", "TERMINATED", "admin admin"),
    ]
    assert gone[-1]["message"] == "destroyed by admin admin"
    assert steps(gone)[0] == ("status", "PENDING", f"user {user}")

    # the table, and the audit list of the user's creation
    r = server.cli("session", "events", destroyed, key=key)
    assert r.returncode == 0 and "TERMINATED: destroyed by admin admin" in r.stdout, r.stdout
    r = server.cli("user", "audit", "--json")
    assert r.returncode == 0, r.stderr
    audit = [json.loads(line) for line in r.stdout.splitlines()]
    assert ("admin", "user-create", user) in [(a["actor"], a["action"], a["target"]) for a in audit]


def test_one_session_killed_restarted_and_destroyed_by_an_admin(server: Server) -> None:
    """The issue's one session: created by its user, a kernel killed (a restart follows, by
    the restart policy), then destroyed by an admin."""
    admin = server.client()
    user = f"ev-{uuid.uuid4().hex[:6]}"
    key = admin.create_user(user).api_key
    assert key
    c = server.client(key)
    name = f"{user}-life"
    c.create_session(
        SessionCreate(name=name, image=BASE_IMAGE, cluster_size=2, resources=SMALL, max_restarts=1)
    )
    try:
        assert c.wait_session(name, until="running", timeout=180).status == "RUNNING"
        sub1 = next(k for k in c.get_session(name).kernels if k.hostname == "sub1")
        assert sub1.container_id
        docker("kill", sub1.container_id)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            info = c.get_session(name)
            if info.restarts == 1 and info.status == "RUNNING":
                break
            time.sleep(0.5)
        assert (info.status, info.restarts) == ("RUNNING", 1), info
        admin.destroy_session(info.id)
        assert c.wait_session(name, until="final", timeout=60).status == "TERMINATED"
        r = server.cli("session", "events", name, "--json", key=key)
        assert r.returncode == 0, r.stderr
        got = steps([json.loads(line) for line in r.stdout.splitlines()])
        assert got == [
            ("status", "PENDING", f"user {user}"),
            ("status", "SCHEDULED", "scheduler"),
            ("status", "PREPARING", "system"),
            ("status", "RUNNING", "system"),
            ("kernel-exit", "sub1", "system"),
            ("status", "RESTARTING", "policy max_restarts"),
            ("restart", "sub1", "policy max_restarts"),
            ("status", "RUNNING", "policy max_restarts"),
            ("status", "TERMINATING", "admin admin"),
            ("status", "TERMINATED", "admin admin"),
        ], got
    finally:
        with contextlib.suppress(Exception):
            admin.destroy_session(c.get_session(name).id)
