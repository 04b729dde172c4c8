"""Reasons and actors of status changes (troupe.api.lifecycle) and their way into a
session's event list (troupe.manager.session_events), on stand-in rows and on a store in
memory; the CLI's rendering of events (troupe.client.cli.events)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from tests.lifehelpers import add_user, close, make_life, stored

from troupe.api.events import SessionEvent as EventWire
from troupe.api.lifecycle import Change, SessionStatus, begin, transition
from troupe.client.cli.events import ended, what
from troupe.manager.session_events import actor_of, policy, record_event
from troupe.manager.store.models import SessionEvent, User
from troupe.manager.store.unit import changes_of

S = SessionStatus
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Row:
    status: Any
    id: str = "s1"
    timeline: dict[str, str] = field(default_factory=dict)
    started_at: datetime | None = None
    terminated_at: datetime | None = None


def test_transition_and_begin_carry_reason_and_actor() -> None:
    changes: list[Change] = []
    row = Row(status=None)
    c0 = begin(row, S.PENDING, changes, T0, reason="created", actor="user alice")
    assert (c0.reason, c0.actor, c0.old, c0.new) == ("created", "user alice", "", "PENDING")
    c1 = transition(row, S.SCHEDULED, changes, T0, reason="placed on a1", actor="scheduler")
    assert c1 is not None and (c1.reason, c1.actor) == ("placed on a1", "scheduler")
    c2 = transition(row, S.PREPARING, changes, T0)
    assert c2 is not None and (c2.reason, c2.actor) == ("", "")  # the defaults
    assert changes == [c0, c1, c2]


def test_actors() -> None:
    alice = User(id="u1", name="alice", admin=False)
    root = User(id="u2", name="root", admin=True)
    assert actor_of(alice, "u1") == "user alice"
    assert actor_of(alice) == "user alice"
    assert actor_of(root, "u1") == "admin root"  # an admin acting on another's session
    assert actor_of(root, "u2") == "user root"  # ... and on their own
    assert actor_of(root) == "user root"  # (creating one)
    assert policy("time_limit") == "policy time_limit"


async def test_status_changes_and_events_share_the_transaction(tmp_path: Any) -> None:
    life = await make_life(tmp_path)
    try:
        owner = await add_user(life.store)
        s = await stored(life.store, owner, S.RUNNING)

        async def ends(db: AsyncSession) -> None:
            row = await db.get(type(s), s.id)
            assert row is not None
            transition(row, S.TERMINATING, changes_of(db), reason="why", actor="admin root")
            await record_event(db, s.id, "kernel-exit", "exited with code 1", kernel="sub1")

        await life.store.write(ends)

        async def fails(db: AsyncSession) -> None:
            row = await db.get(type(s), s.id)
            assert row is not None
            transition(row, S.ERROR, changes_of(db), reason="never kept")
            await record_event(db, s.id, "restart", "never kept either")
            raise RuntimeError("rolled back")

        with pytest.raises(RuntimeError):
            await life.store.write(fails)
        async with life.store() as db:
            rows = list(
                (await db.execute(select(SessionEvent).order_by(SessionEvent.id))).scalars()
            )
        got = [(r.kind, r.status, r.kernel, r.message, r.actor) for r in rows]
        assert got[-2:] == [
            ("status", "TERMINATING", None, "why", "admin root"),
            ("kernel-exit", None, "sub1", "exited with code 1", "system"),
        ]
        assert [r[1] for r in got if r[0] == "status"][:2] == ["PENDING", "SCHEDULED"]
    finally:
        await close(life)


def test_cli_renders_events() -> None:
    def ev(**kw: Any) -> EventWire:
        return EventWire(id=1, at=T0, actor="system", **kw)

    assert what(ev(kind="status", status="ERROR", message="agent lost")) == "ERROR: agent lost"
    assert what(ev(kind="status", status="RUNNING")) == "RUNNING"
    assert what(ev(kind="oom", kernel="sub1", message="killed")) == "killed"
    assert ended([ev(kind="status", status="TERMINATED")])
    assert not ended([ev(kind="status", status="TERMINATING"), ev(kind="restart")])
