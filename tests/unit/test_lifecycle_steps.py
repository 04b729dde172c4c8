"""Steps of ``troupe.manager.life`` on their own, over sessions stored at the status each step
meets (tests/lifehelpers.py): exits, a lost agent, reconciliation after a restart, teardown
of a pending session, placing's time-out, and retention."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from tests.lifehelpers import add_user, close, make_life, stored

from troupe.api.agent import KernelExit
from troupe.api.lifecycle import KernelStatus, SessionStatus, utcnow
from troupe.api.models import SessionType
from troupe.manager.life import Life, exits, lost, placing, reconcile, retention, teardown
from troupe.manager.life.context import load
from troupe.manager.store.models import Kernel, Session, User

S, K = SessionStatus, KernelStatus


@pytest.fixture
async def life(tmp_path: Path) -> AsyncIterator[Life]:
    made = await make_life(tmp_path, retention_days=1)
    try:
        yield made
    finally:
        await close(made)


@pytest.fixture
async def owner(life: Life) -> User:
    return await add_user(life.store)


async def fresh(life: Life, session_id: str) -> Session:
    async with life.store() as db:
        return await load(db, session_id)


def exit_of(s: Session, rank: int, code: int = 3) -> KernelExit:
    k = s.kernels[rank]
    return KernelExit(session_id=s.id, kernel_id=k.id, exit_code=code, last_logs=["bye"])


# -- exits ------------------------------------------------------------------------------------
async def test_a_batch_main_exit_ends_the_session_with_its_code(life: Life, owner: User) -> None:
    s = await stored(life.store, owner, S.RUNNING, size=2, type=SessionType.BATCH)
    outcome = await exits.record_running_exit(life, "a1", exit_of(s, 0, code=7))
    assert outcome is not None
    assert (outcome.ending, outcome.exit_code) == (S.TERMINATED, 7)
    row = await fresh(life, s.id)
    assert [(k.status, k.exit_code) for k in row.kernels] == [(K.EXITED, 7), (K.RUNNING, None)]
    # reported again: nothing more to do
    assert await exits.record_running_exit(life, "a1", exit_of(s, 0, code=7)) is None


async def test_a_sub_exit_fails_an_interactive_session(life: Life, owner: User) -> None:
    s = await stored(life.store, owner, S.RUNNING, size=3)
    outcome = await exits.record_running_exit(life, "a1", exit_of(s, 2))
    assert outcome is not None and outcome.ending == S.ERROR
    assert outcome.info["kernel"] == "sub2" and outcome.info["last_logs"] == ["bye"]


@pytest.mark.parametrize("status", [S.PREPARING, S.TERMINATING, S.ERROR], ids=str)
async def test_exits_outside_running_are_not_the_exit_steps(
    life: Life, owner: User, status: SessionStatus
) -> None:
    s = await stored(life.store, owner, status)
    assert await exits.record_running_exit(life, "a1", exit_of(s, 0)) is None
    assert (await fresh(life, s.id)).kernels[0].exit_code is None


async def test_only_the_agent_holding_the_kernel_reports_its_exit(life: Life, owner: User) -> None:
    s = await stored(life.store, owner, S.RUNNING, size=2, agents=["a1", "a2"])
    assert await exits.record_running_exit(life, "a1", exit_of(s, 1)) is None
    assert (await fresh(life, s.id)).kernels[1].status == K.RUNNING
    assert await exits.record_running_exit(life, "a2", exit_of(s, 1)) is not None


async def test_exit_codes_of_a_preparing_session_are_kept(life: Life, owner: User) -> None:
    s = await stored(life.store, owner, S.PREPARING, size=2, kernels=[K.RUNNING, K.PENDING])
    await exits.record_exit_codes(life, s.id, [exit_of(s, 0, 127), exit_of(s, 1, 1)])
    row = await fresh(life, s.id)
    # a kernel not yet running keeps its status (PENDING -> EXITED is no move) but its code
    assert [(k.status, k.exit_code) for k in row.kernels] == [(K.EXITED, 127), (K.PENDING, 1)]


# -- a lost agent -----------------------------------------------------------------------------
async def test_victims_of_a_lost_agent_are_the_sessions_holding_it(life: Life, owner: User) -> None:
    spread = await stored(life.store, owner, S.RUNNING, name="a", size=3, agents=["a2", "a1", "a1"])
    placed = await stored(life.store, owner, S.SCHEDULED, name="b")
    ending = await stored(life.store, owner, S.TERMINATING, name="c")
    await stored(life.store, owner, S.PENDING, name="d")  # not placed
    await stored(life.store, owner, S.ERROR, name="e")  # over
    await stored(life.store, owner, S.RUNNING, name="f", agents="a2")  # elsewhere
    victims = await lost.victims_of(life, "a1")
    assert victims == {spread.id: "sub1", placed.id: "main1", ending.id: "main1"}


# -- reconciliation after a restart -----------------------------------------------------------
class Teardowns:
    def __init__(self) -> None:
        self.calls: dict[str, tuple[SessionStatus, dict[str, Any]]] = {}

    async def __call__(self, sid: str, ending: SessionStatus, info: dict[str, Any]) -> None:
        self.calls[sid] = (ending, info)


async def test_reconcile_fails_what_was_lost_and_finishes_what_was_begun(
    life: Life, owner: User
) -> None:
    creating = await stored(life.store, owner, S.PREPARING, name="a")
    placed = await stored(life.store, owner, S.SCHEDULED, name="b")
    info = {"reason": "batch command finished"}
    ending = await stored(
        life.store, owner, S.TERMINATING, name="c", ending=S.TERMINATED, status_info=info
    )
    gone = await stored(life.store, owner, S.RUNNING, name="d", size=2)
    away = await stored(life.store, owner, S.RUNNING, name="e", agents="far")
    await stored(life.store, owner, S.PENDING, name="f")
    lost_one = {"attempt": 0, "kernel": "main1", "reason": "agent a1 lost", "agent": "a1"}
    moving = await stored(
        life.store, owner, S.RESTARTING, name="g", restarts=1, max_restarts=2,
        restart_history=[{**lost_one, "at": "2026-11-28T00:00:00+00:00"}],
    )  # fmt: skip
    failed_one = {**lost_one, "reason": "kernel exited", "agent": None, "exit_code": 1}
    in_place = await stored(
        life.store, owner, S.RESTARTING, name="h", restarts=1, max_restarts=2,
        restart_history=[{**failed_one, "at": "2026-11-28T00:00:00+00:00"}],
    )  # fmt: skip
    life.fleet.lost.add("far")  # its kernels may still run: its heartbeat time-out decides
    calls = Teardowns()
    replaced: list[str] = []
    await reconcile.reconcile(life, calls, replaced.append)
    # (a session on its way to be placed again after a lost agent goes on)
    assert replaced == [moving.id]
    restarted = "manager restarted while the session was being created"
    again = {"reason": "manager restarted while the session was restarting", "restarts": 1}
    assert calls.calls == {
        in_place.id: (S.ERROR, again),
        creating.id: (S.ERROR, {"reason": restarted}),
        placed.id: (S.ERROR, {"reason": restarted}),
        ending.id: (S.TERMINATED, info),
        gone.id: (
            S.ERROR,
            {"reason": "kernel not running after manager restart", "kernel": "main1"},
        ),
    }
    assert away.id not in calls.calls


# -- teardown and placing without agents ------------------------------------------------------
async def test_teardown_cancels_a_pending_session_at_once(life: Life, owner: User) -> None:
    s = await stored(life.store, owner, S.PENDING, size=2)

    async def no_preparer(sid: str) -> None:
        raise AssertionError("a pending session has no preparer")

    await teardown.teardown(life, s.id, S.TERMINATED, {"reason": "destroyed"}, no_preparer)
    row = await fresh(life, s.id)
    assert row.status == S.CANCELLED and row.status_info == {"reason": "destroyed"}
    assert [k.status for k in row.kernels] == [K.TERMINATED, K.TERMINATED]
    assert row.ssh_private_key == "" and all(k.host_private_key == "" for k in row.kernels)


async def test_placing_cancels_a_session_pending_too_long(life: Life, owner: User) -> None:
    old = utcnow() - timedelta(seconds=60)
    late = await stored(life.store, owner, S.PENDING, name="a", created_at=old,
                        max_pending_seconds=30.0)  # fmt: skip
    waiting = await stored(life.store, owner, S.PENDING, name="b", max_pending_seconds=300.0)
    result = await placing.place_pending(life)
    assert result.placed == [] and result.next_due is not None and result.next_due > 200
    row = await fresh(life, late.id)
    assert row.status == S.CANCELLED and "max_pending_seconds" in row.status_info["reason"]
    row = await fresh(life, waiting.id)
    assert row.status == S.PENDING and set(row.status_info["pending"]) == {"main1"}


# -- retention --------------------------------------------------------------------------------
async def test_retention_forgets_old_finished_sessions_only(life: Life, owner: User) -> None:
    old = await stored(life.store, owner, S.TERMINATED, name="a", size=2)
    new = await stored(life.store, owner, S.ERROR, name="b")
    running = await stored(life.store, owner, S.RUNNING, name="c")
    life.logs.save(old.id, {"main1": "x\n"})
    later = utcnow() + timedelta(days=1, seconds=1)
    async with life.store() as db:
        row = await db.get(Session, new.id)
        assert row is not None
        row.terminated_at = later  # finished a day after the other
        await db.commit()
    assert await retention.sweep(life, now=later) == 1
    async with life.store() as db:
        ids = set((await db.execute(select(Session.id))).scalars())
        kernels = (await db.execute(select(func.count()).select_from(Kernel))).scalar_one()
    assert ids == {new.id, running.id} and kernels == 2
    assert not (life.config.logs_dir / old.id).exists()
