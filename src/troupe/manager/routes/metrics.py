"""/v1/sessions/{ref}/metrics and /v1/agents/{name}/metrics: utilisation over time
(docs/metrics.md).

A session is looked up as everywhere (own sessions; all for admins; another user's is not
found); an agent's figures are for admins. ``since`` is epoch seconds or an RFC 3339 time; a
malformed one or one in the future is refused naming ``since``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from troupe.api.errors import NotFound
from troupe.api.metrics import AgentUsage, KernelMetrics, SessionMetrics, parse_since
from troupe.manager.deps import DB, AdminUser, CurrentUser
from troupe.manager.metrics_feed import Feed
from troupe.manager.reads.sessions import lookup, stored_summary
from troupe.manager.store.models import Agent

router = APIRouter(tags=["metrics"])

Since = Annotated[
    str | None,
    Query(
        description="only samples taken after this time: epoch seconds or RFC 3339, "
        "e.g. 2026-11-27T10:00:00Z"
    ),
]


def feed_of(request: Request) -> Feed:
    feed: Feed = request.app.state.metrics
    return feed


@router.get("/sessions/{ref}/metrics", response_model=SessionMetrics)
async def session_metrics(
    ref: str, request: Request, db: DB, user: CurrentUser, since: Since = None
) -> SessionMetrics:
    after = parse_since(since)
    s = await lookup(request, user, ref)
    feed = feed_of(request)
    if not s.status.is_final:
        await feed.refresh({k.agent_id for k in s.kernels if k.agent_id})
    kernels = [
        KernelMetrics(hostname=k.hostname, samples=feed.history.kernel(s.id, k.hostname, after))
        for k in s.kernels
    ]
    summary = await stored_summary(db, s.id) if s.status.is_final else None
    return SessionMetrics(
        id=s.id, name=s.name, status=str(s.status), kernels=kernels, summary=summary
    )


@router.get("/agents/{name}/metrics", response_model=AgentUsage)
async def agent_metrics(
    name: str, request: Request, db: DB, _: AdminUser, since: Since = None
) -> AgentUsage:
    after = parse_since(since)
    agent = await db.get(Agent, name)
    if agent is None:
        raise NotFound.of("agent", name)
    feed = feed_of(request)
    await feed.refresh([agent.id])
    return AgentUsage(
        name=agent.name,
        cpu=agent.cpu,
        mem=agent.mem,
        gpu=agent.gpu,
        samples=feed.history.host(agent.id, after),
    )
