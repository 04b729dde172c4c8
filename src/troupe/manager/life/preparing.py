"""Preparing: SCHEDULED -> PREPARING -> RUNNING in named steps.

images (pulled where missing, under the pull's own limit: :mod:`.pulling`) ->
network (plan, subnet, create) -> kernels (create and start on their agents) -> readiness
(every kernel reaches every other) -> RUNNING -> batch "go". Each step reads or writes the
database in its own short transaction and calls agents outside any transaction.

Kernel exits reported while a session is prepared are put in its :class:`Inbox` and handled
here, at a step boundary: a failing agent call reports its own (clearer) error first; an exit
ends the readiness wait at once. What arrives after RUNNING is the registry's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.agent import KernelSpec, KernelStarted, NetworkSpec, ReadyTimes
from troupe.api.aio import gather_all
from troupe.api.errors import AgentFailed, TroupeError
from troupe.api.lifecycle import (
    SESSION_ALLOCATED,
    AgentStatus,
    KernelStatus,
    SessionStatus,
    mark,
    transition,
    utcnow,
)
from troupe.api.models import SessionType
from troupe.manager.events import KernelExited
from troupe.manager.kernels import session_kernel_specs
from troupe.manager.life.context import Life, load
from troupe.manager.life.judging import RESTART_ACTOR, exit_info
from troupe.manager.life.pulling import pull_missing
from troupe.manager.networks import AgentNet, free_subnet, plan_network
from troupe.manager.session_events import SYSTEM
from troupe.manager.store.models import Agent, Session
from troupe.manager.store.unit import changes_of

S, K = SessionStatus, KernelStatus
T = TypeVar("T")
#: How long a cancelled preparer waits for an agent call under way to finish.
SETTLE_SECONDS = 30.0


@dataclass
class Inbox:
    """Kernel exits of a session being prepared, kept for the preparer."""

    exits: list[KernelExited] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def put(self, ev: KernelExited) -> None:
        self.exits.append(ev)
        self.arrived.set()


class Abandoned(Exception):
    """The session left PREPARING meanwhile (destroyed): its teardown removes what exists."""


class Failed(Exception):
    """Preparing failed; ``info`` is the session's status_info (reason, kernel, message)."""

    def __init__(self, info: dict[str, Any]) -> None:
        super().__init__(info.get("reason", "failed"))
        self.info = info


@dataclass
class Plan:
    """What the later steps need, read once when preparing begins."""

    network: NetworkSpec
    #: the agent that creates (and at the end removes) the network
    creator: str
    #: kernel id -> (hostname, agent id), by rank
    kernels: dict[str, tuple[str, str]]
    batch: bool
    #: the session as loaded when preparing began, with its kernels (detached: read only):
    #: what the kernels' specs are made of, without reading it again on the way to their start
    session: Session
    #: when the network was made (ISO time: the session's ``network`` phase)
    network_at: str = ""
    #: the session's status while this plan runs: PREPARING, or RESTARTING (a restart)
    status: SessionStatus = SessionStatus.PREPARING
    progress: Progress = field(default_factory=lambda: Progress())

    def left(self) -> float:
        """Seconds left until the deadline, less a second for reporting."""
        return max(1.0, self.progress.deadline - asyncio.get_running_loop().time() - 1)

    @property
    def agents(self) -> list[str]:
        return list(dict.fromkeys(a for _, a in self.kernels.values()))


@dataclass
class Progress:
    """Where a start (or restart) is: its step (for a time-out's report) and its deadline."""

    step: str = "starting"
    #: event-loop time by which the session must be RUNNING
    deadline: float = 0.0


