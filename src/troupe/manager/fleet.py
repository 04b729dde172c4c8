"""The agents: in-process and remote ones, their rows, heartbeats and leftovers.

The registry decides about sessions; the fleet knows which agents exist, what they can give
(:meth:`Fleet.states`), whether they are alive, and removes what agents hold for sessions the
database knows to be over.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from troupe.agent.base import AgentBackend, AgentError, ExitHandler
from troupe.agent.client import RemoteAgent
from troupe.api.agent import AgentCapacity
from troupe.api.models import FINAL_STATUSES, SessionStatus
from troupe.manager.config import ServerConfig
from troupe.manager.scheduler import AgentState
from troupe.manager.store.models import Agent, Kernel, Session, utcnow

log = logging.getLogger(__name__)
S = SessionStatus
#: Statuses whose kernels hold resources on their agents.
ALLOCATED = (S.SCHEDULED, S.PREPARING, S.RUNNING, S.TERMINATING)
#: fail(session id, status info): ends a session whose agent was lost.
FailSession = Callable[[str, dict[str, Any]], Coroutine[Any, Any, None]]


class Fleet:
    def __init__(
        self,
        config: ServerConfig,
        db: async_sessionmaker[AsyncSession],
        local: dict[str, AgentBackend],
        fail_session: FailSession,
        wake: Callable[[], None],
        spawn: Callable[[Coroutine[Any, Any, None]], None],
    ) -> None:
        self.config = config
        self.db = db
        #: agent id -> backend; remote agents join when they register
        self.agents: dict[str, AgentBackend] = dict(local)
        self._fail_session = fail_session
        self._wake = wake
        #: runs a coroutine in the background; the registry owns (and cancels) those tasks
        self._spawn = spawn
        #: LOST agents: skipped when removing sessions (the sweep cleans up once they are back)
        self.lost: set[str] = set()

    def __getitem__(self, agent_id: str) -> AgentBackend:
        return self.agents[agent_id]

    def get(self, agent_id: str) -> AgentBackend | None:
        return self.agents.get(agent_id)

    async def start(self, on_exit: ExitHandler) -> None:
        """Starts the in-process agents and reconnects to remote ones known from before."""
        for agent_id, agent in self.agents.items():
            await agent.start(on_exit=on_exit)
            await self._record(agent_id, await agent.capacity(), None)
        async with self.db() as db:
            for row in (await db.execute(select(Agent))).scalars():
                if row.address and row.id not in self.agents:
                    token = self.config.resolve_agent_token()
                    self.agents[row.id] = RemoteAgent(row.id, row.address, token)
                    if row.status == "LOST":
                        self.lost.add(row.id)

    async def stop(self) -> None:
        for agent in self.agents.values():
            await agent.close()

    async def any_has_image(self, agent_ids: list[str], image: str) -> bool:
        for agent_id in agent_ids:
            agent = self.agents.get(agent_id)
            if agent is None:
                continue
            try:
                if await agent.has_image(image):
                    return True
            except AgentError as e:
                log.info("image check skips %s: %s", agent_id, e)
        return False

    async def running_kernels(self) -> tuple[dict[str, dict[str, str]], set[str]]:
        """(session id -> hostname -> container id of running kernels, unreachable agents)."""
        running: dict[str, dict[str, str]] = defaultdict(dict)
        unreachable: set[str] = set()
        for agent_id, agent in self.agents.items():
            try:
                kernels = await agent.list_kernels()
            except AgentError:
                unreachable.add(agent_id)  # its heartbeat time-out decides
                continue
            for k in kernels:
                if k["state"] == "running":
                    running[k["session_id"]][k["hostname"]] = k["container_id"]
        return running, unreachable

    async def states(self, db: AsyncSession) -> list[AgentState]:
        agents = list((await db.execute(select(Agent).where(Agent.status == "ALIVE"))).scalars())
        used: dict[str, list[float]] = defaultdict(lambda: [0.0, 0, 0])
        rows = await db.execute(
            select(Kernel.agent_id, Session.cpu, Session.mem, Session.gpu)
            .join(Session, Kernel.session_id == Session.id)
            .where(Session.status.in_([s.value for s in ALLOCATED]), Kernel.agent_id.is_not(None))
        )
        for agent_id, cpu, mem, gpu in rows:
            u = used[agent_id or ""]
            u[0] += cpu
            u[1] += mem
            u[2] += gpu
        return [
            AgentState(
                id=a.id,
                group=a.group,
                cpu=a.cpu,
                mem=a.mem,
                gpu=a.gpu,
                cpu_used=used[a.id][0],
                mem_used=int(used[a.id][1]),
                gpu_used=int(used[a.id][2]),
            )
            for a in agents
        ]

    async def _record(self, agent_id: str, cap: AgentCapacity, address: str | None) -> None:
        """Stores what an agent reported; ``address`` None marks an in-process agent."""
        async with self.db() as db:
            row = await db.get(Agent, agent_id)
            if row is None:
                row = Agent(id=agent_id, name=cap.name)
                db.add(row)
            row.address, row.group, row.cpu, row.mem, row.gpu = (
                address,
                cap.group,
                cap.cpu,
                cap.mem,
                cap.gpu,
            )
            row.swarm_manager, row.data_marker, row.underlay_mtu = (
                cap.swarm_manager,
                cap.data_marker,
                cap.underlay_mtu,
            )
            row.status, row.last_heartbeat = "ALIVE", utcnow()
            await db.commit()

    async def remove_session(self, session_id: str, agent_ids: Iterable[str]) -> dict[str, str]:
        """Removes a session's kernels on ``agent_ids``, then its networks on every agent.

        Networks go last: an overlay created through one agent can only be removed once the
        kernels on the other agents have left it. Unreachable agents are skipped; the orphan
        sweep removes what they still hold once they are back. Returns the kernels' logs.
        """
        saved: dict[str, str] = {}

        async def kernels(agent: AgentBackend) -> None:
            try:
                saved.update(await agent.remove_kernels(session_id))
            except Exception as e:
                log.warning("removing kernels of %s on %s: %s", session_id, agent.name, e)

        async def networks(agent: AgentBackend) -> None:
            try:
                await agent.remove_session_networks(session_id)
            except Exception as e:
                log.warning("removing networks of %s on %s: %s", session_id, agent.name, e)

        reachable = {i: a for i, a in self.agents.items() if i not in self.lost}
        holders = [reachable[i] for i in agent_ids if i in reachable]
        await asyncio.gather(*(kernels(a) for a in holders))
        await asyncio.gather(*(networks(a) for a in reachable.values()))
        return saved

    async def sweep_orphans(self) -> None:
        """Removes containers and networks of sessions this manager knows to be over."""
        held: dict[str, set[str]] = defaultdict(set)  # session id -> agents holding something
        for agent_id, agent in list(self.agents.items()):
            if agent_id in self.lost:
                continue
            try:
                ids = {k["session_id"] for k in await agent.list_kernels()}
                ids |= await agent.list_session_ids_with_networks()
            except AgentError as e:
                log.info("orphan sweep skips %s: %s", agent_id, e)
                continue
            for sid in ids:
                held[sid].add(agent_id)
        if not held:
            return
        async with self.db() as db:
            rows = await db.execute(
                select(Session.id).where(
                    Session.id.in_(list(held)),
                    Session.status.in_([s.value for s in FINAL_STATUSES]),
                )
            )
            over = list(rows.scalars())
        for sid in over:
            log.info("removing leftovers of finished session %s", sid)
            await self.remove_session(sid, held[sid])

    # -- agents on other hosts ---------------------------------------------------------
    async def register_remote(self, cap: AgentCapacity, address: str) -> None:
        """An agent (re)joined: record it, connect to it, and reconcile what it holds."""
        old = self.agents.get(cap.name)
        if not isinstance(old, RemoteAgent) or old.address != address:
            if old is not None:
                await old.close()
            self.agents[cap.name] = RemoteAgent(
                cap.name, address, self.config.resolve_agent_token()
            )
        await self._record(cap.name, cap, address)
        self.lost.discard(cap.name)
        self._spawn(self.sweep_orphans())
        self._wake()

    async def heartbeat(self, name: str) -> bool:
        """False if the agent is unknown here (it should register again)."""
        if name not in self.agents:
            return False
        async with self.db() as db:
            row = await db.get(Agent, name)
            if row is None:
                return False
            back = row.status != "ALIVE"
            self.lost.discard(name)
            row.status, row.last_heartbeat = "ALIVE", utcnow()
            await db.commit()
        if back:
            log.warning("agent %s is back", name)
            self._spawn(self.sweep_orphans())
            self._wake()
        return True

    async def check(self) -> None:
        """Marks silent agents LOST and fails the sessions with kernels on them."""
        cutoff = self.config.agent_timeout
        now = utcnow()
        lost: list[str] = []
        async with self.db() as db:
            for row in (await db.execute(select(Agent))).scalars():
                if row.address is None:  # in-process: alive as long as we are
                    row.last_heartbeat = now
                elif (
                    row.status == "ALIVE"
                    and row.last_heartbeat is not None
                    and (now - row.last_heartbeat).total_seconds() > cutoff
                ):
                    row.status = "LOST"
                    lost.append(row.id)
                    self.lost.add(row.id)
            await db.commit()
            if not lost:
                return
            rows = await db.execute(
                select(Kernel.session_id, Kernel.hostname, Kernel.agent_id)
                .join(Session, Kernel.session_id == Session.id)
                .where(Kernel.agent_id.in_(lost), Session.status.in_([s.value for s in ALLOCATED]))
                .order_by(Kernel.rank)
            )
            victims: dict[str, tuple[str, str]] = {}
            for sid, host, agent_id in rows:
                victims.setdefault(sid, (host, agent_id or ""))
        for agent_id in lost:
            log.warning("agent %s lost (no heartbeat for %g s)", agent_id, cutoff)
        for sid, (host, agent_id) in victims.items():
            self._spawn(
                self._fail_session(
                    sid,
                    {
                        "reason": "agent lost",
                        "agent": agent_id,
                        "kernel": host,
                        "message": f"agent {agent_id} sent no heartbeat for {cutoff:g} s",
                    },
                )
            )
