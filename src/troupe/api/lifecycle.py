"""The life of sessions, kernels and agents: statuses, named sets, legal moves, and the one
function through which every status change goes.

Pure: no I/O, no database. :func:`transition` refuses an illegal move, stamps the time and
hands a :class:`Change` to the caller's list; the manager publishes those changes once its
transaction commits (to ``/wait``, the scheduler and live views), so a waiter never sees a
change that was rolled back. ``docs/lifecycle.md`` renders :data:`TRANSITIONS`
(``tests/unit/test_lifecycle_docs.py`` keeps them equal).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal, Protocol


class SessionStatus(StrEnum):
    PENDING = "PENDING"
    SCHEDULED = "SCHEDULED"
    PREPARING = "PREPARING"
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    ERROR = "ERROR"
    CANCELLED = "CANCELLED"

    @property
    def is_final(self) -> bool:
        return self in SESSION_FINAL


class KernelStatus(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    EXITED = "EXITED"
    RESTARTING = "RESTARTING"
    TERMINATED = "TERMINATED"


class AgentStatus(StrEnum):
    ALIVE = "ALIVE"
    LOST = "LOST"


S, K, A = SessionStatus, KernelStatus, AgentStatus

#: Over: nothing runs, nothing is held; the name may be reused.
SESSION_FINAL = frozenset({S.TERMINATED, S.ERROR, S.CANCELLED})
#: Not over: the name is taken (unique per owner among these).
SESSION_ACTIVE = frozenset(set(S) - SESSION_FINAL)
#: Placed on agents: its kernels' resources count as used there.
SESSION_ALLOCATED = frozenset({S.SCHEDULED, S.PREPARING, S.RUNNING, S.RESTARTING, S.TERMINATING})
#: Kernels exist on their agents (exec, logs and the web UI's kernel views apply).
SESSION_HAS_KERNELS = frozenset({S.PREPARING, S.RUNNING, S.RESTARTING, S.TERMINATING})

# StrEnum members compare (and hash) as their strings, and sessions and kernels share names
# such as RUNNING: each kind has its own table.
SESSION_MOVES: Mapping[SessionStatus, frozenset[SessionStatus]] = {
    S.PENDING: frozenset({S.SCHEDULED, S.CANCELLED}),
    S.SCHEDULED: frozenset({S.PREPARING, S.RESTARTING, S.TERMINATING}),
    S.PREPARING: frozenset({S.RUNNING, S.RESTARTING, S.TERMINATING}),
    S.RUNNING: frozenset({S.RESTARTING, S.TERMINATING}),
    S.RESTARTING: frozenset({S.RUNNING, S.PENDING, S.TERMINATING}),
    S.TERMINATING: frozenset({S.TERMINATED, S.ERROR}),
    S.TERMINATED: frozenset(),
    S.ERROR: frozenset(),
    S.CANCELLED: frozenset(),
}
KERNEL_MOVES: Mapping[KernelStatus, frozenset[KernelStatus]] = {
    K.PENDING: frozenset({K.RUNNING, K.RESTARTING, K.TERMINATED}),
    K.RUNNING: frozenset({K.EXITED, K.RESTARTING, K.TERMINATED}),
    K.EXITED: frozenset({K.RESTARTING, K.TERMINATED}),
    K.RESTARTING: frozenset({K.RUNNING, K.PENDING, K.TERMINATED}),
    K.TERMINATED: frozenset(),
}
AGENT_MOVES: Mapping[AgentStatus, frozenset[AgentStatus]] = {
    A.ALIVE: frozenset({A.LOST}),
    A.LOST: frozenset({A.ALIVE}),
}
#: The legal moves of each kind of entity.
TRANSITIONS: Mapping[type[StrEnum], Mapping[Any, frozenset[Any]]] = {
    SessionStatus: SESSION_MOVES,
    KernelStatus: KERNEL_MOVES,
    AgentStatus: AGENT_MOVES,
}

#: What each move means, for the docs and for people reading status histories.
WHY: Mapping[type[StrEnum], Mapping[tuple[str, str], str]] = {
    SessionStatus: {
        (S.PENDING, S.SCHEDULED): "the scheduler placed every kernel on an agent",
        (S.PENDING, S.CANCELLED): "destroyed, or pending longer than max_pending_seconds",
        (S.SCHEDULED, S.PREPARING): "network and kernels are being created",
        (S.SCHEDULED, S.TERMINATING): "destroyed, agent lost, or manager restarted",
        (S.SCHEDULED, S.RESTARTING): "an agent it was placed on was lost, restarts are left",
        (S.PREPARING, S.RUNNING): "every kernel reaches every other (readiness barrier)",
        (S.PREPARING, S.TERMINATING): "a step failed or timed out, a kernel exited, destroyed",
        (S.PREPARING, S.RESTARTING): "an agent it was placed on was lost, restarts are left",
        (S.RUNNING, S.RESTARTING): "a kernel failed (or its agent was lost), restarts are left",
        (
            S.RUNNING,
            S.TERMINATING,
        ): "destroyed, a kernel exited, batch ended, agent lost, a clock ran out",
        (S.RESTARTING, S.RUNNING): "every kernel started again and reaches every other",
        (S.RESTARTING, S.TERMINATING): "the restart failed or timed out, destroyed",
        (S.RESTARTING, S.PENDING): "a kernel's agent was lost: the session is placed again",
        (S.TERMINATING, S.TERMINATED): "kernels and network removed after a destroy or batch end",
        (S.TERMINATING, S.ERROR): "kernels and network removed after a failure",
    },
    KernelStatus: {
        (K.PENDING, K.RUNNING): "its container was created and started",
        (K.PENDING, K.TERMINATED): "the session ended before the kernel was created",
        (K.PENDING, K.RESTARTING): "its session restarts (an agent was lost) before it was made",
        (K.RUNNING, K.EXITED): "its container stopped on its own",
        (K.RUNNING, K.RESTARTING): "its session restarts: its container starts again",
        (K.RUNNING, K.TERMINATED): "its container was removed",
        (K.EXITED, K.RESTARTING): "its session restarts: its container starts again",
        (K.EXITED, K.TERMINATED): "its container was removed",
        (K.RESTARTING, K.RUNNING): "its container was started again",
        (K.RESTARTING, K.TERMINATED): "the session ended while it restarted",
        (K.RESTARTING, K.PENDING): "its session is placed again (an agent was lost)",
    },
    AgentStatus: {
        (A.ALIVE, A.LOST): "no heartbeat for the agent time-out",
        (A.LOST, A.ALIVE): "heartbeat or registration again",
    },
}

Kind = Literal["session", "kernel", "agent"]
_KIND: dict[type[StrEnum], Kind] = {S: "session", K: "kernel", A: "agent"}
#: Columns stamped when a session reaches a status (besides its timeline).
_STAMPS: dict[StrEnum, str] = {
    S.RUNNING: "started_at",
    **dict.fromkeys(SESSION_FINAL, "terminated_at"),
}


class IllegalTransition(Exception):
    """A bug, not a user error: code tried a move the table does not allow."""


class Stateful(Protocol):
    id: str
    status: Any


@dataclass(frozen=True)
class Change:
    kind: Kind
    id: str
    old: str
    new: str
    at: datetime
    #: the session a kernel belongs to (None for sessions and agents)
    session_id: str | None = None
    #: why, in words ("" when the move says it all); sessions' changes become events
    reason: str = ""
    #: who: ``user NAME``, ``admin NAME``, ``scheduler``, ``policy NAME`` or ``system``
    actor: str = ""


def utcnow() -> datetime:
    return datetime.now(UTC)


#: The status each kind of entity is born with.
INITIAL: Mapping[Kind, StrEnum] = {"session": S.PENDING, "kernel": K.PENDING, "agent": A.ALIVE}


def can_move(old: StrEnum, new: StrEnum) -> bool:
    if type(old) is not type(new):
        return False
    return new in TRANSITIONS[type(new)].get(old, frozenset())


def begin(
    entity: Stateful,
    status: StrEnum,
    changes: list[Change],
    now: datetime | None = None,
    *,
    reason: str = "",
    actor: str = "",
) -> Change:
    """Gives a new entity its first status (the only other write of ``.status``)."""
    kind = _KIND[type(status)]
    if INITIAL[kind] != status:
        raise IllegalTransition(f"a new {kind} starts {INITIAL[kind]}, not {status}")
    now = now or utcnow()
    entity.status = status
    if hasattr(entity, "timeline"):
        entity.timeline = {status.value: now.isoformat()}
    change = Change(
        kind, entity.id, "", status.value, now, getattr(entity, "session_id", None), reason, actor
    )
    changes.append(change)
    return change


#: Start-up phases stamped in timelines besides statuses (lower case: statuses are upper).
#: Sessions: ``network``; kernels: ``created``, ``started`` (the engine's times),
#: ``entrypoint`` (set up) and ``ready`` (every peer reachable), from their agents.
PHASES = ("pulled", "network", "created", "started", "entrypoint", "ready")


def mark(entity: Stateful, times: Mapping[str, str | None]) -> None:
    """Stamps start-up phases (phase -> ISO time) in the entity's timeline; unknown phases
    and missing times are ignored (an agent's report is not trusted to be complete)."""
    known = {p: t for p, t in times.items() if p in PHASES and t}
    timeline = getattr(entity, "timeline", None)
    if known and isinstance(timeline, dict):
        entity.timeline = {**timeline, **known}  # type: ignore[attr-defined]


def transition(
    entity: Stateful,
    to: StrEnum,
    changes: list[Change],
    now: datetime | None = None,
    *,
    reason: str = "",
    actor: str = "",
) -> Change | None:
    """Moves ``entity`` to ``to``; None when it already is there (a repeated report).

    Raises :class:`IllegalTransition` for a move the table does not allow. Stamps the time in
    the entity's ``timeline`` (status -> ISO time) when it has one, and ``started_at`` /
    ``terminated_at`` of sessions; appends the change to ``changes`` for publishing.
    ``reason`` and ``actor`` travel with the change: the manager writes each session's
    changes to its event list in the transaction that made them.
    """
    enum = type(to)
    old = enum(entity.status)
    if old == to:
        return None
    if not can_move(old, to):
        raise IllegalTransition(f"{_KIND[enum]} {entity.id}: {old} -> {to} is not allowed")
    now = now or utcnow()
    entity.status = to
    timeline = getattr(entity, "timeline", None)
    if isinstance(timeline, dict):
        entity.timeline = {**timeline, to.value: now.isoformat()}  # type: ignore[attr-defined]
    # (``started_at`` is the first start: a restart's RUNNING again keeps it, a re-placed
    # session's too; the timeline
    # holds the latest time of each status)
    if (
        enum is S
        and to in _STAMPS
        and not (to == S.RUNNING and getattr(entity, "started_at", None))
    ):
        setattr(entity, _STAMPS[to], now)
    change = Change(
        _KIND[enum],
        entity.id,
        old.value,
        to.value,
        now,
        getattr(entity, "session_id", None),
        reason,
        actor,
    )
    changes.append(change)
    return change
