"""Placing: one pass of the scheduler over the PENDING sessions, in one transaction.

The decision itself is the pure :func:`troupe.manager.scheduler_backlog.schedule`; this step loads
its inputs, cancels sessions pending too long, records placements (SCHEDULED) and each
waiting session's why-pending report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.lifecycle import KernelStatus, SessionStatus, transition, utcnow
from troupe.manager.life.admission import lost_states
from troupe.manager.life.context import Life
from troupe.manager.life.teardown import wipe_keys
from troupe.manager.roles import request_of
from troupe.manager.scheduler import Part, assign_gpus
from troupe.manager.scheduler_backlog import schedule
from troupe.manager.session_events import SCHEDULER
from troupe.manager.store.models import Kernel, Session
from troupe.manager.store.unit import changes_of


def kernel_parts(kernels: Sequence[Kernel]) -> list[Part]:
    """A stored session's kernels (in rank order) as the scheduler's parts, one per role."""
    parts: list[Part] = []
    for k in kernels:
        if parts and parts[-1].role == k.role:
            parts[-1] = parts[-1]._replace(kernels=parts[-1].kernels + 1)
        else:
            parts.append(Part(k.role, 1, k.cpu, k.mem, k.gpu))
    return parts


def pending_since(s: Session) -> datetime:
    """When the session last became PENDING: its creation, or its re-placement after a lost
    agent (``max_pending_seconds`` counts from there)."""
    again = (s.timeline or {}).get(SessionStatus.PENDING.value) if s.restarts else None
    return datetime.fromisoformat(again) if again else s.created_at


@dataclass
class Pass:
    placed: list[str] = field(default_factory=list)
    #: seconds until a pending session's max_pending_seconds runs out (next pass due)
    next_due: float | None = None


async def place_pending(life: Life) -> Pass:
    async def step(db: AsyncSession) -> Pass:
        result = Pass()
        pending = list(
            (
                await db.execute(select(Session).where(Session.status == SessionStatus.PENDING))
            ).scalars()
        )
        if not pending:
            return result
        now = utcnow()
        changes = changes_of(db)
        live = []
        for s in pending:
            waited = (now - pending_since(s)).total_seconds()
            if s.max_pending_seconds and waited >= s.max_pending_seconds:
                limit = f"max_pending_seconds ({s.max_pending_seconds:g} s)"
                reason = f"pending longer than {limit}"
                s.status_info = {**s.status_info, "reason": reason}
                transition(s, SessionStatus.CANCELLED, changes, now, reason=reason, actor=SCHEDULER)
                for k in s.kernels:
                    transition(k, KernelStatus.TERMINATED, changes, now)
                wipe_keys(s)
                continue
            live.append(s)
            if s.max_pending_seconds:
                due = s.max_pending_seconds - waited + 0.05
                result.next_due = due if result.next_due is None else min(result.next_due, due)
        agents = await life.fleet.states(db)
        lost = await lost_states(life, db)
        decision = schedule(
            [
                request_of(
                    s.id,
                    s.group,
                    s.cluster_mode,
                    kernel_parts(s.kernels),
                    priority=s.priority,
                    order=s.created_at.timestamp(),
                )
                for s in live
            ],
            agents,
            lost,
        )
        free_gpus = {a.id: list(a.gpu_free_ids) for a in agents}
        for s in live:
            if s.id in decision.placements:
                placed = decision.placements[s.id]
                gpus = assign_gpus(free_gpus, placed, [k.gpu for k in s.kernels])
                for k, agent_id, devices in zip(s.kernels, placed, gpus, strict=True):
                    k.agent_id, k.gpus = agent_id, devices
                s.status_info = {}
                where = ", ".join(sorted(set(placed)))
                transition(
                    s,
                    SessionStatus.SCHEDULED,
                    changes,
                    now,
                    reason=f"placed on {where}",
                    actor=SCHEDULER,
                )
                result.placed.append(s.id)
            else:
                reasons = decision.waiting.get(s.id, [])
                report = {k.hostname: reasons for k in s.kernels}
                if s.status_info.get("pending") != report:
                    s.status_info = {"pending": report}
        return result

    return await life.store.write(step)
