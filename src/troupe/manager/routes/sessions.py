"""/v1/sessions: create, list, get, wait, destroy, logs, exec, shell.

Long requests (wait, logs, exec, shell) look the session up in a short transaction and hold
no database connection while they wait or stream. Those that may last (wait, logs, exec,
shell) each hold one of the user's stream slots (:mod:`troupe.manager.streams`), taken
after every other check and before the answer starts, released when they end or their client
goes away. Look-ups and lists are :mod:`troupe.manager.reads`'s, shared with the web pages.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Literal

import orjson
from fastapi import APIRouter, Query, Request, Response, WebSocket
from fastapi.responses import StreamingResponse

from troupe.api import exec as wire_exec
from troupe.api.errors import TroupeError
from troupe.api.lifecycle import SessionStatus
from troupe.api.models import ExecRequest, SessionCreate, SessionInfo
from troupe.api.shell import serve_shell
from troupe.manager import kernel_io, log_events
from troupe.manager.deps import DB, CurrentUser, RegistryDep, StreamsDep, authenticate
from troupe.manager.reads.sessions import list_page, lookup, session_by_ref
from troupe.manager.reads.wire import session_info
from troupe.manager.session_events import actor_of
from troupe.manager.streams import SlotResponse, streams_of, unless_disconnected

router = APIRouter(tags=["sessions"])
#: Sessions in one answer of ``GET /v1/sessions`` unless ``limit`` says, and the most it may.
LIST_LIMIT, LIST_MAX = 100, 1000


@router.post("/sessions", status_code=201, response_model=SessionInfo)
async def create_session(
    req: SessionCreate, user: CurrentUser, registry: RegistryDep
) -> SessionInfo:
    s = await registry.create(user, req)
    return session_info(s, user.name)


@router.get("/sessions", response_model=list[SessionInfo])
async def list_sessions(
    request: Request,
    db: DB,
    user: CurrentUser,
    all: Annotated[bool, Query(description="include finished sessions")] = False,
    limit: Annotated[
        int, Query(ge=1, le=LIST_MAX, description="sessions in one page")
    ] = LIST_LIMIT,
    before: Annotated[
        str | None, Query(max_length=64, description="a session's id: the page before it")
    ] = None,
) -> Response:
    """The newest ``limit`` sessions (the user's, every user's for admins; active ones unless
    ``all``), oldest first. When older ones remain, a ``Link: <...>; rel="next"`` header gives
    the next page: the same query with ``before`` the first session's id.

    Sent as :func:`~troupe.manager.reads.wire.session_wire` data dumped with orjson, the
    JSON of the ``SessionInfo`` models the schema names (held together by a property test)."""
    page, more = await list_page(db, user, "all" if all else "active", limit, before)
    headers = {}
    if more:
        after = request.url.include_query_params(before=page[-1]["id"])
        headers["Link"] = f'<{after.path}?{after.query}>; rel="next"'
    return Response(orjson.dumps(page[::-1]), media_type="application/json", headers=headers)


@router.get("/sessions/{ref}", response_model=SessionInfo)
async def get_session(ref: str, db: DB, user: CurrentUser) -> SessionInfo:
    return await session_by_ref(db, user, ref)


@router.get("/sessions/{ref}/wait", response_model=SessionInfo)
async def wait_session(
    ref: str,
    request: Request,
    user: CurrentUser,
    registry: RegistryDep,
    streams: StreamsDep,
    until: Annotated[Literal["running", "final", "change"], Query()] = "running",
    since: Annotated[str | None, Query(description="status seen last (until=change)")] = None,
    timeout: Annotated[float, Query(gt=0, le=300)] = 30.0,
) -> SessionInfo:
    """Long-poll: answers once the session is RUNNING (or over), over, or changed status."""
    s = await lookup(request, user, ref)
    seen = since or s.status

    def done(status: SessionStatus) -> bool:
        if status.is_final:
            return True
        if until == "running":
            return status == SessionStatus.RUNNING
        if until == "final":
            return False
        return status != seen

    with streams.open(user):
        waited = await unless_disconnected(request.receive, registry.wait_for(s.id, done, timeout))
    return session_info(waited if waited is not None else s)  # None: nobody is listening


@router.delete("/sessions/{ref}", response_model=SessionInfo)
async def destroy_session(
    ref: str, request: Request, user: CurrentUser, registry: RegistryDep
) -> SessionInfo:
    s = await lookup(request, user, ref)
    return session_info(await registry.destroy(s.id, actor_of(user, s.owner_id)))


@router.get(
    "/sessions/{ref}/logs",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/plain": {}, "text/event-stream": {}}}},
)
async def session_logs(
    ref: str,
    request: Request,
    user: CurrentUser,
    registry: RegistryDep,
    streams: StreamsDep,
    container: Annotated[str | None, Query(description="hostname, e.g. sub1")] = None,
    follow: bool = False,
    since: Annotated[
        str,
        Query(
            max_length=40,
            description="only lines later than this RFC 3339 timestamp (UTC), in every kernel",
        ),
    ] = "",
) -> StreamingResponse:
    """Logs of every kernel (``[host]`` prefixes, merged in time order) or of one; ``follow``
    streams new lines until the kernels end or the client leaves (headers are sent at once).

    Every logs request, followed or not, holds one of the user's stream slots (429 when they
    are all taken): a merged log of many kernels takes a while. With
    ``Accept: text/event-stream`` the lines come as server-sent events (see
    :mod:`troupe.manager.log_events`): each with an id saying where the stream is in every
    kernel, so a client that reconnects (``Last-Event-ID``) resumes exactly, and a comment
    while quiet. A malformed ``Last-Event-ID`` or ``since`` is 422.
    """
    s = await lookup(request, user, ref)
    # a bad name or position (422) or an unreachable agent (502) is refused before the
    # response starts
    lines, cursor = kernel_io.logs(
        registry.fleet,
        registry.life.logs,
        s,
        container,
        follow,
        last_event_id=request.headers.get("last-event-id", ""),
        since=since,
    )
    body: AsyncIterator[bytes]
    if "text/event-stream" in request.headers.get("accept", ""):
        body = log_events.events(lines, cursor, registry.config.keepalive_seconds)
        media_type = log_events.MEDIA_TYPE
    else:
        # (one kernel's lines too, when they come from several attempts: [sub1#0] ...)
        body = log_events.plain(lines, prefixed=container is None or bool(s.restarts))
        media_type = "text/plain; charset=utf-8"
    if not follow:
        body = log_events.batched(body)
    return SlotResponse(streams.open(user), body, media_type=media_type)


@router.post("/sessions/{ref}/exec", response_class=StreamingResponse)
async def session_exec(
    ref: str,
    req: ExecRequest,
    request: Request,
    user: CurrentUser,
    registry: RegistryDep,
    streams: StreamsDep,
) -> StreamingResponse:
    """Streams NDJSON (troupe.api.exec): ``{"data": base64}`` lines, then ``{"exit_code": N}``."""
    s = await lookup(request, user, ref)
    stream = kernel_io.exec_stream(registry.fleet, s, req)

    async def body() -> AsyncIterator[bytes]:
        try:
            async for item in stream:
                yield wire_exec.encode(item)
        except TroupeError as e:  # the status is sent already: the last line says it
            yield wire_exec.encode(e)

    return SlotResponse(streams.open(user, s.id), body(), media_type=wire_exec.MEDIA_TYPE)


@router.websocket("/sessions/{ref}/shell")
async def session_shell(ws: WebSocket, ref: str, kernel: str = "main1") -> None:
    """Interactive terminal in a kernel (main1 by default).

    Protocol: binary frames carry terminal bytes both ways; the client may send text frames
    ``{"resize": [rows, cols]}``; at the end the server sends ``{"exit_code": N}`` and closes.
    Errors before the shell starts: ``{"error": {...}}`` then close code 4000 + HTTP status
    (4429: too many streams of this user).
    Auth: ``Authorization: Bearer KEY`` header only (never a key in the URL).
    """
    from troupe.api.edge import http_status

    await ws.accept()
    try:
        user = await authenticate(ws.app.state.db, ws)
        s = await lookup(ws, user, ref)
        agent, container_id = kernel_io.kernel_target(ws.app.state.registry.fleet, s, kernel)
        slot = streams_of(ws).open(user, s.id)
    except TroupeError as e:
        await ws.send_text(json.dumps(e.to_wire()))
        await ws.close(code=4000 + http_status(e))
        return
    with slot:
        async with agent.shell(container_id) as sh:
            await serve_shell(ws, sh)
