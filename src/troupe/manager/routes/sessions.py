"""/v1/sessions: create, list, get, wait, destroy, logs, exec, shell."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Literal

from fastapi import APIRouter, Query, WebSocket
from fastapi.responses import StreamingResponse
from sqlalchemy import case, select

from troupe.agent.base import ExecExit
from troupe.api.models import (
    ExecRequest,
    KernelInfo,
    Mount,
    Resources,
    SessionCreate,
    SessionInfo,
    SessionStatus,
)
from troupe.api.shell import serve_shell
from troupe.manager.deps import DB, CurrentUser, RegistryDep, current_user
from troupe.manager.errors import ApiError, body, not_found
from troupe.manager.registry import ACTIVE
from troupe.manager.store.models import Session, User

router = APIRouter(tags=["sessions"])


def session_info(s: Session) -> SessionInfo:
    return SessionInfo(
        id=s.id,
        name=s.name,
        owner=s.owner.name,
        status=SessionStatus(s.status),
        status_info=s.status_info,
        type=s.type,
        image=s.image,
        cluster_size=s.cluster_size,
        cluster_mode=s.cluster_mode,
        resources=Resources(cpu=s.cpu, mem=s.mem, gpu=s.gpu),
        mounts=[Mount(folder=m["folder"], readonly=m["readonly"]) for m in s.mounts],
        dist_env=s.dist_env,
        group=s.group,
        priority=s.priority,
        uid=s.uid,
        gid=s.gid,
        isolated_network=s.isolated_network,
        network=s.network,
        subnet=s.subnet,
        exit_code=s.exit_code,
        created_at=s.created_at,
        started_at=s.started_at,
        terminated_at=s.terminated_at,
        kernels=[
            KernelInfo(
                id=k.id,
                hostname=k.hostname,
                role=k.role,
                idx=k.idx,
                rank=k.rank,
                agent=k.agent_id,
                container_id=k.container_id,
                ip=k.ip,
                status=k.status,
                exit_code=k.exit_code,
                oom_killed=k.oom_killed,
            )
            for k in s.kernels
        ],
    )


async def find_session(db: DB, user: User, ref: str) -> Session:
    """By id or name, among the user's own sessions (all for admins; own first).

    A name means the active session of that name, else the newest finished one, so logs of a
    destroyed session stay reachable by name.
    """
    q = select(Session).where((Session.id == ref) | (Session.name == ref))
    if not user.admin:
        q = q.where(Session.owner_id == user.id)
    active = case((Session.status.in_([s.value for s in ACTIVE]), 0), else_=1)
    mine = case((Session.owner_id == user.id, 0), else_=1)
    q = q.order_by(mine, active, Session.created_at.desc()).limit(1)
    s = (await db.execute(q)).scalar_one_or_none()
    if s is None:
        raise not_found("session", ref)
    return s


@router.post("/sessions", status_code=201, response_model=SessionInfo)
async def create_session(
    req: SessionCreate, user: CurrentUser, registry: RegistryDep
) -> SessionInfo:
    return session_info(await registry.create(user, req))


@router.get("/sessions", response_model=list[SessionInfo])
async def list_sessions(
    db: DB,
    user: CurrentUser,
    all: Annotated[bool, Query(description="include finished sessions")] = False,
) -> list[SessionInfo]:
    q = select(Session).order_by(Session.created_at)
    if not user.admin:
        q = q.where(Session.owner_id == user.id)
    if not all:
        q = q.where(Session.status.in_([s.value for s in ACTIVE]))
    return [session_info(s) for s in (await db.execute(q)).scalars()]


@router.get("/sessions/{ref}", response_model=SessionInfo)
async def get_session(ref: str, db: DB, user: CurrentUser) -> SessionInfo:
    return session_info(await find_session(db, user, ref))


@router.get("/sessions/{ref}/wait", response_model=SessionInfo)
async def wait_session(
    ref: str,
    db: DB,
    user: CurrentUser,
    registry: RegistryDep,
    until: Annotated[Literal["running", "final", "change"], Query()] = "running",
    since: Annotated[str | None, Query(description="status seen last (until=change)")] = None,
    timeout: Annotated[float, Query(gt=0, le=300)] = 30.0,
) -> SessionInfo:
    """Long-poll: answers once the session is RUNNING (or over), over, or changed status."""
    s = await find_session(db, user, ref)

    def done(x: Session) -> bool:
        final = SessionStatus(x.status).is_final
        if until == "running":
            return final or x.status == SessionStatus.RUNNING
        if until == "final":
            return final
        return x.status != (since or s.status) or final

    return session_info(await registry.wait_for(s.id, done, timeout))


@router.delete("/sessions/{ref}", response_model=SessionInfo)
async def destroy_session(
    ref: str, db: DB, user: CurrentUser, registry: RegistryDep
) -> SessionInfo:
    s = await find_session(db, user, ref)
    return session_info(await registry.destroy(s.id))


@router.get("/sessions/{ref}/logs", response_class=StreamingResponse)
async def session_logs(
    ref: str,
    db: DB,
    user: CurrentUser,
    registry: RegistryDep,
    container: Annotated[str | None, Query(description="hostname, e.g. sub1")] = None,
    follow: bool = False,
) -> StreamingResponse:
    s = await find_session(db, user, ref)
    lines = registry.logs(s, container, follow)
    first = await anext(lines, None)  # raise validation errors before the response starts

    async def body() -> AsyncIterator[bytes]:
        if first is not None:
            yield first.encode()
            async for line in lines:
                yield line.encode()

    return StreamingResponse(body(), media_type="text/plain; charset=utf-8")


@router.post("/sessions/{ref}/exec", response_class=StreamingResponse)
async def session_exec(
    ref: str, req: ExecRequest, db: DB, user: CurrentUser, registry: RegistryDep
) -> StreamingResponse:
    """Streams NDJSON: ``{"output": "..."}`` lines, then ``{"exit_code": N}``."""
    s = await find_session(db, user, ref)
    stream = await registry.exec(s, req)

    async def body() -> AsyncIterator[bytes]:
        async for item in stream:
            if isinstance(item, ExecExit):
                yield json.dumps({"exit_code": item.exit_code}).encode() + b"\n"
            else:
                text = item.data.decode(errors="replace")
                yield json.dumps({"output": text}).encode() + b"\n"

    return StreamingResponse(body(), media_type="application/x-ndjson")


@router.websocket("/sessions/{ref}/shell")
async def session_shell(ws: WebSocket, ref: str, kernel: str = "main1") -> None:
    """Interactive terminal in a kernel (main1 by default).

    Protocol: binary frames carry terminal bytes both ways; the client may send text frames
    ``{"resize": [rows, cols]}``; at the end the server sends ``{"exit_code": N}`` and closes.
    Errors before the shell starts: ``{"error": {...}}`` then close code 4000 + HTTP status.
    Auth: ``Authorization: Bearer KEY`` header (or ``api_key`` query parameter for browsers).
    """
    await ws.accept()
    async with ws.app.state.db() as db:
        try:
            user = await current_user(ws, db)  # type: ignore[arg-type]
            s = await find_session(db, user, ref)
            agent, container_id = ws.app.state.registry.kernel_target(s, kernel)
        except ApiError as e:
            await ws.send_text(json.dumps(body(e.code, e.message, e.field)))
            await ws.close(code=4000 + e.status)
            return
    async with agent.shell(container_id) as sh:
        await serve_shell(ws, sh)
