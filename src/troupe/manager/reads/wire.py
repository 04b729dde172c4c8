"""Stored rows -> wire models (what the API shows of sessions).

One function shapes a :class:`SessionInfo` (:func:`session_wire`) from the session's and
kernels' shown fields as plain dicts: taken from ORM objects (:func:`session_info`) or from
rows of only the columns shown (:func:`session_wires`, for pages of the list, where loading ORM
objects with their keys and relationships took most of the time). The list sends that data as
it is (orjson); everything else validates it into the model.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Select, bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.lifecycle import SessionStatus
from troupe.api.models import SessionInfo
from troupe.api.session_times import STOP_GRACE, deadline, idle_deadline
from troupe.manager.store.models import Kernel, Session, User

#: Phases of a kernel's start-up, in order (stamped in its timeline).
KERNEL_PHASES = ("created", "started", "entrypoint", "ready")
#: What a SessionInfo shows of a session row, and of each kernel row.
SESSION_COLUMNS = (
    Session.id,
    Session.name,
    Session.status,
    Session.status_info,
    Session.type,
    Session.image,
    Session.cluster_size,
    Session.cluster_mode,
    Session.cpu,
    Session.mem,
    Session.gpu,
    Session.mounts,
    Session.dist_env,
    Session.group,
    Session.priority,
    Session.uid,
    Session.gid,
    Session.isolated_network,
    Session.network,
    Session.subnet,
    Session.exit_code,
    Session.created_at,
    Session.started_at,
    Session.terminated_at,
    Session.timeline,
    Session.time_limit,
    Session.stop_grace,
    Session.idle_timeout,
    Session.idle_since,
    Session.max_restarts,
    Session.no_restart_exit_codes,
    Session.success_policy,
    Session.restarts,
    Session.restart_history,
)
KERNEL_COLUMNS = (
    Kernel.session_id,
    Kernel.id,
    Kernel.hostname,
    Kernel.role,
    Kernel.idx,
    Kernel.rank,
    Kernel.agent_id,
    Kernel.container_id,
    Kernel.ip,
    Kernel.status,
    Kernel.exit_code,
    Kernel.oom_killed,
    Kernel.timeline,
    Kernel.gpus,
    Kernel.image,
    Kernel.cpu,
    Kernel.mem,
    Kernel.gpu,
)


#: The keys of a session's and a kernel's shown fields (the columns' names).
SESSION_KEYS = tuple(c.key for c in SESSION_COLUMNS)
KERNEL_KEYS = tuple(c.key for c in KERNEL_COLUMNS)


def _since(t0: datetime, timeline: Mapping[str, str], keys: Mapping[str, str]) -> dict[str, float]:
    """Seconds from ``t0`` to each phase (``keys``: phase -> timeline key) that ``timeline``
    has (ms precision; bad stamps skipped)."""
    out = {}
    for phase, key in keys.items():
        if at := timeline.get(key):
            try:
                out[phase] = round((datetime.fromisoformat(at) - t0).total_seconds(), 3)
            except (TypeError, ValueError):
                continue
    return out


_KERNEL_STAMPS = {p: p for p in KERNEL_PHASES}
_SESSION_STAMPS = {"scheduled": "SCHEDULED", "pulled": "pulled", "network": "network"}
_READY_STAMP = {"ready": "RUNNING"}


def phases(
    s: Mapping[str, Any], kernels: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, float], list[dict[str, float]]]:
    """The session's start-up phases and each kernel's, as seconds after creation: what the
    benchmarks and the web UI show. The session's kernel phases are the slowest kernel's."""
    t0 = s["created_at"]
    per_kernel = [_since(t0, k["timeline"], _KERNEL_STAMPS) for k in kernels]
    session = _since(t0, s["timeline"], _SESSION_STAMPS)
    for phase in KERNEL_PHASES[:-1]:
        if per_kernel and all(phase in k for k in per_kernel):
            session[phase] = max(k[phase] for k in per_kernel)
    session.update(_since(t0, s["timeline"], _READY_STAMP))
    return session, per_kernel


def session_wire(
    s: Mapping[str, Any], owner: str, kernels: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """A :class:`SessionInfo` as the JSON-ready data it is sent as, keys in its fields' order.

    ``s`` and ``kernels`` map :data:`SESSION_KEYS` / :data:`KERNEL_KEYS` to stored values
    (kernels in rank order). A page of the list is sent as these, dumped with orjson
    (:func:`session_wires`): validating the page into models and dumping those took a third
    of its time; a property test holds this shape to the model's own validation and dump."""
    session_phases, kernel_phases = phases(s, kernels)
    return {
        **clocks(s),  # (first: SessionInfo has them from its base, TimesInfo)
        "id": s["id"],
        "name": s["name"],
        "owner": owner,
        "status": s["status"],
        "status_info": s["status_info"],
        "type": s["type"],
        "image": s["image"],
        "cluster_size": s["cluster_size"],
        "cluster_mode": s["cluster_mode"],
        "resources": {"cpu": float(s["cpu"]), "mem": s["mem"], "gpu": s["gpu"]},
        "mounts": [{"folder": m["folder"], "readonly": m["readonly"]} for m in s["mounts"]],
        "dist_env": s["dist_env"],
        "group": s["group"],
        "priority": s["priority"],
        "uid": s["uid"],
        "gid": s["gid"],
        "isolated_network": s["isolated_network"],
        "network": s["network"],
        "subnet": s["subnet"],
        "exit_code": s["exit_code"],
        "created_at": s["created_at"],
        "started_at": s["started_at"],
        "terminated_at": s["terminated_at"],
        "timeline": s["timeline"],
        "phases": session_phases,
        "kernels": [
            {
                "id": k["id"],
                "hostname": k["hostname"],
                "role": k["role"],
                "idx": k["idx"],
                "rank": k["rank"],
                "image": k["image"],
                "resources": {"cpu": float(k["cpu"]), "mem": k["mem"], "gpu": k["gpu"]},
                "agent": k["agent_id"],
                "container_id": k["container_id"],
                "ip": k["ip"],
                "status": k["status"],
                "exit_code": k["exit_code"],
                "oom_killed": k["oom_killed"],
                "timeline": k["timeline"],
                "gpus": k["gpus"] or [],
                "phases": p,
            }
            for k, p in zip(kernels, kernel_phases, strict=True)
        ],
        "usage": None,  # read for one finished session only (reads.sessions.session_by_ref)
        "max_restarts": s["max_restarts"] or 0,
        "no_restart_exit_codes": s["no_restart_exit_codes"] or [],
        "success_policy": s["success_policy"] or "main",
        "restarts": s["restarts"] or 0,
        "restart_history": [
            {key: r.get(key, default) for key, default in _RECORD_KEYS}
            for r in s["restart_history"] or []
        ],
    }


