"""The manager's kept scheduler backlog (troupe.manager.life.placing.Placer) decides as a
fresh full pass over the database would, through random sequences of what happens to a
manager: sessions created, ended, destroyed while PENDING, timed out, placed again after a
lost agent; agents registering, re-registering with other capacity, going LOST, coming back,
removed; a failed write (rolled back) and a manager restart (a new Placer) on the way.

After each change, the pass of the kept backlog must give the placements (and each waiting
session's why-pending report) that :func:`troupe.manager.scheduler_backlog.schedule` gives
over the state loaded the way the manager loaded it before it kept one."""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from tests.inprocess.conftest import Harness
from tests.inprocess.fake_agent import FakeAgent
from tests.inprocess.helpers import get_when, running
from tests.lifehelpers import _path as path
from tests.lifehelpers import add_user, memory_store
from troupe.api.agent import AgentBackend, AgentCapacity
from troupe.api.lifecycle import KERNEL_MOVES, KernelStatus, SessionStatus, transition, utcnow
from troupe.api.models import GpuInfo, SessionCreate
from troupe.manager.config import ServerConfig
from troupe.manager.events import AgentLost
from troupe.manager.fleet import Fleet
from troupe.manager.life import Life, replacing, teardown
from troupe.manager.life.admission import lost_states, new_session
from troupe.manager.life.lost import victims_of
from troupe.manager.life.pending_feed import kernel_parts, pending_since
from troupe.manager.life.placing import Placer
from troupe.manager.logs import LogStore
from troupe.manager.roles import request_of
from troupe.manager.scheduler import Decision
from troupe.manager.scheduler_backlog import schedule
from troupe.manager.store.models import Agent, Session, User
from troupe.manager.store.unit import changes_of

S, K = SessionStatus, KernelStatus
T = TypeVar("T")
GIB = 1024**3
GROUPS = ("default", "g2")


@pytest.fixture
async def life(tmp_path: Path) -> AsyncIterator[Life]:
    cfg = ServerConfig(data_dir=tmp_path / "data", config_dir=tmp_path / "config")
    store = await memory_store()

    def remote(name: str, address: str, token: str) -> AgentBackend:
        return FakeAgent(name, address=address)

    fleet = Fleet(cfg, store, {}, remote)
    made = Life(cfg, store, fleet, LogStore(cfg.logs_dir))
    try:
        yield made
    finally:
        await fleet.stop()
        await store.engine.dispose()


async def expected(life: Life) -> tuple[Decision, set[str]]:
    """A full pass over the database as the manager made it before it kept a backlog (every
    PENDING session and agent loaded as rows): the decision, and the sessions it cancels."""
    now = utcnow()
    async with life.store() as db:
        pending = list(
            (await db.execute(select(Session).where(Session.status == S.PENDING))).scalars()
        )
        late = {
            s.id
            for s in pending
            if s.max_pending_seconds
            and (now - pending_since(s.created_at, s.timeline, s.restarts)).total_seconds()
            >= s.max_pending_seconds
        }
        requests = [
            request_of(
                s.id,
                s.group,
                s.cluster_mode,
                kernel_parts(s.kernels),
                priority=s.priority,
                order=s.created_at.timestamp(),
            )
            for s in pending
            if s.id not in late
        ]
        decision = schedule(requests, await life.fleet.states(db), await lost_states(life, db))
    return decision, late


async def check(life: Life, placer: Placer) -> list[str]:
    """Runs the kept backlog's pass and compares it with the full one; the placed sessions."""
    want, late = await expected(life)
    result = await placer.place()
    assert sorted(result.placed) == sorted(want.placements)
    async with life.store() as db:
        rows = {
            s.id: s
            for s in (
                await db.execute(select(Session).where(Session.id.in_([*want.placements, *late])))
            ).scalars()
        }
        for sid, agents in want.placements.items():
            s = rows[sid]
            assert s.status == S.SCHEDULED and [k.agent_id for k in s.kernels] == agents
        assert all(rows[sid].status == S.CANCELLED for sid in late)
        waiting = (await db.execute(select(Session).where(Session.status == S.PENDING))).scalars()
        for s in waiting:
            report = {k.hostname: want.waiting[s.id] for k in s.kernels}
            assert s.status_info.get("pending") == report, s.id
    return result.placed


