"""troupe.api.lifecycle: the tables, the named sets, transition() and begin(), on stand-in rows
and on sessions stored through them (tests/lifehelpers.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from tests.lifehelpers import (
    add_user,
    close,
    default_kernel_status,
    make_life,
    session_path,
    stored,
)

from troupe.api.lifecycle import (
    AGENT_MOVES,
    INITIAL,
    KERNEL_MOVES,
    SESSION_ACTIVE,
    SESSION_ALLOCATED,
    SESSION_FINAL,
    SESSION_HAS_KERNELS,
    SESSION_MOVES,
    TRANSITIONS,
    WHY,
    AgentStatus,
    Change,
    IllegalTransition,
    KernelStatus,
    SessionStatus,
    begin,
    can_move,
    transition,
)
from troupe.manager.life.context import load

S, K, A = SessionStatus, KernelStatus, AgentStatus
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@dataclass
class Row:
    """Stands in for a stored session, kernel or agent."""

    status: Any
    id: str = "x"
    timeline: dict[str, str] = field(default_factory=dict)
    session_id: str | None = None
    started_at: datetime | None = None
    terminated_at: datetime | None = None


@dataclass
class Bare:
    """An entity without a timeline (transition must cope)."""

    status: Any
    id: str = "b"


EDGES = [(enum, old, new) for enum, moves in TRANSITIONS.items() for old, news in moves.items()
         for new in news]  # fmt: skip


def all_pairs() -> list[tuple[StrEnum, StrEnum]]:
    return [(old, new) for enum in TRANSITIONS for old in enum for new in enum]


@pytest.mark.parametrize(("enum", "old", "new"), EDGES, ids=lambda x: str(x))
def test_every_move_in_the_table_is_allowed(enum: type[StrEnum], old: Any, new: Any) -> None:
    row = Row(status=old, timeline={old.value: "t"})
    changes: list[Change] = []
    c = transition(row, new, changes, T0)
    assert c is not None and changes == [c]
    assert (c.old, c.new, c.at, c.id) == (old.value, new.value, T0, "x")
    assert row.status == new
    assert row.timeline == {old.value: "t", new.value: T0.isoformat()}
    assert can_move(old, new)


def test_every_move_outside_the_table_is_refused() -> None:
    allowed = {(old, new) for _, old, new in EDGES}
    refused = 0
    for old, new in all_pairs():
        if old == new or (old, new) in allowed:
            continue
        row = Row(status=old)
        changes: list[Change] = []
        with pytest.raises(IllegalTransition):
            transition(row, new, changes)
        assert row.status == old and changes == [] and row.timeline == {}
        assert not can_move(old, new)
        refused += 1
    assert refused > 40


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (S.RUNNING, S.PENDING),
        (S.RUNNING, S.ERROR),  # only through TERMINATING
        (S.PENDING, S.RUNNING),
        (S.PENDING, S.TERMINATING),
        (S.TERMINATING, S.RUNNING),
        (S.CANCELLED, S.PENDING),
        (K.EXITED, K.RUNNING),
        (K.TERMINATED, K.RUNNING),
        (K.PENDING, K.EXITED),
        *((S.TERMINATED, s) for s in S if s != S.TERMINATED),
        *((S.ERROR, s) for s in S if s != S.ERROR),
    ],
    ids=str,
)
def test_sample_of_illegal_moves(old: StrEnum, new: StrEnum) -> None:
    row = Row(status=old)
    with pytest.raises(IllegalTransition, match=f"{old} -> {new}"):
        transition(row, new, [])
    assert row.status == old


def test_kinds_do_not_mix() -> None:
    # sessions and kernels share the name RUNNING, yet a kernel status is no session status
    assert not can_move(S.PREPARING, K.RUNNING)
    assert not can_move(K.PENDING, S.SCHEDULED)
    assert can_move(S.PREPARING, S.RUNNING) and can_move(K.PENDING, K.RUNNING)


def test_same_status_is_no_change() -> None:
    for enum in TRANSITIONS:
        for status in enum:
            row = Row(status=status, timeline={"PENDING": "t"})
            changes: list[Change] = []
            assert transition(row, status, changes) is None
            assert changes == [] and row.timeline == {"PENDING": "t"}
            assert row.started_at is None and row.terminated_at is None


def test_stored_strings_are_accepted() -> None:
    # a row read back from the database may hold the plain string
    row = Row(status="PREPARING")
    c = transition(row, S.RUNNING, [], T0)
    assert c is not None and c.old == "PREPARING" and row.status is S.RUNNING


def test_session_stamps() -> None:
    row = Row(status=S.PREPARING)
    transition(row, S.RUNNING, [], T0)
    assert row.started_at == T0 and row.terminated_at is None
    later = T0 + timedelta(seconds=5)
    transition(row, S.TERMINATING, [], later)
    assert row.terminated_at is None
    transition(row, S.ERROR, [], later)
    assert row.terminated_at == later and row.started_at == T0
    assert list(row.timeline) == ["RUNNING", "TERMINATING", "ERROR"]
    cancelled = Row(status=S.PENDING)
    transition(cancelled, S.CANCELLED, [], T0)
    assert cancelled.terminated_at == T0 and cancelled.started_at is None
    # kernels are not stamped with session columns
    k = Row(status=K.PENDING)
    transition(k, K.RUNNING, [], T0)
    assert k.started_at is None


def test_kernel_change_names_its_session_and_bare_entities_work() -> None:
    k = Row(status=K.RUNNING, id="k1", session_id="s1")
    changes: list[Change] = []
    c = transition(k, K.EXITED, changes, T0)
    assert c == Change("kernel", "k1", "RUNNING", "EXITED", T0, "s1")
    a = Bare(status=A.ALIVE)
    c = transition(a, A.LOST, changes)
    assert c is not None and c.kind == "agent" and c.session_id is None
    assert a.status == A.LOST and len(changes) == 2
    assert c.at.tzinfo is not None  # stamped now, in UTC


def test_begin_gives_the_initial_status() -> None:
    for kind, status in INITIAL.items():
        row = Row(status=None, id=kind)
        changes: list[Change] = []
        c = begin(row, status, changes, T0)
        assert row.status == status
        assert row.timeline == {status.value: T0.isoformat()}
        assert c == changes[0] and (c.kind, c.old, c.new) == (kind, "", status.value)
    assert INITIAL == {"session": S.PENDING, "kernel": K.PENDING, "agent": A.ALIVE}


@pytest.mark.parametrize("status", [S.RUNNING, S.SCHEDULED, S.ERROR, K.RUNNING, A.LOST], ids=str)
def test_begin_refuses_a_non_initial_status(status: StrEnum) -> None:
    row = Row(status=None)
    changes: list[Change] = []
    with pytest.raises(IllegalTransition):
        begin(row, status, changes)
    assert row.status is None and changes == [] and row.timeline == {}


def test_named_sets_are_consistent() -> None:
    every = set(S)
    assert every == SESSION_FINAL | SESSION_ACTIVE
    assert not SESSION_FINAL & SESSION_ACTIVE
    assert SESSION_HAS_KERNELS <= SESSION_ALLOCATED <= SESSION_ACTIVE
    assert S.PENDING in SESSION_ACTIVE and S.PENDING not in SESSION_ALLOCATED
    for s in S:
        assert s.is_final == (s in SESSION_FINAL)
    # final states have no moves; every other state has one
    for s, moves in SESSION_MOVES.items():
        assert (moves == frozenset()) == (s in SESSION_FINAL), s
    assert KERNEL_MOVES[K.TERMINATED] == frozenset()


def _reach_avoiding(start: S, via: S) -> set[S]:
    """The statuses ``start`` reaches without passing through ``via``."""
    reach: set[S] = set()
    todo = [] if start == via else [start]
    while todo:
        for y in SESSION_MOVES[todo.pop()]:
            if y not in reach and y != via:
                reach.add(y)
                todo.append(y)
    return reach


def test_every_status_is_in_its_table_and_reaches_an_end() -> None:
    assert set(SESSION_MOVES) == set(S)
    assert set(KERNEL_MOVES) == set(K)
    assert set(AGENT_MOVES) == set(A)
    for s in S:
        reach, todo = set(), [s]
        while todo:
            x = todo.pop()
            for y in SESSION_MOVES[x]:
                if y not in reach:
                    reach.add(y)
                    todo.append(y)
        if s in SESSION_FINAL:
            assert not reach
        else:
            assert reach & SESSION_FINAL, s
            # every loop is a restart, through RESTARTING (at most max_restarts times:
            # docs/policies.md): in place back to RUNNING, or placed again through PENDING
            assert s not in _reach_avoiding(s, S.RESTARTING), f"{s} can come back to itself"
    # kernels always end TERMINATED
    for k in K:
        if k != K.TERMINATED:
            assert K.TERMINATED in KERNEL_MOVES[k] or any(
                K.TERMINATED in KERNEL_MOVES[n] for n in KERNEL_MOVES[k]
            )


def test_allocated_sessions_leave_only_through_terminating() -> None:
    # resources held are released by a teardown, never by jumping to a final status
    for s in SESSION_ALLOCATED - {S.TERMINATING}:
        assert not SESSION_MOVES[s] & SESSION_FINAL, s
    assert SESSION_MOVES[S.TERMINATING] <= SESSION_FINAL


def test_every_move_is_explained() -> None:
    for enum, moves in TRANSITIONS.items():
        edges = {(old, new) for old, news in moves.items() for new in news}
        assert set(WHY[enum]) == edges, enum
        assert all(WHY[enum].values())


# -- stored rows: the same moves through the database (tests/lifehelpers.py) -----------------


@pytest.mark.parametrize("status", list(S), ids=str)
async def test_a_stored_session_reaches_every_status_through_the_table(
    tmp_path: Path, status: SessionStatus
) -> None:
    life = await make_life(tmp_path)
    try:
        owner = await add_user(life.store)
        with life.store.bus.subscribe() as published:
            s = await stored(life.store, owner, status, size=2)
            seen = [published.get_nowait() for _ in range(published.qsize())]
        async with life.store() as db:
            row = await load(db, s.id)
        path = [S.PENDING, *session_path(status)]
        assert row.status == status and list(row.timeline) == [p.value for p in path]
        assert (row.started_at is not None) == (S.RUNNING in path)
        assert (row.terminated_at is not None) == (status in SESSION_FINAL)
        kernel = default_kernel_status(status)
        assert [k.status for k in row.kernels] == [kernel, kernel]
        # every move was published once, in order, after the commit
        moves = [(c.old, c.new) for c in seen if c.kind == "session"]
        assert moves == [("", "PENDING"), *pairwise(path)]
        # each kernel: born PENDING, then RUNNING (and RESTARTING) where it got that far
        moves_each = 1 + (kernel != K.PENDING) + (kernel == K.RESTARTING)
        assert len([c for c in seen if c.kind == "kernel"]) == 2 * moves_each
    finally:
        await close(life)
