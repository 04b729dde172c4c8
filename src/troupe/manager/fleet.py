"""The agents: in-process and remote ones, their rows, heartbeats and leftovers.

The fleet knows which agents exist, what they can give (:meth:`Fleet.states`) and whether
they are alive. It decides nothing about sessions: agent loss and return and kernel exits go
into :attr:`Fleet.events`, which the registry reads in order.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.agent import AgentBackend, AgentCapacity, KernelExit, KernelState
from troupe.api.errors import Conflict, NotFound, TroupeError
from troupe.api.lifecycle import (
    SESSION_ALLOCATED,
    SESSION_FINAL,
    AgentStatus,
    begin,
    transition,
    utcnow,
)
from troupe.manager.auth import hash_key
from troupe.manager.config import ServerConfig
from troupe.manager.events import AgentBack, AgentLost, FleetEvent, KernelExited
from troupe.manager.pauses import PauseClock
from troupe.manager.pulls import Pulls
from troupe.manager.registries import RegistryBook
from troupe.manager.scheduler import AgentState
from troupe.manager.store.models import Agent, Kernel, Session
from troupe.manager.store.unit import Store, changes_of

log = logging.getLogger(__name__)
#: Makes the manager's handle on an agent of another host: (name, address, token) -> backend.
RemoteFactory = Callable[[str, str, str], AgentBackend]


def offered_gpus(agent: Agent) -> list[str]:
    """UUIDs of the GPUs an agent offers, in index order."""
    return [str(g["uuid"]) for g in agent.gpus or [] if isinstance(g, dict) and g.get("uuid")]


class Fleet:
    def __init__(
        self,
        config: ServerConfig,
        store: Store,
        local: Mapping[str, AgentBackend],
        remote: RemoteFactory,
    ) -> None:
        self.config = config
        self.store = store
        #: agent id -> backend; remote agents join when they register
        self.agents: dict[str, AgentBackend] = dict(local)
        self._local = set(local)
        self._remote = remote
        #: LOST agents: skipped when removing sessions (the sweep cleans up once they are back)
        self.lost: set[str] = set()
        #: the manager's own pauses, not counted as the agents' silence (kept as long as an
        #: ALIVE agent's silence can reach: its time-out and two checks' gaps)
        self.pauses = PauseClock(config.agent_timeout + 2 * self.check_within)
        self.events: asyncio.Queue[FleetEvent] = asyncio.Queue()
        #: agent of another host -> SHA-256 of its credential (as stored in its row)
        self._credentials: dict[str, str] = {}
        #: registrations and removals, one at a time (row and handle change together)
        self._joining = asyncio.Lock()
        #: image pulls on the agents, one per agent and image
        self.pulls = Pulls(
            self.__getitem__, RegistryBook(config.registries_file), config.pull_timeout
        )

    def __getitem__(self, agent_id: str) -> AgentBackend:
        agent = self.agents.get(agent_id)
        if agent is None:
            raise NotFound.of("agent", agent_id)
        return agent

    def get(self, agent_id: str) -> AgentBackend | None:
        return self.agents.get(agent_id)

    def is_local(self, agent_id: str) -> bool:
        """Whether ``agent_id`` is an in-process agent (it lives as long as the manager)."""
        return agent_id in self._local

    def is_remote(self, agent_id: str) -> bool:
        """Whether ``agent_id`` is a known agent of another host (not an in-process one)."""
        return agent_id in self.agents and agent_id not in self._local

    def credential_ok(self, agent_id: str, credential: str) -> bool:
        """Whether ``credential`` is the one issued to agent ``agent_id`` at its last
        registration (constant-time comparison of the hashes)."""
        stored = self._credentials.get(agent_id)
        if stored is None:
            return False
        return hmac.compare_digest(hash_key(credential).encode(), stored.encode())

    def reachable(self) -> dict[str, AgentBackend]:
        return {i: a for i, a in self.agents.items() if i not in self.lost}

    async def start(self) -> None:
        """Starts the in-process agents and reconnects to remote ones known from before."""
        for agent_id, agent in self.agents.items():

            async def on_exit(ev: KernelExit, agent_id: str = agent_id) -> None:
                self.report_exit(agent_id, ev)

            await agent.start(on_exit=on_exit)
            await self._record(agent_id, await agent.capacity(), None)
        async with self.store() as db:
            for row in (await db.execute(select(Agent))).scalars():
                if row.address and row.id not in self.agents:
                    token = self.config.resolve_agent_token()
                    self.agents[row.id] = self._remote(row.id, row.address, token)
                    if row.credential_hash:
                        self._credentials[row.id] = row.credential_hash
                    if row.status == AgentStatus.LOST:
                        self.lost.add(row.id)

    async def stop(self) -> None:
        for agent in self.agents.values():
            await agent.close()

    def report_exit(self, agent_id: str, ev: KernelExit) -> None:
        self.events.put_nowait(KernelExited(agent_id, ev))

    async def any_has_image(self, agent_ids: Iterable[str], image: str) -> bool:
        for agent_id in agent_ids:
            agent = self.agents.get(agent_id)
            if agent is None or agent_id in self.lost:
                continue
            try:
                if await agent.has_image(image):
                    return True
            except TroupeError as e:
                log.info("image check skips %s: %s", agent_id, e)
        return False

    async def kernels(self) -> tuple[dict[str, list[KernelState]], set[str]]:
        """(agent id -> the troupe containers it holds, agents that could not be asked)."""
        held: dict[str, list[KernelState]] = {}
        unreachable: set[str] = set()
        for agent_id, agent in self.reachable().items():
            try:
                held[agent_id] = await agent.list_kernels()
            except TroupeError:
                unreachable.add(agent_id)  # its heartbeat time-out decides
        return held, unreachable | self.lost

    async def states(
        self, db: AsyncSession, ids: Collection[str] | None = None
    ) -> list[AgentState]:
        """Capacity and use of every ALIVE agent (of those in ``ids`` if given), counted from
        the database (kernels of sessions that hold resources), so nothing is counted twice.
        GPUs are counted by device: an offered GPU is free unless such a kernel holds its
        UUID."""
        alive = select(Agent).where(Agent.status == AgentStatus.ALIVE)
        holding = Kernel.agent_id.is_not(None)
        if ids is not None:
            alive = alive.where(Agent.id.in_(sorted(ids)))
            holding = Kernel.agent_id.in_(sorted(ids))
        agents = (await db.execute(alive)).all()
        used: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
        held: dict[str, set[str]] = defaultdict(set)
        rows = await db.execute(
            select(Kernel.agent_id, Kernel.gpus, Kernel.cpu, Kernel.mem)
            .join(Session, Kernel.session_id == Session.id)
            .where(Session.status.in_(SESSION_ALLOCATED), holding)
        )
        for agent_id, gpus, cpu, mem in rows:
            u = used[agent_id or ""]
            u[0] += cpu
            u[1] += mem
            held[agent_id or ""].update(gpus or [])
        out = []
        for (a,) in agents:
            offered = offered_gpus(a)
            free = tuple(g for g in offered if g not in held[a.id])
            out.append(
                AgentState(
                    id=a.id,
                    group=a.group,
                    cpu=a.cpu,
                    mem=a.mem,
                    gpu=len(offered),
                    cpu_used=used[a.id][0],
                    mem_used=int(used[a.id][1]),
                    gpu_used=len(offered) - len(free),
                    gpu_free_ids=free,
                )
            )
        return out

    async def _record(self, agent_id: str, cap: AgentCapacity, address: str | None) -> bool:
        """Stores what an agent reported (``address`` None: in-process); True if it was LOST."""

        async def step(db: AsyncSession) -> bool:
            return (await self._write_row(db, agent_id, cap, address))[1]

        return await self.store.write(step)

    @staticmethod
    async def _write_row(
        db: AsyncSession, agent_id: str, cap: AgentCapacity, address: str | None
    ) -> tuple[Agent, bool]:
        """The agent's row as it reported itself, ALIVE; and whether it was LOST."""
        row = await db.get(Agent, agent_id)
        was_lost = False
        if row is None:
            row = Agent(id=agent_id, name=cap.name)
            begin(row, AgentStatus.ALIVE, changes_of(db))
            db.add(row)
        else:
            was_lost = transition(row, AgentStatus.ALIVE, changes_of(db)) is not None
        row.address, row.group, row.cpu, row.mem = address, cap.group, cap.cpu, cap.mem
        # the devices count, not ``gpu``: a GPU the manager cannot name cannot be handed out
        row.gpus = [g.model_dump() for g in sorted(cap.gpus, key=lambda g: g.index)]
        row.gpu = len(row.gpus)
        row.gpu_reason = cap.gpu_reason
        if cap.gpu and not cap.gpus:
            row.gpu_reason = cap.gpu_reason or f"{cap.gpu} GPUs reported without their UUIDs"
        row.swarm_manager, row.data_marker, row.underlay_mtu = (
            cap.swarm_manager,
            cap.data_marker,
            cap.underlay_mtu,
        )
        row.last_heartbeat = utcnow()
        return row, was_lost

    async def remove_session(
        self, session_id: str, agent_ids: Iterable[str], *, networks: bool = True
    ) -> dict[str, str]:
        """Removes a session's kernels on ``agent_ids``, then (unless ``networks`` is False: a
        restart in place keeps them) its networks on every agent.

        Networks go last: an overlay created through one agent can only be removed once the
        kernels on the other agents have left it. Unreachable agents are skipped; the orphan
        sweep removes what they still hold once they are back. Returns the kernels' logs.
        """
        saved: dict[str, str] = {}

        async def kernels(agent: AgentBackend) -> None:
            try:
                saved.update(await agent.remove_kernels(session_id))
            except TroupeError as e:
                log.warning("removing kernels of %s on %s: %s", session_id, agent.name, e)

        async def remove_networks(agent: AgentBackend) -> None:
            try:
                await agent.remove_session_networks(session_id)
            except TroupeError as e:
                log.warning("removing networks of %s on %s: %s", session_id, agent.name, e)

        reachable = self.reachable()
        await asyncio.gather(*(kernels(reachable[i]) for i in set(agent_ids) if i in reachable))
        if networks:
            await asyncio.gather(*(remove_networks(a) for a in reachable.values()))
        return saved

    async def sweep_orphans(self) -> None:
        """Removes containers and networks of sessions this manager knows to be over, and the
        containers of a live session on an agent that holds none of its kernels (left on an
        agent that was LOST when the session was placed again elsewhere)."""
        held: dict[str, set[str]] = defaultdict(set)  # session id -> agents holding something
        strays: dict[str, set[str]] = defaultdict(set)  # session id -> agents with containers
        for agent_id, agent in self.reachable().items():
            try:
                kernels = {k.session_id for k in await agent.list_kernels()}
                ids = kernels | await agent.list_session_ids_with_networks()
            except TroupeError as e:
                log.info("orphan sweep skips %s: %s", agent_id, e)
                continue
            for sid in ids:
                held[sid].add(agent_id)
            for sid in kernels:
                strays[sid].add(agent_id)
        if not held:
            return
        async with self.store() as db:
            rows = await db.execute(
                select(Session.id, Session.status).where(Session.id.in_(list(held)))
            )
            status = {sid: st for sid, st in rows}
            placed = await db.execute(
                select(Kernel.session_id, Kernel.agent_id).where(
                    Kernel.session_id.in_(list(strays))
                )
            )
            for sid, holder in placed:
                strays[sid].discard(holder or "")
        for sid in [s for s in held if status.get(s) in SESSION_FINAL]:
            log.info("removing leftovers of finished session %s", sid)
            await self.remove_session(sid, held[sid])
        for sid, agents in strays.items():
            if agents and status.get(sid) not in (None, *SESSION_FINAL):
                log.info("removing containers of %s left on %s", sid, ", ".join(sorted(agents)))
                await self.remove_session(sid, agents, networks=False)

    # -- agents on other hosts ---------------------------------------------------------
    async def register_remote(
        self, cap: AgentCapacity, address: str, credential: str | None = None
    ) -> str:
        """An agent (re)joined: check it may use its name, record it, connect to it; the
        registry then sweeps. Returns the agent's new credential (only its hash is kept).

        A name held by an ALIVE agent that has a credential is refused (:class:`Conflict`)
        unless ``credential`` is that agent's: a live agent cannot be taken over.
        """
        name = cap.name
        if name in self._local:
            raise Conflict(f"agent name {name!r} is taken by the manager's own agent")
        issued = secrets.token_urlsafe(32)
        issued_hash = hash_key(issued)

        async def step(db: AsyncSession) -> None:
            row = await db.get(Agent, name)
            if row is not None and row.credential_hash and row.status != AgentStatus.LOST:
                sent = hash_key(credential or "")
                if not hmac.compare_digest(sent.encode(), row.credential_hash.encode()):
                    raise Conflict(
                        f"agent name {name!r} is taken by a live agent: a live agent's name"
                        " cannot be taken (stop it and wait until it is LOST, or remove it)",
                        field="name",
                    )
            row, _ = await self._write_row(db, name, cap, address)
            row.credential_hash = issued_hash

        async with self._joining:
            try:
                await self.store.write(step)
            except IntegrityError:  # another manager's registration of the name won
                raise Conflict(f"agent {name!r} registered concurrently; try again") from None
            old = self.agents.get(name)
            if old is None or getattr(old, "address", None) != address:
                if old is not None:
                    await old.close()
                token = self.config.resolve_agent_token()
                self.agents[name] = self._remote(name, address, token)
            self._credentials[name] = issued_hash
            self.lost.discard(name)
        self.events.put_nowait(AgentBack(name))
        return issued

    async def remove(self, name: str) -> None:
        """Forgets an agent of another host for good (its row, its handle).

        Refused (:class:`Conflict`) for the manager's own agents and for ALIVE ones; the
        sessions of a LOST agent were failed when it was lost.
        """
        if name in self._local:
            raise Conflict(f"agent {name!r} is the manager's own agent: it cannot be removed")

        async def step(db: AsyncSession) -> None:
            row = await db.get(Agent, name)
            if row is None:
                raise NotFound.of("agent", name)
            if row.status == AgentStatus.ALIVE:
                raise Conflict(f"agent {name!r} is ALIVE: stop it first, or wait until it is LOST")
            await db.delete(row)

        async with self._joining:
            await self.store.write(step)
            handle = self.agents.pop(name, None)
            self._credentials.pop(name, None)
            self.lost.discard(name)
        if handle is not None:
            try:
                await handle.close()
            except Exception as e:  # it is forgotten either way
                log.warning("closing the handle of removed agent %s: %s", name, e)
        log.warning("agent %s removed", name)

    async def heartbeat(self, name: str) -> bool:
        """False if the agent is unknown here (it should register again)."""
        if name not in self.agents or name in self._local:
            return False

        async def step(db: AsyncSession) -> bool | None:
            row = await db.get(Agent, name)
            if row is None:
                return None
            back = transition(row, AgentStatus.ALIVE, changes_of(db)) is not None
            row.last_heartbeat = utcnow()
            return back

        back = await self.store.write(step)
        if back is None:
            return False
        self.lost.discard(name)
        if back:
            log.warning("agent %s is back", name)
            self.events.put_nowait(AgentBack(name))
        return True

    @property
    def check_every(self) -> float:
        """Seconds between two :meth:`check` passes, at least: a third of the time-out, 1 s
        at most."""
        return min(1.0, self.config.agent_timeout / 3)

    @property
    def check_within(self) -> float:
        """Seconds between two :meth:`check` passes, at most, a check's own wait for the
        database included (the scheduler loop also wakes this often at least): a third of the
        time-out, 5 s at most."""
        return min(5.0, self.config.agent_timeout / 3)

    async def check(self) -> None:
        """Marks silent remote agents LOST (in-process ones live as long as the manager); the
        manager's own pauses are not their silence (:mod:`troupe.manager.pauses`)."""
        timeout = self.config.agent_timeout
        now = utcnow()

        def silent(row: Agent) -> bool:
            if row.last_heartbeat is None:
                return True
            paused = self.pauses.paused(row.last_heartbeat, now)
            return (now - row.last_heartbeat).total_seconds() - paused > timeout

        async def step(db: AsyncSession) -> list[str]:
            lost = []
            for row in (await db.execute(select(Agent))).scalars():
                if row.id in self._local:
                    continue
                if row.status == AgentStatus.ALIVE and silent(row):
                    transition(row, AgentStatus.LOST, changes_of(db), now)
                    lost.append(row.id)
            return lost

        for agent_id in await self.store.write(step):
            self.lost.add(agent_id)
            log.warning("agent %s lost (no heartbeat for %g s)", agent_id, timeout)
            self.events.put_nowait(
                AgentLost(agent_id, f"agent {agent_id} sent no heartbeat for {timeout:g} s")
            )