def capacity(rng: random.Random, name: str) -> AgentCapacity:
    gpus = rng.choice([0, 0, 2])
    return AgentCapacity(
        name=name,
        cpu=rng.choice([2.0, 4.0, 8.0]),
        mem=rng.choice([4, 8, 16]) * GIB,
        gpu=gpus,
        group=rng.choice(GROUPS),
        gpus=[GpuInfo(index=i, uuid=f"GPU-{name}-{i}-{uuid.uuid4()}") for i in range(gpus)],
    )


def create_request(rng: random.Random, n: int) -> SessionCreate:
    body: dict[str, Any] = {
        "name": f"s{n}",
        "image": "troupe/base:0.1.0",
        "group": rng.choice(GROUPS),
        "priority": rng.choice([0, 0, 0, 5]),
        "resources": {
            "cpu": rng.choice([0.5, 1.0, 2.0, 3.0]),
            "mem": rng.choice([1, 2, 6]) * GIB,
            "gpu": rng.choice([0, 0, 0, 1]),
        },
        "max_restarts": 1,
    }
    kind = rng.random()
    if kind < 0.2:
        body["roles"] = [
            {"name": "worker", "replicas": rng.randint(1, 3), "resources": {"cpu": 0.5}}
        ]
        body["cluster_mode"] = rng.choice(["single-node", "multi-node"])
    elif kind < 0.5:
        body["cluster_size"] = rng.randint(2, 4)
        body["cluster_mode"] = rng.choice(["single-node", "multi-node"])
    if rng.random() < 0.05:
        body["max_pending_seconds"] = 0.001  # out at the next pass
    return SessionCreate.model_validate(body)


async def write(life: Life, step: Callable[[AsyncSession], Awaitable[T]]) -> T:
    return await life.store.write(step)


class World:
    """Random things happening to the manager, through its own steps where they exist."""

    def __init__(self, life: Life, owner: User, rng: random.Random) -> None:
        self.life, self.owner, self.rng = life, owner, rng
        #: the manager's placer, told of re-registrations as the registry tells it
        self.placer = Placer(life)
        self.n = 0
        self.agents: dict[str, AgentCapacity] = {}

    async def sessions(self, *statuses: SessionStatus) -> list[str]:
        async with self.life.store() as db:
            rows = await db.execute(select(Session.id).where(Session.status.in_(statuses)))
            return sorted(rows.scalars())

    async def create(self) -> None:
        self.n += 1
        req = create_request(self.rng, self.n)

        async def step(db: AsyncSession) -> None:
            s = new_session(str(uuid.uuid4()), self.owner, req, {}, changes_of(db))
            s.created_at = s.created_at - timedelta(seconds=self.rng.random())  # arrival order
            db.add(s)

        await write(self.life, step)

    async def run_placed(self) -> None:
        """A placed session goes on to RUNNING (what preparing does, without agents)."""
        for sid in await self.sessions(S.SCHEDULED):

            async def step(db: AsyncSession, sid: str = sid) -> None:
                s = await db.get(Session, sid)
                assert s is not None
                changes = changes_of(db)
                transition(s, S.PREPARING, changes)
                transition(s, S.RUNNING, changes)
                for k in s.kernels:
                    for to in path(K.PENDING, K.RUNNING, KERNEL_MOVES):
                        transition(k, to, changes)

            await write(self.life, step)

    async def end(self, statuses: tuple[SessionStatus, ...]) -> None:
        ids = await self.sessions(*statuses)
        if ids:

            async def no_preparer(sid: str) -> None:
                return None

            sid = self.rng.choice(ids)
            await teardown.teardown(self.life, sid, S.TERMINATED, {"reason": "x"}, no_preparer)

    async def join(self) -> None:
        name = f"h{self.rng.randint(1, 12)}"
        cap = capacity(self.rng, name)
        try:
            await self.life.fleet.register_remote(cap, f"10.0.0.{len(self.agents) + 2}:6000")
        except Exception:  # a live agent's name (with a credential): not taken over
            return
        self.agents[name] = cap
        self.life.fleet.events.get_nowait()  # AgentBack: as the registry does
        self.placer.touch_agent(name)

    async def lose(self) -> None:
        alive = [a for a in self.agents if a not in self.life.fleet.lost]
        if not alive:
            return
        name = self.rng.choice(alive)

        async def step(db: AsyncSession) -> None:
            await db.execute(
                update(Agent)
                .where(Agent.id == name)
                .values(last_heartbeat=utcnow() - timedelta(hours=1))
            )

        await write(self.life, step)
        await self.life.fleet.check()
        while not self.life.fleet.events.empty():
            event = self.life.fleet.events.get_nowait()
            assert isinstance(event, AgentLost)
            for sid, host in sorted((await victims_of(self.life, event.agent_id)).items()):
                judged = await replacing.begin(self.life, sid, event.agent_id, host, "lost")
                if judged.verdict == replacing.Verdict.REPLACE:
                    await replacing.place_again(self.life, sid)
                elif judged.verdict == replacing.Verdict.FAIL:
                    await self.end_one(sid)

    async def end_one(self, sid: str) -> None:
        async def no_preparer(sid: str) -> None:
            return None

        await teardown.teardown(self.life, sid, S.ERROR, {"reason": "agent lost"}, no_preparer)

    async def back(self) -> None:
        lost = sorted(self.life.fleet.lost)
        if lost:
            name = self.rng.choice(lost)
            await self.life.fleet.heartbeat(name)
            while not self.life.fleet.events.empty():
                self.life.fleet.events.get_nowait()

    async def remove(self) -> None:
        lost = sorted(self.life.fleet.lost)
        if lost:
            name = self.rng.choice(lost)
            await self.life.fleet.remove(name)
            del self.agents[name]


