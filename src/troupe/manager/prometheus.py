"""``GET /metrics``: the manager in Prometheus's text format (docs/metrics.md, "Prometheus").

Two kinds of series: those measured as things happen, in this module's registry (API request
latency by route template, scheduler pass time), and those read at scrape time from the
database, the fleet and the utilisation history (sessions by status, kernels, pending time,
agents' capacity and allocation, each running kernel's utilisation). Labels are bounded: route
templates, statuses, agent names, and (owner, session name, kernel hostname) of running
kernels only: a kernel's series go when its session ends.

The scrape needs an admin's API key or the scrape token (``troupe server
--metrics-token-file``) as ``Authorization: Bearer``; without either it answers 401.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from fastapi import APIRouter, Request, Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from troupe.api.errors import Forbidden
from troupe.api.lifecycle import SESSION_ACTIVE, SESSION_HAS_KERNELS, SessionStatus
from troupe.manager.deps import authenticate, bearer
from troupe.manager.instruments import API_LATENCY, REGISTRY
from troupe.manager.metrics_feed import Feed
from troupe.manager.registry import Registry
from troupe.manager.scheduler import AgentState
from troupe.manager.store.models import Kernel, Session, User

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Latency:
    """ASGI middleware timing each HTTP request under its route's template (``/v1/sessions/
    {ref}``), so the label stays bounded; requests that match no route are ``unmatched``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        observed = False

        def observe() -> None:
            nonlocal observed
            if not observed:
                observed = True
                API_LATENCY.labels(scope["method"], template(scope)).observe(
                    time.perf_counter() - start
                )

        async def timed(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                observe()

        try:
            await self.app(scope, receive, timed)
        finally:
            observe()


def template(scope: Scope) -> str:
    """The matched route's path template, with the ``/v1`` prefix its router was included
    under (FastAPI keeps included routes' own paths); ``unmatched`` when no route matched."""
    path = getattr(scope.get("route"), "path", None)
    if not isinstance(path, str):
        return "unmatched"
    if scope["path"].startswith("/v1/") and not path.startswith("/v1/"):
        return "/v1" + path
    return path


class Snapshot(Collector):
    """Families read once for one scrape."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def scrape_token(path: Path | None) -> str | None:
    """The scrape token in ``path`` (None without a file; an empty file is no token)."""
    if path is None:
        return None
    token = path.read_text().strip()
    return token or None


async def allowed(request: Request, token: str | None) -> None:
    """The scrape token, else an admin's key: :class:`Unauthorized` without either,
    :class:`Forbidden` for another user's key."""
    sent = bearer(request)
    if token and sent and hmac.compare_digest(sent.encode(), token.encode()):
        return
    user = await authenticate(request.app.state.db, request)
    if not user.admin:
        raise Forbidden("/metrics: admin only (or the scrape token)")


async def families(registry: Registry, feed: Feed) -> list[Metric]:
    """What the database, the fleet and the history say now."""
    out: list[Metric] = []
    async with registry.store() as db:
        by_status = dict(
            (await db.execute(select(Session.status, func.count()).group_by(Session.status))).all()
        )
        kernels = (
            await db.execute(
                select(func.count())
                .select_from(Kernel)
                .join(Session, Kernel.session_id == Session.id)
                .where(Session.status.in_(SESSION_HAS_KERNELS))
            )
        ).scalar_one()
        pending = list(
            (
                await db.execute(
                    select(Session.created_at).where(Session.status == SessionStatus.PENDING)
                )
            ).scalars()
        )
        states = await registry.fleet.states(db)
        running = (
            await db.execute(
                select(Session.id, Session.name, User.name)
                .join(User, Session.owner_id == User.id)
                .where(Session.status.in_(SESSION_ACTIVE))
            )
        ).all()
    g = GaugeMetricFamily("troupe_sessions", "Sessions by status", labels=["status"])
    for status in SessionStatus:
        g.add_metric([status.value], by_status.get(status, 0))
    out.append(g)
    out.append(GaugeMetricFamily("troupe_kernels", "Kernels of sessions that hold them", kernels))
    now = datetime.now(UTC)
    waits = [(now - t).total_seconds() for t in pending]
    out.append(
        GaugeMetricFamily(
            "troupe_pending_oldest_seconds",
            "How long the oldest PENDING session has waited (0: none waits)",
            max(waits, default=0.0),
        )
    )
    out.append(
        GaugeMetricFamily(
            "troupe_pending_seconds_total",
            "Sum of the waits of the PENDING sessions (with troupe_sessions: their mean)",
            sum(waits),
        )
    )
    out += agent_families(states)
    out += kernel_families(feed, [(sid, name, owner) for sid, name, owner in running])
    return out


def agent_families(states: Iterable[AgentState]) -> list[Metric]:
    fams = {
        key: GaugeMetricFamily(f"troupe_agent_{key}", help_, labels=["agent"])
        for key, help_ in (
            ("cpu_cores", "Cores an ALIVE agent offers"),
            ("cpu_allocated_cores", "Cores allocated to kernels on the agent"),
            ("memory_bytes", "Memory an ALIVE agent offers"),
            ("memory_allocated_bytes", "Memory allocated to kernels on the agent"),
            ("gpus", "GPUs an ALIVE agent offers"),
            ("gpus_allocated", "GPUs allocated to kernels on the agent"),
        )
    }
    for a in states:
        values = {
            "cpu_cores": a.cpu,
            "cpu_allocated_cores": a.cpu_used,
            "memory_bytes": a.mem,
            "memory_allocated_bytes": a.mem_used,
            "gpus": a.gpu,
            "gpus_allocated": a.gpu_used,
        }
        for key, v in values.items():
            fams[key].add_metric([a.id], float(v))
    return list(fams.values())


#: Per-kernel gauges: name, help, the sample's field.
KERNEL_GAUGES = (
    ("cpu_cores", "Cores the kernel used over the last interval", "cpu_cores"),
    ("cpu_limit_cores", "The kernel's CPU limit", "cpu_limit"),
    ("memory_bytes", "Memory the kernel uses", "mem_bytes"),
    ("memory_limit_bytes", "The kernel's memory limit", "mem_limit"),
    ("network_receive_bytes_per_second", "Received over the last interval", "net_rx_bps"),
    ("network_transmit_bytes_per_second", "Sent over the last interval", "net_tx_bps"),
    ("oom_killed", "1 if the kernel's memory cgroup OOM-killed a process", "oom_killed"),
)


def kernel_families(feed: Feed, running: list[tuple[str, str, str]]) -> list[Metric]:
    """The newest sample of every kernel of an active session, labelled by owner, session
    (name) and kernel (hostname): unique among active sessions."""
    labels = ["owner", "session", "kernel"]
    fams = {
        field: GaugeMetricFamily(f"troupe_kernel_{name}", help_, labels=labels)
        for name, help_, field in KERNEL_GAUGES
    }
    gpu_util = GaugeMetricFamily(
        "troupe_kernel_gpu_utilization_percent",
        "A GPU's utilisation",
        labels=[*labels, "gpu"],
    )
    gpu_mem = GaugeMetricFamily(
        "troupe_kernel_gpu_memory_bytes", "A GPU's memory used", labels=[*labels, "gpu"]
    )
    names = {sid: (name, owner) for sid, name, owner in running}
    for (sid, host), series in list(feed.history.kernels.items()):
        if sid not in names:
            continue
        s = series.newest()
        if s is None:
            continue
        name, owner = names[sid]
        for field, fam in fams.items():
            v = getattr(s, field)
            if v is not None:
                fam.add_metric([owner, name, host], float(v))
        for gpu in s.gpus:
            key = [owner, name, host, str(gpu.index)]
            if gpu.util_pct is not None:
                gpu_util.add_metric(key, gpu.util_pct)
            if gpu.mem_bytes is not None:
                gpu_mem.add_metric(key, float(gpu.mem_bytes))
    return [*fams.values(), gpu_util, gpu_mem]


def text(extra: list[Metric]) -> bytes:
    snapshot = CollectorRegistry(auto_describe=False)
    snapshot.register(Snapshot(extra))
    return generate_latest(REGISTRY) + generate_latest(snapshot)


router = APIRouter(tags=["metrics"])


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    await allowed(request, request.app.state.scrape_token)
    body = text(await families(request.app.state.registry, request.app.state.metrics))
    return Response(body, media_type=CONTENT_TYPE)