async def guarded(
    life: Life, steps: Callable[[Progress], Awaitable[None]], pulling: bool = False
) -> dict[str, Any] | None:
    """Runs ``steps`` within ``create_timeout`` (``pulling``: within the pull's own limit);
    None once done (or the session is no longer theirs), else why they failed (the session's
    status_info)."""
    progress = Progress()
    took = life.config.pull_timeout if pulling else life.config.create_timeout
    try:
        async with asyncio.timeout(took + (SETTLE_SECONDS if pulling else 0)) as limit:
            progress.deadline = limit.when() or 0.0
            await steps(progress)
    except Abandoned:
        return None
    except Failed as e:
        return e.info
    except TimeoutError:
        return {"reason": f"timed out after {took:g} s while {progress.step}"}
    except TroupeError as e:
        info: dict[str, Any] = {"reason": f"failed while {progress.step}", "message": str(e)}
        if e.kernel:
            info["kernel"] = e.kernel
        return info
    return None


async def prepare(life: Life, session_id: str, inbox: Inbox) -> dict[str, Any] | None:
    """Runs the steps; returns None once RUNNING (or no longer ours), else why it failed."""

    plans: list[Plan] = []

    async def pull(progress: Progress) -> None:
        progress.step = "creating the network"  # (_begin plans it)
        plan = await _begin(life, session_id)
        if plan is None:
            raise Abandoned
        plans.append(plan)
        progress.step = "pulling images"
        await pull_missing(life, session_id, _images(plan))

    async def steps(progress: Progress) -> None:
        plan = plans[0]
        plan.progress = progress
        progress.step = "creating the network"
        await _create_network(life, session_id, plan)
        await start_kernels(life, plan, inbox)

    # the create time-out does not count the pull, which has its own limit
    failed = await guarded(life, pull, pulling=True)
    if failed is not None or not plans:
        return failed
    return await guarded(life, steps)


def _images(plan: Plan) -> set[tuple[str, str]]:
    """(agent, image) of every kernel: what must be on which agent before the kernels start."""
    return {(plan.kernels[k.id][1], k.image or plan.session.image) for k in plan.session.kernels}


#: How a start's kernels come to be: made (a start) or started again (a restart in place).
Starter = Callable[[Life, "Plan", Inbox], Awaitable[dict[str, KernelStarted]]]


async def start_kernels(
    life: Life, plan: Plan, inbox: Inbox, starter: Starter | None = None
) -> None:
    """The kernels' part of a start (and of a restart, whose ``starter`` starts them again):
    create, readiness barrier, RUNNING, then the batch "go"; :class:`Abandoned` when the
    session left ``plan.status``."""
    session_id = plan.session.id
    plan.progress.step = "creating kernels" if starter is None else "starting the kernels again"
    started = await (starter or _create_kernels)(life, plan, inbox)
    plan.progress.step = "waiting until every kernel reaches every other"
    times = await _wait_ready(life, session_id, plan, started, inbox)
    if not await _running(life, session_id, plan.status, times):
        raise Abandoned
    if plan.batch:
        plan.progress.step = "starting the batch command"
        # main1's, and each kernel with a command of its own (its role's, success_policy all)
        for k in plan.session.kernels:
            if k.startup_command or k.id == session_id:
                agent = life.fleet[plan.kernels[k.id][1]]
                await agent.signal_go(started[k.id].container_id)


async def _begin(life: Life, session_id: str) -> Plan | None:
    """SCHEDULED -> PREPARING, with the network planned (bridge or overlay, its creator); on
    one host also with its subnet claimed, in the same transaction (one fewer on the way to
    the start; see :func:`_create_network`)."""
    try:
        return await _begin_step(life, session_id, claim=True)
    except IntegrityError:  # another session took that subnet a moment ago: claim it later
        return await _begin_step(life, session_id, claim=False)