def clocks(s: Mapping[str, Any]) -> dict[str, Any]:
    """The session's clocks as :class:`~troupe.api.session_times.TimesInfo` shows them: its
    durations and the deadlines they make (idle ones only while it is RUNNING)."""
    running = s["status"] == SessionStatus.RUNNING
    idle_since = s["idle_since"] if running and s["idle_timeout"] is not None else None
    return {
        "time_limit": s["time_limit"],
        "stop_grace": s["stop_grace"] if s["stop_grace"] is not None else STOP_GRACE,
        "idle_timeout": s["idle_timeout"],
        "deadline": deadline(s["started_at"], s["time_limit"]),
        "idle_since": idle_since,
        "idle_deadline": idle_deadline(idle_since, s["idle_timeout"]),
    }


#: a restart record's keys in the model's order, with their defaults
_RECORD_KEYS: tuple[tuple[str, Any], ...] = (
    ("attempt", 0),
    ("kernel", ""),
    ("reason", ""),
    ("exit_code", None),
    ("oom_killed", False),
    ("last_logs", []),
    ("agent", None),
    ("at", ""),
)


def fields(obj: Any, keys: Sequence[str]) -> dict[str, Any]:
    """An ORM object's shown fields as :func:`session_wire` takes them."""
    return {k: getattr(obj, k) for k in keys}


def session_info(s: Session, owner: str | None = None) -> SessionInfo:
    """The wire model of a loaded session (with its kernels; its owner's name unless given):
    one validation of plain data builds the whole model (constructing the nested models one by
    one took most of a list page's time)."""
    return SessionInfo.model_validate(
        session_wire(
            fields(s, SESSION_KEYS),
            s.owner.name if owner is None else owner,
            [fields(k, KERNEL_KEYS) for k in s.kernels],
        )
    )


def session_columns() -> Select[Any]:
    """``SELECT`` of what :func:`session_wires` shows (with the owner's name as ``owner``), for
    the caller to filter and order."""
    return select(*SESSION_COLUMNS, User.name.label("owner")).join(
        User, User.id == Session.owner_id
    )


@functools.cache
def kernels_query() -> Select[Any]:
    """The shown fields of the kernels of the sessions ``ids`` (a parameter), built once."""
    return (
        select(*KERNEL_COLUMNS)
        .where(Kernel.session_id.in_(bindparam("ids", expanding=True)))
        .order_by(Kernel.session_id, Kernel.rank)
    )


async def session_wires(
    db: AsyncSession, q: Select[Any], params: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The sessions ``q`` (from :func:`session_columns`, with ``params``) selects, in its
    order, with their kernels (one more query), as :func:`session_wire` data. Rows come
    through the Core connection: loading them through the ORM session cost a page a fifth
    of its time."""
    conn = await db.connection()
    rows = (await conn.execute(q, dict(params or {}))).all()
    if not rows:
        return []
    kernels: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
    for k in (await conn.execute(kernels_query(), {"ids": [r.id for r in rows]})).all():
        kernels[k.session_id].append(dict(zip(KERNEL_KEYS, k, strict=True)))
    keys = (*SESSION_KEYS, "owner")
    out = []
    for r in rows:
        s = dict(zip(keys, r, strict=True))
        out.append(session_wire(s, s.pop("owner"), kernels[s["id"]]))
    return out


def as_infos(wires: Sequence[Mapping[str, Any]]) -> list[SessionInfo]:
    """:func:`session_wires` data as models (the web pages read their attributes)."""
    return [SessionInfo.model_validate(w) for w in wires]
