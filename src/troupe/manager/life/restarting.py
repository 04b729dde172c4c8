"""Restarting: RESTARTING -> RUNNING, the whole session again, in place.

A kernel's failure with restarts left (:mod:`.judging`) moved the session and its kernels to
RESTARTING. Here every kernel is started again in the container it had, on its agent
(``restart_kernels``, see :mod:`troupe.agent.restart`: a container still running is set up
again by its supervising entrypoint without a new start; the failed one is started again):
the same container, name, hostname, address, keys, network and folders, without the removal
and creation a fresh start pays. A container that is gone or was
killed for memory is made anew by its agent. Then the start's own steps run again: the
readiness barrier, RUNNING, the batch "go"; the network's creation is skipped (it stays).
``TROUPE_RESTART_COUNT`` in every kernel is the session's ``restarts`` (the kernel's
``kernel.conf``, read at every start). The failed attempt's log of each kernel is saved as
that attempt's. A kernel whose agent is LOST or gone cannot be restarted in place: the
restart fails, and the session ends with the reason.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.agent import KernelStarted, NetworkSpec
from troupe.api.aio import gather_all
from troupe.api.errors import AgentFailed
from troupe.api.lifecycle import SessionStatus
from troupe.api.models import SessionType
from troupe.manager.life.context import Life, load
from troupe.manager.life.preparing import (
    Abandoned,
    Inbox,
    Plan,
    Progress,
    guarded,
    raise_exits,
    settled,
    specs_by_agent,
    start_kernels,
)

S = SessionStatus


async def restart(life: Life, session_id: str, inbox: Inbox) -> dict[str, Any] | None:
    """Runs the restart; None once RUNNING again (or no longer ours), else why it failed."""

    async def steps(progress: Progress) -> None:
        progress.step = "starting the kernels again"
        plan, attempt = await _begin(life, session_id)
        plan.progress = progress

        async def again(life: Life, plan: Plan, inbox: Inbox) -> dict[str, KernelStarted]:
            by_agent = specs_by_agent(plan)
            lists = await settled(
                gather_all(life.fleet[a].restart_kernels(ks) for a, ks in by_agent.items())
            )
            # exits reported so far are the failed attempt's (other kernels that fell with
            # the first, say, or were killed for the restart): not failures of the restart
            inbox.exits.clear()
            inbox.arrived.clear()
            saved = {plan.kernels[k.kernel_id][0]: k.log for ks in lists for k in ks if k.log}
            if saved:
                limit = life.config.saved_log_bytes
                await asyncio.to_thread(life.logs.save, session_id, saved, limit, attempt - 1)
            raise_exits(plan, inbox)
            return {k.kernel_id: k for ks in lists for k in ks}

        await start_kernels(life, plan, inbox, again)

    return await guarded(life, steps)


async def _begin(life: Life, session_id: str) -> tuple[Plan, int]:
    """The plan of the restart (its kernels where they were) and the attempt it starts; the
    failed attempt's exit codes cleared. :class:`AgentFailed` when an agent is not there."""

    async def step(db: AsyncSession) -> tuple[Plan, int]:
        s = await load(db, session_id)
        if s.status != S.RESTARTING or not s.network:
            raise Abandoned
        kernels = {k.id: (k.hostname, k.agent_id or "") for k in s.kernels}
        reachable = life.fleet.reachable()
        for host, agent_id in kernels.values():
            if agent_id not in reachable:
                raise AgentFailed(
                    f"agent {agent_id!r} is not connected: a restart in place needs it",
                    kernel=host,
                )
        for k in s.kernels:
            k.exit_code, k.oom_killed = None, False
        network = NetworkSpec(
            name=s.network, session_id=s.id, owner=s.owner_id, subnet=s.subnet or ""
        )
        creator = next(iter(kernels.values()))[1]
        batch = s.type == SessionType.BATCH
        return Plan(network, creator, kernels, batch, s, status=S.RESTARTING), s.restarts

    return await life.store.write(step)