async def failing_write(life: Life, monkeypatch: pytest.MonkeyPatch) -> None:
    """The next write of the pass rolls back and fails."""
    real = life.store.write

    async def once(step: Callable[[AsyncSession], Awaitable[T]], attempts: int = 8) -> T:
        monkeypatch.setattr(life.store, "write", real)
        async with life.store() as db:
            await step(db)
            await db.rollback()
        raise RuntimeError("injected failure")

    monkeypatch.setattr(life.store, "write", once)


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_the_kept_backlog_decides_as_a_full_pass(
    life: Life, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    owner = await add_user(life.store, admin=True)
    world = World(life, owner, rng)
    placer = world.placer
    placer.listen()
    placed = failed = 0
    for _ in range(4):
        await world.join()
    for _ in range(160):
        op = rng.random()
        if op < 0.40:
            for _ in range(rng.randint(1, 4)):
                await world.create()
        elif op < 0.55:
            await world.end((S.RUNNING,))
        elif op < 0.62:
            await world.end((S.PENDING,))
        elif op < 0.70:
            await world.join()
        elif op < 0.77:
            await world.lose()
        elif op < 0.84:
            await world.back()
        elif op < 0.87:
            await world.remove()
        elif op < 0.92:  # a pass that would place sessions fails to write them
            await world.end((S.RUNNING,))
            await world.create()
            if (await expected(life))[0].placements:
                await failing_write(life, monkeypatch)
                with pytest.raises(RuntimeError, match="injected"):
                    await placer.place()
                failed += 1
        elif op < 0.95:  # the manager restarts
            placer.close()
            placer = world.placer = Placer(life)
            placer.listen()
        placed += len(await check(life, placer))
        await world.run_placed()
    placer.close()
    assert placed > 20 and failed  # (the sequences place sessions, not only wait)


async def test_the_manager_keeps_one_backlog_and_builds_it_again_at_restart(
    manager: Harness,
) -> None:
    """The registry's passes share one backlog: a waiting session is placed once a running
    one ends, with no full pass in between; a restarted manager builds it from the database."""
    registry = manager.app.state.registry if manager.app is not None else None
    assert registry is not None
    await running(manager, "a", resources={"cpu": 3})
    await manager.create("b", resources={"cpu": 3})
    s = await get_when(manager, "b", lambda s: bool(s["status_info"].get("pending")))
    assert s["status_info"]["pending"]["main1"][0].startswith("agent local: cpu: needs 3 cores")
    kept = registry.placer.backlog
    assert kept is not None
    r = await manager.client.delete("/sessions/a")
    assert r.status_code == 200, r.text
    assert (await manager.wait("b"))["status"] == "RUNNING"
    assert registry.placer.backlog is kept
    await manager.create("c", resources={"cpu": 3})
    await manager.restart()
    s = await get_when(manager, "c", lambda s: bool(s["status_info"].get("pending")))
    assert s["status"] == "PENDING", s
    r = await manager.client.delete("/sessions/b")
    assert r.status_code == 200, r.text
    assert (await manager.wait("c"))["status"] == "RUNNING"
