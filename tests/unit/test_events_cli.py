"""``troupe session events`` and ``troupe user audit`` (docs/events.md) against a stand-in
SDK client: the table, one JSON record per line, and ``--follow`` printing new events until
the session's final status, that one included."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from troupe.api.events import AuditEntry, SessionEvent
from troupe.api.lifecycle import SessionStatus
from troupe.client.cli import events as cli_events
from troupe.main import app

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def ev(i: int, status: str | None = None, **kw: Any) -> SessionEvent:
    kind = "status" if status else kw.pop("kind")
    return SessionEvent(id=i, at=T0, kind=kind, status=status, actor="system", **kw)


class FakeClient:
    """A session whose list grows by one event per read, and which is TERMINATED once its
    last event exists."""

    def __init__(self) -> None:
        self.all = [
            ev(1, "PENDING", message="created"),
            ev(2, "RUNNING"),
            ev(3, kind="oom", kernel="sub1", message="killed: out of memory (exit code 137)"),
            ev(4, "TERMINATING", message="destroyed by admin root"),
            ev(5, "TERMINATED", message="destroyed by admin root"),
        ]
        self.shown = 2
        self.calls: list[tuple[str, int | None]] = []
        self.session_reads = 0

    def session_events(self, ref: str, after: int | None = None, **_: Any) -> list[SessionEvent]:
        self.calls.append((ref, after))
        seen = [e for e in self.all[: self.shown] if after is None or e.id > after]
        self.shown += 1
        return seen

    def get_session(self, ref: str) -> Any:
        self.session_reads += 1
        final = self.shown >= len(self.all)
        status = SessionStatus.TERMINATED if final else SessionStatus.RUNNING
        return SimpleNamespace(id="sid", status=status)

    def audit(self, **_: Any) -> list[AuditEntry]:
        return [
            AuditEntry(
                id=1, at=T0, actor="root", action="limits-set", target="bob", details={"gpu": 1}
            )
        ]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    c = FakeClient()

    @contextlib.contextmanager
    def client() -> Iterator[Any]:
        yield c

    monkeypatch.setattr(cli_events, "client", client)
    monkeypatch.setattr(cli_events, "POLL", 0.0)
    return c


def run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def test_table_and_json(fake: FakeClient) -> None:
    r = run("session", "events", "s")
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0].split() == ["TIME", "KIND", "KERNEL", "WHAT", "BY"]
    assert "PENDING: created" in r.output
    fake.shown = 5
    r = run("session", "events", "s", "--json")
    records = [json.loads(line) for line in r.output.splitlines()]
    assert [x["id"] for x in records] == [1, 2, 3, 4, 5]
    assert records[2]["kind"] == "oom" and records[2]["kernel"] == "sub1"


def test_follow_prints_until_the_final_status(fake: FakeClient) -> None:
    r = run("session", "events", "s", "--follow", "--json")
    assert r.exit_code == 0, r.output
    assert [json.loads(line)["id"] for line in r.output.splitlines()] == [1, 2, 3, 4, 5]
    # after the first read, each read asks for what came after the last id seen, by id
    assert fake.calls[0] == ("sid", None) and fake.calls[1:] == [
        ("sid", 2),
        ("sid", 3),
        ("sid", 4),
    ]
    # the session itself is read once (its id), not in every poll: the list says it ended
    assert fake.session_reads == 1


def test_follow_a_session_over_already(fake: FakeClient) -> None:
    """Its list is read once, after the session (so it holds the final status), and it stops
    even if the list lacks that status (a session from before the server kept events)."""
    fake.all = fake.all[:2]
    fake.shown = 2
    r = run("session", "events", "s", "--follow", "--json")
    assert r.exit_code == 0, r.output
    assert [json.loads(line)["id"] for line in r.output.splitlines()] == [1, 2]
    assert fake.calls == [("sid", None)] and fake.session_reads == 1


def test_audit(fake: FakeClient) -> None:
    r = run("user", "audit")
    assert r.exit_code == 0, r.output
    assert "limits-set" in r.output and "gpu=1" in r.output and "root" in r.output
    r = run("user", "audit", "--json")
    assert json.loads(r.output)["target"] == "bob"
