"""The session life's conductor: runs the steps of :mod:`troupe.manager.life` as tasks.

It owns every background task (scheduler passes, preparers, teardowns, the fleet's event
queue), so stopping the manager stops them all. State lives in the database; this object
holds only tasks, per-session locks and the inboxes of sessions being prepared.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections import defaultdict
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from troupe.api.agent import AgentBackend
from troupe.api.lifecycle import SessionStatus
from troupe.api.models import SessionCreate
from troupe.manager.config import ServerConfig
from troupe.manager.events import AgentBack, AgentLost, FleetEvent, KernelExited
from troupe.manager.fleet import Fleet, RemoteFactory
from troupe.manager.instruments import SCHEDULER_PASS
from troupe.manager.life import (
    Life,
    admission,
    exits,
    lost,
    placing,
    preparing,
    reconcile,
    replacing,
    restarting,
    retention,
    teardown,
)
from troupe.manager.logs import LogStore
from troupe.manager.session_events import SYSTEM
from troupe.manager.store.models import Session, User
from troupe.manager.store.unit import Store

log = logging.getLogger(__name__)
S = SessionStatus
#: A session's start or restart in place, run with its inbox of kernel exits: None once
#: RUNNING, else why it failed.
BringUp = Callable[[Life, str, preparing.Inbox], Coroutine[Any, Any, dict[str, Any] | None]]


class Registry:
    def __init__(
        self,
        config: ServerConfig,
        store: Store,
        agents: Mapping[str, AgentBackend],
        remote: RemoteFactory,
    ) -> None:
        self.config = config
        self.store = store
        self.fleet = Fleet(config, store, agents, remote)
        self.life = Life(
            config, store, self.fleet, LogStore(config.logs_dir, config.saved_logs_total)
        )
        #: the scheduler's backlog, kept between passes
        self.placer = placing.Placer(self.life)
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._preparers: dict[str, asyncio.Task[None]] = {}
        self._inboxes: dict[str, preparing.Inbox] = {}
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    # -- start and stop ----------------------------------------------------------
    async def start(self) -> None:
        """Starts the agents, reconciles the sessions, starts the loops."""
        await self.fleet.start()
        await reconcile.reconcile(self.life, self.end, self._replace)
        self.placer.listen()
        self._spawn(self._scheduler_loop(), "scheduler")
        self._spawn(self.fleet.pauses.run(), "pause-ticker")
        self._spawn(self._heartbeat_loop(), "heartbeat-check")
        self._spawn(self._event_loop(), "fleet-events")
        self._spawn(self._wake_on_changes(), "wake-on-changes")
        self._wake.set()

    async def stop(self) -> None:
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self.placer.close()
        await self.fleet.stop()

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        t = asyncio.create_task(coro, name=name)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)
        return t

    # -- reading -------------------------------------------------------------------
    async def get(self, session_id: str) -> Session:
        return await self.life.session(session_id)

    async def wait_for(
        self, session_id: str, until: Callable[[SessionStatus], bool], timeout: float
    ) -> Session:
        """The session once its status satisfies ``until``, or when ``timeout`` passed. Reads
        the database when it begins and when it ends only: the statuses in between come from
        the change bus (a waiter that reloaded the session on every change of any session
        took the event loop from the sessions being started). Holds no database connection
        while it waits."""
        deadline = time.monotonic() + timeout
        with self.store.bus.subscribe() as changes:  # before reading: miss nothing
            status = await self.life.status(session_id)
            while not until(status):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    async with asyncio.timeout(remaining):  # not wait_for: it can swallow a cancel
                        c = await changes.get()
                except TimeoutError:
                    break
                if c.kind == "session" and c.id == session_id:
                    status = S(c.new)
        return await self.get(session_id)

    # -- the steps ---------------------------------------------------------------
    async def create(self, owner: User, req: SessionCreate) -> Session:
        """The new PENDING session, as stored (its ``owner`` is not loaded: use ``owner``)."""
        return await admission.admit(self.life, owner, req)

    async def destroy(self, session_id: str, actor: str) -> Session:
        """Ends the session for ``actor`` (``user NAME``, or ``admin NAME`` for an admin
        destroying another user's session)."""
        who, name = actor.split(" ", 1)
        reason = "destroyed by user" if who == "user" else f"destroyed by {who} {name}"
        await self.end(session_id, S.TERMINATED, {"reason": reason}, actor=actor)
        return await self.get(session_id)

    async def end(
        self,
        session_id: str,
        ending: SessionStatus,
        info: dict[str, Any],
        exit_code: int | None = None,
        actor: str = SYSTEM,
    ) -> None:
        """Tears a session down to ``ending`` (one teardown at a time per session)."""
        async with self._locks[session_id]:
            await teardown.teardown(
                self.life, session_id, ending, info, self._stop_preparer, exit_code, actor
            )
        self._locks.pop(session_id, None)

    async def _stop_preparer(self, session_id: str) -> None:
        task = self._preparers.get(session_id)
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _prepare(self, session_id: str) -> None:
        await self._bring_up(session_id, preparing.prepare)

    async def _bring_up(self, session_id: str, step: BringUp, failed: str = "") -> None:
        """A start (:func:`preparing.prepare`) or a restart in place (:func:`restarting.restart`,
        ``failed`` the reason's prefix): the session's kernels' exits go to its inbox
        meanwhile; a failure ends it (unless left to a lost agent's re-placement)."""
        inbox = self._inboxes[session_id] = preparing.Inbox()
        try:
            failure = await step(self.life, session_id, inbox)
        finally:
            # From here on, exits of this session are handled as those of a RUNNING one.
            self._inboxes.pop(session_id, None)
            self._preparers.pop(session_id, None)
        if failure is not None:
            if await self._left_to_lost(session_id, failure):
                return
            await exits.record_exit_codes(self.life, session_id, [e.exit for e in inbox.exits])
            if failed:
                failure["reason"] = f"{failed}{failure.get('reason', '')}"
            await self.end(session_id, S.ERROR, failure)
            return
        for ev in inbox.exits:  # arrived between the readiness check and RUNNING
            await self._running_exit(ev)

    async def _running_exit(self, ev: KernelExited) -> None:
        outcome = await exits.record_running_exit(self.life, ev.agent_id, ev.exit)
        sid = ev.exit.session_id
        if outcome is None:
            return
        if outcome.ending == S.RESTARTING:
            self._preparers[sid] = self._spawn(self._restart(sid), f"restart-{sid}")
            return
        await self.end(sid, outcome.ending, outcome.info, outcome.exit_code)

    async def _restart(self, session_id: str) -> None:
        """A whole-session restart in place (:mod:`troupe.manager.life.restarting`)."""
        await self._bring_up(session_id, restarting.restart, failed="restart failed: ")

    async def _left_to_lost(self, session_id: str, failure: dict[str, Any]) -> bool:
        """Whether a failed start (or restart) was left to a lost agent's re-placement: an
        agent of the session stopped answering, and its heartbeat time-out came (the session
        moved on: placed again); False once the time-out passed with the session where it
        was (it fails with ``failure``), or at once for a kernel's exit or another failure."""
        if "exit_code" in failure:
            return False
        before = await lost.awaits_verdict(self.life, session_id)
        if before is None:
            return False
        status, restarts = before
        s = await self.wait_for(
            session_id,
            lambda now: now != status,
            lost.verdict_seconds(self.life),
        )
        return (s.status, s.restarts) != (status, restarts)

    async def _lost(self, session_id: str, event: AgentLost, host: str) -> None:
        """One session of a lost agent: placed again under its restart rule, in whatever
        phase (its preparer or restart in place stopped first: it must not go on with the
        kernels being removed), or failed with ``agent lost``."""
        judged = await replacing.judge(self.life, session_id)
        if judged.verdict == replacing.Verdict.REPLACE:
            await self._stop_preparer(session_id)
            judged = await replacing.begin(
                self.life, session_id, event.agent_id, host, event.message
            )
        if judged.verdict == replacing.Verdict.REPLACE:
            self._replace(session_id)
        elif judged.verdict == replacing.Verdict.FAIL:
            info = {
                "reason": "agent lost",
                "agent": event.agent_id,
                "kernel": host,
                "message": event.message,
            }
            restarts = judged.restarts
            await self.end(
                session_id, S.ERROR, {**info, "restarts": restarts} if restarts else info
            )

    def _replace(self, session_id: str) -> None:
        self._preparers[session_id] = self._spawn(
            self._place_again(session_id), f"replace-{session_id}"
        )

    async def _place_again(self, session_id: str) -> None:
        """A session that lost an agent, on its way back to PENDING
        (:mod:`troupe.manager.life.replacing`); the scheduler takes it from there."""
        try:
            await replacing.place_again(self.life, session_id)
        except Exception as e:
            log.exception("placing %s again failed", session_id)
            info = {"reason": f"restart failed: could not place it again: {e}"}
            await self.end(session_id, S.ERROR, info)
        finally:  # (the scheduler may have placed it and started its preparer since)
            if self._preparers.get(session_id) is asyncio.current_task():
                del self._preparers[session_id]

    # -- loops -----------------------------------------------------------------------
    async def _scheduler_loop(self) -> None:
        last_sweep = time.monotonic()
        last_retention = -retention.INTERVAL  # a first sweep at start
        next_pass = 5.0
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(next_pass):  # not wait_for: it can swallow a cancel
                    await self._wake.wait()
            self._wake.clear()
            next_pass = self.fleet.check_within
            try:
                with SCHEDULER_PASS.time():
                    result = await self.placer.place()
                if result.next_due is not None:
                    next_pass = min(next_pass, result.next_due)
                for sid in result.placed:
                    self._preparers[sid] = self._spawn(self._prepare(sid), f"prepare-{sid}")
                if time.monotonic() - last_sweep > self.config.sweep_interval:
                    last_sweep = time.monotonic()
                    await self.fleet.sweep_orphans()
                if time.monotonic() - last_retention > retention.INTERVAL:
                    last_retention = time.monotonic()
                    await retention.sweep(self.life)
            except Exception:
                log.exception("scheduling pass failed")

    async def _heartbeat_loop(self) -> None:
        """Checks the agents' heartbeats in a task of its own: the scheduler loop's awaits (an
        orphan sweep waiting on a silent agent) do not delay its loss."""
        while True:
            await asyncio.sleep(self.fleet.check_every)
            try:
                await self.fleet.check()
            except Exception:
                log.exception("heartbeat check failed")

    async def _wake_on_changes(self) -> None:
        """New sessions, freed resources and returning agents wake the scheduler."""
        with self.store.bus.subscribe() as changes:
            while True:
                c = await changes.get()
                if c.kind == "agent" or (
                    c.kind == "session" and (c.new == S.PENDING or S(c.new).is_final)
                ):
                    self._wake.set()

    async def _event_loop(self) -> None:
        """The fleet's reports, in the order they happened."""
        while True:
            event = await self.fleet.events.get()
            try:
                await self._on_event(event)
            except Exception:
                log.exception("handling %s failed", event)

    async def _on_event(self, event: FleetEvent) -> None:
        if isinstance(event, KernelExited):
            inbox = self._inboxes.get(event.exit.session_id)
            if inbox is not None:
                inbox.put(event)
            else:
                self._spawn(self._running_exit(event), "kernel-exit")
        elif isinstance(event, AgentLost):
            for sid, host in (await lost.victims_of(self.life, event.agent_id)).items():
                self._spawn(self._lost(sid, event, host), f"agent-lost-{sid}")
        elif isinstance(event, AgentBack):
            self.placer.touch_agent(event.agent_id)
            self._spawn(self._sweep_then_place(), "sweep")

    async def _sweep_then_place(self) -> None:
        """An agent is back: what it holds of sessions over, or placed again elsewhere, is
        removed before the scheduler may place a session there again (the same container
        names)."""
        try:
            await self.fleet.sweep_orphans()
        finally:
            self._wake.set()

    # -- folders ---------------------------------------------------------------------
    async def delete_folder_data(self, folder_id: str) -> None:
        path = self.config.folders_dir / folder_id
        await asyncio.to_thread(shutil.rmtree, path, True)