async def _begin_step(life: Life, session_id: str, claim: bool) -> Plan | None:
    async def step(db: AsyncSession) -> Plan | None:
        s = await load(db, session_id)
        if s.status != S.SCHEDULED:
            return None
        kernels = {k.id: (k.hostname, k.agent_id or "") for k in s.kernels}
        agent_ids = list(dict.fromkeys(a for _, a in kernels.values()))
        missing = [a for a in agent_ids if life.fleet.get(a) is None]
        if missing:
            raise AgentFailed(f"agent {missing[0]} is not connected")
        rows = (await db.execute(select(Agent))).scalars()
        nets = [
            AgentNet(
                a.id, a.swarm_manager, a.status == AgentStatus.ALIVE, a.data_marker, a.underlay_mtu
            )
            for a in rows
            if life.fleet.get(a.id)
        ]
        net = plan_network(nets, agent_ids, with_folders=bool(s.mounts))
        subnet = ""
        if claim and set(agent_ids) <= {net.creator}:  # (before the changes: one UPDATE)
            s.subnet = subnet = await _free_subnet(life, db, [])
        # (a session placed again after a lost agent gets a network of a new name: the old
        # one may still be in use on the lost host, which cannot be asked to leave it)
        s.network = f"troupe-{session_id[:12]}" + (f"-{s.restarts}" if s.restarts else "")
        transition(s, S.PREPARING, changes_of(db), reason="creating network and kernels")
        spec = NetworkSpec(
            name=s.network,
            session_id=s.id,
            owner=s.owner_id,
            subnet=subnet,
            internal=s.isolated_network,
            driver=net.driver,
            mtu=net.mtu,
        )
        return Plan(spec, net.creator, kernels, s.type == SessionType.BATCH, s)

    return await life.store.write(step)


async def _free_subnet(life: Life, db: AsyncSession, used: list[str]) -> str:
    """A subnet of the pool that no allocated session holds and that is not in ``used``."""
    rows = await db.execute(
        select(Session.subnet).where(
            Session.status.in_(SESSION_ALLOCATED), Session.subnet.is_not(None)
        )
    )
    return free_subnet(
        life.config.subnet_pool,
        life.config.subnet_prefix,
        [*used, *(x for x in rows.scalars() if x)],
    )


async def _create_network(life: Life, session_id: str, plan: Plan) -> None:
    """Creates the network in the subnet claimed with the plan, or picks and claims a free one
    first (the database's unique index settles races); picks again if the engine refuses it."""
    # One engine: its own refusal ("overlaps") says when a subnet is taken, so it is not asked
    # first (a round trip on every start). Several: an overlay must also miss the subnets of
    # the other hosts' networks, which their engines do not check: ask them all, at once.
    hosts = list(dict.fromkeys([*plan.agents, plan.creator]))
    used: list[str] = []
    if len(hosts) > 1:
        per_host = await gather_all(life.fleet[a].used_subnets() for a in hosts)
        used = [subnet for subnets in per_host for subnet in subnets]

    async def claim(db: AsyncSession) -> str:
        subnet = await _free_subnet(life, db, used)
        s = await load(db, session_id)
        if s.status != S.PREPARING:
            raise Abandoned
        s.subnet = picked[0] = subnet
        return subnet

    picked = [""]
    for _ in range(8):  # the engine may know a network the database does not: pick again
        for _ in range(64 if not plan.network.subnet else 0):
            try:
                plan.network.subnet = await life.store.write(claim)
                break
            except IntegrityError:  # another session took it a moment ago: pick again
                used.append(picked[0])
        if not plan.network.subnet:
            raise AgentFailed("could not claim a free subnet")
        try:
            await settled(life.fleet[plan.creator].create_network(plan.network))
            plan.network_at = utcnow().isoformat()
            return
        except AgentFailed as e:
            if "overlap" not in str(e).lower():
                raise
            used.append(plan.network.subnet)
            plan.network.subnet = ""
    raise AgentFailed("every subnet tried overlaps a network on the engine")


async def settled(call: Awaitable[T]) -> T:
    """Runs an agent call that creates something; if the preparer is cancelled meanwhile
    (destroy, time-out), waits (a bounded while) for the call to finish first, so the
    teardown that follows finds and removes what it made instead of racing it."""
    task = asyncio.ensure_future(call)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(task), SETTLE_SECONDS)
        raise


def specs_by_agent(plan: Plan) -> dict[str, list[KernelSpec]]:
    """The kernels' specs, by the agent that holds each."""
    by_agent: dict[str, list[KernelSpec]] = defaultdict(list)
    for spec in session_kernel_specs(plan.session, ready_timeout=plan.left()):
        by_agent[plan.kernels[spec.kernel_id][1]].append(spec)
    return by_agent


