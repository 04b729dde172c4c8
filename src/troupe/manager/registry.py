"""Session life: validate, queue, place, create, watch and tear down (SPEC section 2).

Every step that touches Docker runs under a deadline, and every failure path ends in
:meth:`Registry._teardown`, which removes whatever exists for the session by its labels, so
nothing is left half-created. State lives in the database; this object only holds tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from troupe.agent.base import AgentBackend, AgentError, ExecExit, ExecOutput, gather_all
from troupe.api.agent import KernelExit, KernelSpec, NetworkSpec
from troupe.api.models import (
    ExecRequest,
    SessionCreate,
    SessionStatus,
)
from troupe.cluster import build_cluster, generate_ed25519
from troupe.manager.config import ServerConfig
from troupe.manager.errors import ApiError, conflict, invalid, not_found
from troupe.manager.fleet import ALLOCATED, Fleet
from troupe.manager.kernels import session_kernel_specs
from troupe.manager.logs import LogStore, merged, strip
from troupe.manager.networks import AgentNet, free_subnet, plan_network
from troupe.manager.scheduler import Request, never_fits, schedule
from troupe.manager.store.models import Agent, Folder, Kernel, Session, User, utcnow

log = logging.getLogger(__name__)
T = TypeVar("T")
S = SessionStatus
ACTIVE = (S.PENDING, *ALLOCATED)


class Registry:
    def __init__(
        self,
        config: ServerConfig,
        db: async_sessionmaker[AsyncSession],
        agents: dict[str, AgentBackend],
    ) -> None:
        self.config = config
        self.db = db
        self._wake = asyncio.Event()
        self._background: set[asyncio.Task[None]] = set()
        self.fleet = Fleet(config, db, agents, self._fail_lost, self._wake.set, self._spawn)
        self.log_store = LogStore(config.logs_dir)
        self._changed = asyncio.Event()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._loop_task: asyncio.Task[None] | None = None
        #: Seconds until the scheduler looks again without being woken (pending time-outs).
        self._next_pass = 5.0

    # -- start and stop ----------------------------------------------------------
    async def start(self) -> None:
        """Starts the agents, reconciles the sessions, starts the scheduler."""
        await self.fleet.start(on_exit=self._on_kernel_exit)
        await self.reconcile()
        self._loop_task = asyncio.create_task(self._scheduler_loop(), name="scheduler")
        self._wake.set()

    async def stop(self) -> None:
        tasks = [t for t in (self._loop_task, *self._tasks.values(), *self._background) if t]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await self.fleet.stop()

    async def reconcile(self) -> None:
        """After a manager restart: finish what was interrupted, remove what is orphaned."""
        async with self.db() as db:
            rows = await db.execute(select(Session).where(Session.status.in_(ALLOCATED)))
            sessions = list(rows.scalars())
        running, unreachable = await self.fleet.running_kernels()
        for s in sessions:
            if s.status in (S.SCHEDULED, S.PREPARING):
                await self._teardown(
                    s.id,
                    S.ERROR,
                    {"reason": "manager restarted while the session was being created"},
                )
            elif s.status == S.TERMINATING:
                await self._teardown(s.id, S.TERMINATED, dict(s.status_info))
            else:
                missing = [
                    k.hostname
                    for k in s.kernels
                    if k.hostname not in running[s.id] and k.agent_id not in unreachable
                ]
                if missing:
                    await self._teardown(
                        s.id,
                        S.ERROR,
                        {
                            "reason": "kernel not running after manager restart",
                            "kernel": missing[0],
                        },
                    )
        await self.fleet.sweep_orphans()

    async def kernel_exited(self, ev: KernelExit) -> None:
        """A remote agent reports a kernel that stopped on its own."""
        await self._on_kernel_exit(ev)

    async def _fail_lost(self, session_id: str, info: dict[str, Any]) -> None:
        await self._teardown(session_id, S.ERROR, info)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        t = asyncio.create_task(coro)
        self._background.add(t)
        t.add_done_callback(self._background.discard)

    # -- change notification -----------------------------------------------------
    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for(
        self, session_id: str, until: Callable[[Session], bool], timeout: float
    ) -> Session:
        """Returns the session once ``until`` holds or ``timeout`` passed (event-driven)."""
        deadline = time.monotonic() + timeout
        while True:
            changed = self._changed
            s = await self.get(session_id)
            remaining = deadline - time.monotonic()
            if until(s) or remaining <= 0:
                return s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), remaining)

    async def get(self, session_id: str) -> Session:
        async with self.db() as db:
            s = await db.get(Session, session_id)
            if s is None:
                raise not_found("session", session_id)
            return s

    # -- creation ------------------------------------------------------------------
    async def create(self, owner: User, req: SessionCreate) -> Session:
        """Validates against the current state, stores the session PENDING, wakes the scheduler."""
        if req.cluster_size > self.config.max_cluster_size:
            raise invalid("cluster_size", f"must be at most {self.config.max_cluster_size}")
        async with self.db() as db:
            dup = await db.execute(
                select(Session.id).where(
                    Session.owner_id == owner.id,
                    Session.name == req.name,
                    Session.status.in_([s.value for s in ACTIVE]),
                )
            )
            if dup.first():
                raise conflict("name", f"name: a session named {req.name!r} already exists")
            folders = {}
            for m in req.mounts:
                f = (
                    await db.execute(
                        select(Folder).where(Folder.owner_id == owner.id, Folder.name == m.folder)
                    )
                ).scalar_one_or_none()
                if f is None:
                    raise invalid("mounts", f"folder {m.folder!r} not found")
                folders[m.folder] = f.id
            agents = await self.fleet.states(db)
            request = Request(
                session_id="-",
                group=req.group,
                mode=req.cluster_mode,
                size=req.cluster_size,
                cpu=req.resources.cpu,
                mem=req.resources.mem,
                gpu=req.resources.gpu,
            )
            reason = never_fits(request, agents)
            if reason:
                raise invalid("resources", reason)
            group_agents = [a.id for a in agents if a.group == req.group]
            if not await self.fleet.any_has_image(group_agents, req.image):
                raise invalid(
                    "image", f"image {req.image!r} not found on the agents of group {req.group!r}"
                )
            session_id = str(uuid.uuid4())
            key = generate_ed25519(comment=f"troupe-{session_id[:8]}")
            s = Session(
                id=session_id,
                name=req.name,
                owner_id=owner.id,
                status=S.PENDING.value,
                status_info={},
                type=req.type,
                image=req.image,
                cluster_size=req.cluster_size,
                cluster_mode=req.cluster_mode,
                cpu=req.resources.cpu,
                mem=req.resources.mem,
                gpu=req.resources.gpu,
                mounts=[{**m.model_dump(), "folder_id": folders[m.folder]} for m in req.mounts],
                environ=req.environ,
                startup_command=req.startup_command,
                dist_env=req.dist_env,
                group=req.group,
                priority=req.priority,
                max_pending_seconds=req.max_pending_seconds,
                uid=req.uid,
                gid=req.gid,
                isolated_network=req.isolated_network,
                ssh_private_key=key.private_openssh,
                ssh_public_key=key.public_openssh,
                created_at=utcnow(),
            )
            build = build_cluster(
                session_id,
                [session_id] + [str(uuid.uuid4()) for _ in range(req.cluster_size - 1)],
                req.cluster_mode,
                req.environ,
                req.dist_env,
            )
            for c in build:
                hk = generate_ed25519(comment=c.hostname)
                s.kernels.append(
                    Kernel(
                        id=c.kernel_id,
                        hostname=c.hostname,
                        role=c.role,
                        idx=c.idx,
                        rank=c.rank,
                        status="PENDING",
                        host_public_key=hk.public_openssh,
                        host_private_key=hk.private_openssh,
                    )
                )
            db.add(s)
            await db.commit()
        self._wake.set()
        self._notify()
        return await self.get(session_id)

    # -- scheduling -----------------------------------------------------------------
    async def _scheduler_loop(self) -> None:
        last_sweep = time.monotonic()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._next_pass)
            self._wake.clear()
            try:
                await self.fleet.check()
                await self._schedule_once()
                if time.monotonic() - last_sweep > 60:
                    last_sweep = time.monotonic()
                    await self.fleet.sweep_orphans()
            except Exception:
                log.exception("scheduling pass failed")

    async def _schedule_once(self) -> None:
        self._next_pass = min(5.0, self.config.agent_timeout / 3)
        async with self.db() as db:
            pending = list(
                (
                    await db.execute(select(Session).where(Session.status == S.PENDING.value))
                ).scalars()
            )
            if not pending:
                return
            now = utcnow()
            live = []
            for s in pending:
                waited = (now - s.created_at).total_seconds()
                if s.max_pending_seconds and waited >= s.max_pending_seconds:
                    s.status, s.terminated_at = S.CANCELLED.value, now
                    for k in s.kernels:
                        k.status = "TERMINATED"
                    s.status_info = {
                        **s.status_info,
                        "reason": "pending longer than "
                        f"max_pending_seconds ({s.max_pending_seconds:g} s)",
                    }
                else:
                    live.append(s)
                    if s.max_pending_seconds:
                        self._next_pass = min(
                            self._next_pass, s.max_pending_seconds - waited + 0.05
                        )
            decision = schedule(
                [
                    Request(
                        session_id=s.id,
                        group=s.group,
                        mode=s.cluster_mode,
                        size=s.cluster_size,
                        cpu=s.cpu,
                        mem=s.mem,
                        gpu=s.gpu,
                        priority=s.priority,
                        order=s.created_at.timestamp(),
                    )
                    for s in live
                ],
                await self.fleet.states(db),
            )
            placed = []
            for s in live:
                if s.id in decision.placements:
                    for k, agent_id in zip(s.kernels, decision.placements[s.id], strict=True):
                        k.agent_id = agent_id
                    s.status, s.status_info = S.SCHEDULED.value, {}
                    placed.append(s.id)
                else:
                    reasons = decision.waiting.get(s.id, [])
                    report = {k.hostname: reasons for k in s.kernels}
                    if s.status_info.get("pending") != report:
                        s.status_info = {"pending": report}
            await db.commit()
        for sid in placed:
            self._tasks[sid] = asyncio.create_task(self._prepare(sid), name=f"prepare-{sid}")
        self._notify()

    # -- preparation ------------------------------------------------------------------
    async def _pick_subnet(self, db: AsyncSession, agents: list[AgentBackend]) -> str:
        rows = await db.execute(
            select(Session.subnet).where(
                Session.status.in_([s.value for s in ALLOCATED]), Session.subnet.is_not(None)
            )
        )
        used = [x for x in rows.scalars() if x]
        for agent in agents:
            used += await agent.used_subnets()
        return free_subnet(self.config.subnet_pool, self.config.subnet_prefix, used)

    async def _prepare(self, session_id: str) -> None:
        step = "starting"
        try:
            async with asyncio.timeout(self.config.create_timeout):
                async with self.db() as db:
                    s = await db.get(Session, session_id)
                    if s is None or s.status != S.SCHEDULED:
                        return
                    agent_ids = list(dict.fromkeys(k.agent_id or "" for k in s.kernels))
                    missing = [a for a in agent_ids if self.fleet.get(a) is None]
                    if missing:
                        raise AgentError(f"agent {missing[0]} is not connected")
                    s.status = S.PREPARING.value
                    step = "creating the network"
                    rows = (await db.execute(select(Agent))).scalars()
                    plan = plan_network(
                        [
                            AgentNet(
                                a.id,
                                a.swarm_manager,
                                a.status == "ALIVE",
                                a.data_marker,
                                a.underlay_mtu,
                            )
                            for a in rows
                            if self.fleet.get(a.id)
                        ],
                        agent_ids,
                        with_folders=bool(s.mounts),
                    )
                    driver, creator, mtu = plan.driver, self.fleet[plan.creator], plan.mtu
                    involved = [self.fleet[a] for a in agent_ids]
                    s.subnet = await self._pick_subnet(db, [*involved, creator])
                    s.network = f"troupe-{session_id[:12]}"
                    await db.commit()
                    self._notify()
                    await creator.create_network(
                        NetworkSpec(
                            name=s.network,
                            session_id=s.id,
                            owner=s.owner_id,
                            subnet=s.subnet,
                            internal=s.isolated_network,
                            driver=driver,
                            mtu=mtu,
                        )
                    )
                    step = "creating kernels"
                    specs = session_kernel_specs(s)
                    placement = {k.id: k.agent_id or "" for k in s.kernels}
                    hosts = [k.hostname for k in s.kernels]
                    batch = s.type == "batch"
                by_agent: dict[str, list[KernelSpec]] = defaultdict(list)
                for spec in specs:
                    by_agent[placement[spec.kernel_id]].append(spec)
                started_lists = await gather_all(
                    self.fleet[a].create_kernels(ks) for a, ks in by_agent.items()
                )
                started = {k.kernel_id: k for lst in started_lists for k in lst}
                async with self.db() as db:
                    s = await db.get(Session, session_id)
                    assert s is not None
                    for k in s.kernels:
                        k.container_id, k.ip = started[k.id].container_id, started[k.id].ip
                        k.status = "RUNNING"
                    await db.commit()
                    containers = {k.hostname: k.container_id or "" for k in s.kernels}
                self._notify()
                step = "waiting until every kernel reaches every other"
                remaining = max(1.0, self.config.create_timeout - 1)
                await gather_all(
                    self.fleet[a].wait_ready(
                        {sp.hostname: containers[sp.hostname] for sp in ks}, hosts, remaining
                    )
                    for a, ks in by_agent.items()
                )
                async with self.db() as db:
                    s = await db.get(Session, session_id)
                    assert s is not None
                    if s.status != S.PREPARING:
                        return
                    s.status, s.started_at = S.RUNNING.value, utcnow()
                    await db.commit()
                self._notify()
                if batch:
                    step = "starting the batch command"
                    await self.fleet[placement[session_id]].signal_go(containers["main1"])
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            await self._teardown(
                session_id,
                S.ERROR,
                {"reason": f"timed out after {self.config.create_timeout:g} s while {step}"},
            )
        except AgentError as e:
            info: dict[str, Any] = {"reason": f"failed while {step}", "message": str(e)}
            if e.kernel:
                info["kernel"] = e.kernel
            await self._teardown(session_id, S.ERROR, info)
        except Exception as e:
            log.exception("preparing session %s failed", session_id)
            await self._teardown(
                session_id,
                S.ERROR,
                {"reason": f"failed while {step}", "message": f"{type(e).__name__}: {e}"},
            )
        finally:
            if self._tasks.get(session_id) is asyncio.current_task():
                del self._tasks[session_id]

    # -- teardown ----------------------------------------------------------------------
    async def _teardown(
        self,
        session_id: str,
        final: SessionStatus,
        info: dict[str, Any],
        exit_code: int | None = None,
    ) -> None:
        """Moves a session to ``final``: removes its kernels (saving logs) and its network."""
        async with self._locks[session_id]:
            async with self.db() as db:
                s = await db.get(Session, session_id)
                if s is None or S(s.status).is_final:
                    return
                was = S(s.status)
                if was != S.TERMINATING:  # else finish an interrupted teardown as it was
                    s.status_info = info
                    if exit_code is not None:
                        s.exit_code = exit_code
                s.status = S.TERMINATING.value
                agent_ids = {k.agent_id for k in s.kernels if k.agent_id}
                await db.commit()
            self._notify()
            task = self._tasks.pop(session_id, None)
            if task is not None and task is not asyncio.current_task():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            saved: dict[str, str] = {}
            if was != S.PENDING:
                saved = await self.fleet.remove_session(session_id, agent_ids)
            if saved:
                await asyncio.to_thread(self.log_store.save, session_id, saved)
            async with self.db() as db:
                s = await db.get(Session, session_id)
                assert s is not None
                if final == S.TERMINATED and was == S.PENDING:
                    final = S.CANCELLED
                s.status, s.terminated_at = final.value, utcnow()
                for k in s.kernels:
                    k.status = "TERMINATED"
                await db.commit()
        self._locks.pop(session_id, None)
        self._notify()
        self._wake.set()

    async def destroy(self, session_id: str) -> Session:
        await self._teardown(session_id, S.TERMINATED, {"reason": "destroyed by user"})
        return await self.get(session_id)

    async def _on_kernel_exit(self, ev: KernelExit) -> None:
        async with self.db() as db:
            s = await db.get(Session, ev.session_id)
            if s is None or s.status not in (S.PREPARING, S.RUNNING):
                return
            k = next((k for k in s.kernels if k.id == ev.kernel_id), None)
            if k is None:
                return
            k.exit_code, k.oom_killed, k.status = ev.exit_code, ev.oom_killed, "EXITED"
            batch_done = s.type == "batch" and k.role == "main" and s.status == S.RUNNING
            preparing = s.status == S.PREPARING
            await db.commit()
        if batch_done:
            coro = self._teardown(
                ev.session_id,
                S.TERMINATED,
                {"reason": "batch command finished", "exit_code": ev.exit_code},
                exit_code=ev.exit_code,
            )
        else:
            reason = "kernel ran out of memory" if ev.oom_killed else "kernel exited"
            if preparing:
                reason += " while the session was being prepared"
            info: dict[str, Any] = {
                "reason": reason,
                "kernel": k.hostname,
                "exit_code": ev.exit_code,
                "oom_killed": ev.oom_killed,
            }
            if ev.error:
                info["message"] = ev.error
            info["last_logs"] = ev.last_logs
            coro = self._teardown(ev.session_id, S.ERROR, info)
            if preparing:  # let a failing create call report Docker's own, clearer error
                coro = _after(0.5, coro)
        self._spawn(coro)

    # -- logs and exec -------------------------------------------------------------------
    async def logs(self, s: Session, container: str | None, follow: bool) -> AsyncIterator[str]:
        kernels = [k for k in s.kernels if container in (None, k.hostname)]
        if not kernels:
            raise invalid("container", f"no kernel named {container!r} in this session")

        def stream(k: Kernel) -> AsyncIterator[str]:
            agent = self.fleet.get(k.agent_id or "")
            if k.container_id and agent and not self.log_store.has(s.id, k.hostname):
                return agent.logs(k.container_id, follow=follow)
            return _aiter(self.log_store.lines(s.id, k.hostname))

        if container is not None:
            async for line in stream(kernels[0]):
                yield strip(line)
            return
        async for line in merged({k.hostname: stream(k) for k in kernels}, follow=follow):
            yield line

    async def exec(self, s: Session, req: ExecRequest) -> AsyncIterator[ExecOutput | ExecExit]:
        agent, container_id = self.kernel_target(s, req.kernel)
        return agent.exec_stream(container_id, req.command, user=req.user)

    def kernel_target(self, s: Session, hostname: str) -> tuple[AgentBackend, str]:
        """The agent and container of a running session's kernel (for exec and shells)."""
        if s.status != S.RUNNING:
            raise ApiError(409, "not_running", f"session {s.name!r} is {s.status}, not RUNNING")
        k = next((k for k in s.kernels if k.hostname == hostname), None)
        if k is None or not k.container_id:
            raise invalid("kernel", f"no kernel named {hostname!r} in this session")
        return self.fleet[k.agent_id or ""], k.container_id

    # -- folders ---------------------------------------------------------------------------
    async def delete_folder_data(self, folder_id: str) -> None:
        path = self.config.folders_dir / folder_id
        await asyncio.to_thread(shutil.rmtree, path, True)


async def _after(delay: float, coro: Coroutine[Any, Any, None]) -> None:
    await asyncio.sleep(delay)
    await coro


async def _aiter(lines: list[str]) -> AsyncIterator[str]:
    for line in lines:
        yield line
