"""Sessions stored at any status through the real write path, so that each step of
``troupe.manager.life`` can be tested on its own, with no ASGI app and no Docker.

:func:`make_life` gives a :class:`Life` over an in-memory SQLite store with the migrated
schema (agents optional: a step that asks none needs none). :func:`stored` writes a session
and its kernels as admission does (``new_session``: ``begin`` PENDING), then walks them along
the lifecycle table (``transition``, one move at a time) to the statuses asked for, in one
transaction whose changes are published on the store's bus, as the manager's steps do.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.pool import StaticPool

from troupe.api.agent import AgentBackend
from troupe.api.lifecycle import (
    KERNEL_MOVES,
    SESSION_FINAL,
    SESSION_HAS_KERNELS,
    KernelStatus,
    SessionStatus,
    transition,
    utcnow,
)
from troupe.api.models import Resources, SessionCreate, SessionType
from troupe.cluster.contract import ClusterMode
from troupe.manager.auth import create_user
from troupe.manager.changes import ChangeBus
from troupe.manager.config import ServerConfig
from troupe.manager.fleet import Fleet
from troupe.manager.life.admission import new_session
from troupe.manager.life.context import Life
from troupe.manager.logs import LogStore
from troupe.manager.store.db import migrate
from troupe.manager.store.models import Session, User
from troupe.manager.store.unit import Store, changes_of

S, K = SessionStatus, KernelStatus
IMAGE = "troupe/base:0.1.0"
#: The way a session goes when all is well; CANCELLED is reached from PENDING only.
MAIN_LINE = (S.PENDING, S.SCHEDULED, S.PREPARING, S.RUNNING, S.TERMINATING)


async def memory_store() -> Store:
    """A store over a fresh in-memory SQLite database, migrated to the newest schema."""
    engine = create_async_engine(
        "sqlite+aiosqlite://", poolclass=StaticPool, json_deserializer=orjson.loads
    )

    @event.listens_for(engine.sync_engine, "connect")
    def _foreign_keys(dbapi_conn, _record):  # type: ignore[no-untyped-def]
        dbapi_conn.execute("PRAGMA foreign_keys=ON")

    await migrate(engine)
    return Store(engine, ChangeBus())


def _no_remote(agent_id: str, address: str, token: str) -> AgentBackend:
    raise AssertionError(f"no agent of another host in this test ({agent_id})")


async def make_life(
    tmp: Path, agents: Mapping[str, AgentBackend] | None = None, **config: Any
) -> Life:
    """A :class:`Life` as the registry makes it, over :func:`memory_store`; ``agents`` are
    started and recorded (as ALIVE agents) when given."""
    cfg = ServerConfig(data_dir=tmp / "data", config_dir=tmp / "config", **config)
    store = await memory_store()
    fleet = Fleet(cfg, store, dict(agents or {}), _no_remote)
    if agents:
        await fleet.start()
    return Life(cfg, store, fleet, LogStore(cfg.logs_dir))


async def close(life: Life) -> None:
    await life.fleet.stop()
    await life.store.engine.dispose()


async def add_user(store: Store, name: str = "alice", admin: bool = False) -> User:
    async with store() as db:
        user, _ = await create_user(db, name, admin)
        await db.commit()
        return user


def _path(start: Any, to: Any, moves: Mapping[Any, frozenset[Any]]) -> list[Any]:
    """The shortest walk of legal moves from ``start`` to ``to`` (``start`` excluded)."""
    paths: dict[Any, list[Any]] = {start: []}
    todo = [start]
    while todo:
        here = todo.pop(0)
        for there in sorted(moves[here]):
            if there not in paths:
                paths[there] = [*paths[here], there]
                todo.append(there)
    if to not in paths:
        raise ValueError(f"{to} cannot be reached from {start}")
    return paths[to]


def session_path(status: SessionStatus) -> list[SessionStatus]:
    """The statuses a session passes on its way to ``status`` (PENDING, its first, excluded):
    the main line, and a final status after TERMINATING (CANCELLED straight from PENDING)."""
    if status == S.CANCELLED:
        return [S.CANCELLED]
    if status == S.RESTARTING:  # off the main line: a kernel failed while RUNNING
        return [*MAIN_LINE[1:4], S.RESTARTING]
    line = [*MAIN_LINE[1:], status] if status in SESSION_FINAL else list(MAIN_LINE[1:])
    return line[: line.index(status) + 1] if status != S.PENDING else []


def default_kernel_status(status: SessionStatus) -> KernelStatus:
    """Where kernels are when their session is at ``status`` and nothing went wrong."""
    if status == S.RESTARTING:
        return K.RESTARTING
    if status in SESSION_HAS_KERNELS:
        return K.RUNNING
    return K.TERMINATED if status in SESSION_FINAL else K.PENDING


async def stored(
    store: Store,
    owner: User,
    status: SessionStatus,
    *,
    name: str = "s",
    size: int = 1,
    kernels: KernelStatus | Sequence[KernelStatus] | None = None,
    agents: str | Sequence[str] = "a1",
    type: SessionType = SessionType.INTERACTIVE,
    ending: SessionStatus | None = None,
    created_at: datetime | None = None,
    **fields: Any,
) -> Session:
    """Stores a session of ``size`` kernels at ``status``, its kernels at ``kernels`` (one
    status for all, or one per kernel in rank order; default: where they would be), placed on
    ``agents`` (one for all, or one per kernel) once the session is SCHEDULED. ``ending``: the
    final status a TERMINATING session will reach; ``fields``: other columns of the session
    (e.g. ``max_pending_seconds``, ``status_info``). Returns the stored session (detached)."""
    req = SessionCreate(
        name=name,
        image=IMAGE,
        cluster_size=size,
        cluster_mode=ClusterMode.MULTI_NODE if size > 1 else ClusterMode.SINGLE_NODE,
        resources=Resources(cpu=0.5, mem=256 * 1024**2),
        type=type,
        startup_command="true" if type == SessionType.BATCH else None,
    )
    per_kernel = [kernels] * size if kernels is None or isinstance(kernels, str) else kernels
    places = [agents] * size if isinstance(agents, str) else list(agents)
    assert len(per_kernel) == size and len(places) == size

    async def step(db: AsyncSession) -> Session:
        changes = changes_of(db)
        s = new_session(str(uuid.uuid4()), owner, req, {}, changes)
        if created_at is not None:
            s.created_at = created_at
        for key, value in fields.items():
            setattr(s, key, value)
        now = utcnow()
        for to in session_path(status):
            if to == S.SCHEDULED:
                for k, agent in zip(s.kernels, places, strict=True):
                    k.agent_id = agent
            if to == S.TERMINATING:
                s.ending = ending or S.TERMINATED
            transition(s, to, changes, now)
        for k, want in zip(s.kernels, per_kernel, strict=True):
            target = want or default_kernel_status(status)
            # (a kernel that restarts was running first: a kernel's failure, not a lost agent)
            via = [K.RUNNING, K.RESTARTING] if target == K.RESTARTING else None
            walk = via or (_path(K.PENDING, target, KERNEL_MOVES) if target != K.PENDING else [])
            for to in walk:
                if to == K.RUNNING:
                    k.container_id, k.ip = f"c-{k.id[:8]}", f"10.99.0.{k.rank + 2}"
                transition(k, to, changes, now)
        db.add(s)
        return s

    return await store.write(step)