async def _create_kernels(life: Life, plan: Plan, inbox: Inbox) -> dict[str, KernelStarted]:
    """Creates and starts every kernel on its agent; returns them by kernel id."""
    by_agent = specs_by_agent(plan)
    started_lists = await settled(
        gather_all(life.fleet[a].create_kernels(ks) for a, ks in by_agent.items())
    )
    raise_exits(plan, inbox)
    return {k.kernel_id: k for lst in started_lists for k in lst}


async def _record_kernels(
    life: Life, session_id: str, plan: Plan, started: dict[str, KernelStarted]
) -> None:
    """The kernels' containers, addresses and times; the kernels RUNNING."""

    async def record(db: AsyncSession) -> None:
        s = await load(db, session_id)
        if s.status != plan.status:
            raise Abandoned
        changes = changes_of(db)
        mark(s, {"network": plan.network_at})
        for k in s.kernels:
            one = started[k.id]
            k.container_id, k.ip = one.container_id, one.ip
            mark(k, {"created": one.created_at, "started": one.started_at})
            transition(k, K.RUNNING, changes)

    await life.store.write(record)


async def _wait_ready(
    life: Life, session_id: str, plan: Plan, started: dict[str, KernelStarted], inbox: Inbox
) -> dict[str, ReadyTimes]:
    """The readiness barrier on every agent at once, while the kernels are recorded (off the
    start-up's path); a kernel exit ends it at once. Returns each kernel's phase times
    (hostname -> phase -> ISO time)."""
    record = asyncio.ensure_future(_record_kernels(life, session_id, plan, started))
    try:
        times = await _ready(life, plan, started, inbox)
    except BaseException:
        # a teardown follows: the record is finished first (a bounded while), so that the
        # failed session still shows its kernels' containers and times, and the record's
        # transaction does not race the teardown's
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(record), SETTLE_SECONDS)
        raise
    await record
    return times


async def _ready(
    life: Life, plan: Plan, started: dict[str, KernelStarted], inbox: Inbox
) -> dict[str, ReadyTimes]:
    hosts = [h for h, _ in plan.kernels.values()]
    by_agent: dict[str, dict[str, str]] = defaultdict(dict)
    for kernel_id, (host, agent_id) in plan.kernels.items():
        by_agent[agent_id][host] = started[kernel_id].container_id
    ready = asyncio.ensure_future(
        gather_all(life.fleet[a].wait_ready(c, hosts, plan.left()) for a, c in by_agent.items())
    )
    try:
        while not ready.done():
            exited = asyncio.ensure_future(inbox.arrived.wait())
            try:
                await asyncio.wait({ready, exited}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                exited.cancel()
            inbox.arrived.clear()
            raise_exits(plan, inbox)
        return {h: t for per_agent in await ready for h, t in per_agent.items()}
    finally:
        ready.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await ready


async def _running(
    life: Life, session_id: str, status: SessionStatus, times: dict[str, ReadyTimes]
) -> bool:
    async def step(db: AsyncSession) -> bool:
        s = await load(db, session_id)
        if s.status != status:
            return False
        for k in s.kernels:
            mark(k, times.get(k.hostname, {}))
        reason, actor = "every kernel is ready", SYSTEM
        if status == S.RESTARTING:  # a restart's end: its attempt, by the session's rule
            s.status_info = {}
            reason, actor = f"{reason} (attempt {s.restarts})", RESTART_ACTOR
        transition(s, S.RUNNING, changes_of(db), reason=reason, actor=actor)
        return True

    return await life.store.write(step)


def raise_exits(plan: Plan, inbox: Inbox) -> None:
    """Fails on the first exit reported by the agent that holds the kernel (others are
    dropped: an agent may speak only for its own kernels)."""
    inbox.exits = [
        e for e in inbox.exits if plan.kernels.get(e.exit.kernel_id, ("", ""))[1] == e.agent_id
    ]
    if inbox.exits:
        ev = inbox.exits[0].exit
        raise Failed(exit_info(ev, plan.kernels[ev.kernel_id][0], preparing=True))
