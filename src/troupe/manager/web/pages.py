"""The web UI's pages (server-rendered Jinja2), its sign-in, one live event stream per page,
the launch dialog's capacity answer and the API docs served from local files.

Pages read through :mod:`troupe.manager.reads`, as the REST API does, so they show what the
CLI shows; everything that changes state goes through ``/v1`` from the browser, authenticated
by the sign-in cookie.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from troupe import __version__
from troupe.api.edge import http_status
from troupe.api.errors import Invalid, TroupeError, Unauthorized
from troupe.api.lifecycle import Change
from troupe.api.models import NAME_RULE, AgentInfo, Resources, parse_size
from troupe.cluster.contract import ROLE_NAME_MAX, ClusterMode
from troupe.manager import log_events, websessions
from troupe.manager.deps import DB, CurrentUser, RegistryDep, StreamsDep
from troupe.manager.reads.agents import agent_infos, image_infos
from troupe.manager.reads.events import session_events
from troupe.manager.reads.folders import own_folders
from troupe.manager.reads.sessions import (
    Which,
    folders_in_use,
    list_page,
    session_by_ref,
    sessions_by_id,
)
from troupe.manager.reads.wire import as_infos
from troupe.manager.store.models import User
from troupe.manager.streams import SlotResponse
from troupe.manager.web import signin, specs, views

HERE = Path(__file__).parent
STATIC = "/static"
#: Sessions on one page of the list (newest first; an "Older sessions" link to the next).
PAGE = 200
#: Pages allow scripts, styles and connections to this origin only (xterm.js sets styles).
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'self'"
)

templates = Jinja2Templates(directory=HERE / "templates")
templates.env.globals.update(v=views, static=STATIC, version=__version__)
router = APIRouter(include_in_schema=False)


class SignInNeeded(Exception):
    """A page asked for without a valid sign-in: answered by a redirect to /signin."""

    def __init__(self, path: str) -> None:
        self.path = path


async def page_user(request: Request, db: DB) -> User:
    user = await websessions.user_of_cookie(db, request)
    if user is None:
        raise SignInNeeded(request.url.path)
    return user


PageUser = Annotated[User, Depends(page_user)]


def render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    response = templates.TemplateResponse(request, name, context, status_code=status)
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Cache-Control"] = "no-store"
    return response


def local_path(target: str) -> str:
    """``target`` if it is a path of this site, else ``/`` (no open redirect)."""
    ok = target.startswith("/") and not target.startswith("//") and "\\" not in target
    return target if ok else "/"


# -- sign-in --------------------------------------------------------------------------------
@router.get("/signin")
async def signin_page(request: Request, next: str = "/") -> HTMLResponse:
    return render(request, "signin.html", next=local_path(next), error=None, user=None)


@router.post("/signin")
async def signin_submit(request: Request, db: DB) -> Response:
    """The form posts the key in the body (never the URL); the answer sets the cookie."""
    form = parse_qs((await request.body()).decode(errors="replace"))
    key = (form.get("api_key") or [""])[0].strip()
    target = local_path((form.get("next") or ["/"])[0])
    try:
        websessions.check_origin(request)
    except TroupeError as e:
        return render(request, "signin.html", 403, next=target, error=e.message, user=None)
    token = await signin.sign_in(db, key)
    if token is None:
        error = "Enter your API key." if not key else "That API key is not valid."
        return render(request, "signin.html", 401, next=target, error=error, user=None)
    response = RedirectResponse(target, status_code=303)
    signin.set_cookie(response, token, secure=request.url.scheme == "https")
    return response


@router.post("/signout")
async def signout(request: Request, db: DB) -> Response:
    """Ends the web session on the server (a copied cookie stops working), then the cookie."""
    websessions.check_origin(request)
    await signin.sign_out(db, request)
    response = RedirectResponse("/signin", status_code=303)
    signin.clear_cookie(response)
    return response


# -- pages ----------------------------------------------------------------------------------
@router.get("/")
async def sessions_page(
    request: Request,
    db: DB,
    user: PageUser,
    registry: RegistryDep,
    show: Annotated[str, Query(pattern="^(running|finished)$")] = "running",
    before: Annotated[
        str | None, Query(max_length=64, description="a session's id: the page before it")
    ] = None,
) -> HTMLResponse:
    which: Which = "final" if show == "finished" else "active"
    page, more = await list_page(db, user, which, PAGE, before)
    agents = await agent_infos(db, registry.fleet)
    return render(
        request,
        "sessions.html",
        user=user,
        nav="sessions",
        show=show,
        sessions=as_infos(page),
        older=page[-1]["id"] if more else None,
        before=before,
        folders=[f.name for f in await own_folders(db, user)],
        groups=sorted({a.group for a in agents}) or ["default"],
        mode_help=views.MODE_HELP,
        largest=_largest(agents, Resources()),
        # the API's rules, so the dialog states them as the API checks them
        name_rule=NAME_RULE,
        role_max=ROLE_NAME_MAX,
    )


@router.get("/sessions/{ref}")
async def session_page(request: Request, ref: str, db: DB, user: PageUser) -> HTMLResponse:
    s = await session_by_ref(db, user, ref)
    events = await session_events(db, s.id)
    return render(request, "session.html", user=user, nav="sessions", s=s, events=events)


@router.get("/sessions/{ref}/logs")
async def logs_page(
    request: Request, ref: str, db: DB, user: PageUser, kernel: str = ""
) -> HTMLResponse:
    s = await session_by_ref(db, user, ref)
    names = [k.hostname for k in views.kernels_in_order(s.kernels)]
    chosen = kernel if kernel in names else ""
    return render(
        request, "logs.html", user=user, nav="sessions", s=s, kernels=names, chosen=chosen
    )


@router.get("/sessions/{ref}/terminal")
async def terminal_page(request: Request, ref: str, db: DB, user: PageUser) -> HTMLResponse:
    s = await session_by_ref(db, user, ref)
    return render(request, "terminal.html", user=user, nav="sessions", s=s)


@router.get("/folders")
async def folders_page(request: Request, db: DB, user: PageUser) -> HTMLResponse:
    used = await folders_in_use(db, user.id)
    folders = [(f, used.get(f.id, [])) for f in await own_folders(db, user)]
    return render(request, "folders.html", user=user, nav="folders", folders=folders)


@router.get("/agents")
async def agents_page(
    request: Request, db: DB, user: PageUser, registry: RegistryDep
) -> HTMLResponse:
    agents = await agent_infos(db, registry.fleet)
    return render(request, "agents.html", user=user, nav="agents", agents=agents)


# -- live data for the pages' scripts ---------------------------------------------------------
def _largest(agents: list[AgentInfo], r: Resources, group: str = "default") -> dict[str, int]:
    return {mode.value: views.largest_now(agents, r, mode, group) for mode in ClusterMode}


@router.get("/ui/fit")
async def fit(
    db: DB,
    user: CurrentUser,
    registry: RegistryDep,
    cpu: float = 0.5,
    mem: str = "512m",
    gpu: int = 0,
    group: str = "default",
) -> JSONResponse:
    """The largest size per cluster mode that could start now with these per-kernel
    resources, and the session's totals line, for the launch dialog."""
    try:
        r = Resources(cpu=cpu, mem=parse_size(mem), gpu=gpu)
    except ValueError as e:
        raise Invalid(str(e).splitlines()[0]) from None
    agents = await agent_infos(db, registry.fleet)
    return JSONResponse({"largest": _largest(agents, r, group)})


@router.get("/ui/images")
async def images(user: CurrentUser, registry: RegistryDep) -> JSONResponse:
    """The agents' image names for the launch dialog's select (asked for when it opens)."""
    names = sorted(i.name for i in await image_infos(registry.fleet))
    return JSONResponse(names)


def _fragment(name: str, **context: Any) -> str:
    return templates.get_template(name).render(v=views, static=STATIC, **context)


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()


def _changing(chunk: bytes) -> bool:
    """Whether a rendered session changes without status changes (PENDING, PREPARING)."""
    text = chunk.decode()
    return '"status": "PENDING"' in text or '"status": "PREPARING"' in text


@router.get("/ui/events")
async def events(
    request: Request,
    user: CurrentUser,
    streams: StreamsDep,
    session: str | None = None,
    show: str = "running",
) -> Response:
    """One server-sent event stream per page: a rendered fragment for every session that
    changed (the list's row, or the session page's live part when ``session`` is an id).

    Changes come from the change bus; a burst is gathered for a moment and rendered once.
    A PENDING or PREPARING session is re-rendered every few seconds, since its why-pending
    report and its pulls' progress change without a status change.
    """
    store = request.app.state.db
    keepalive = request.app.state.registry.config.keepalive_seconds
    slot = streams.open(user)

    async def render_ids(ids: set[str]) -> AsyncIterator[bytes]:
        async with store() as db:
            found = await sessions_by_id(db, user, ids)
            events = await session_events(db, session) if session and session in ids else []
        for s in found:
            if session is not None:
                html = _fragment("_session_live.html", s=s, user=user, events=events)
            else:
                html = _fragment("_session_row.html", s=s, user=user)
            yield _event("session", {"id": s.id, "status": s.status, "html": html})

    async def body() -> AsyncIterator[bytes]:
        with store.bus.subscribe() as queue:
            yield b": live\n\n"
            pending = False
            if session is not None:  # what changed between the page's answer and now
                async for chunk in render_ids({session}):
                    pending = _changing(chunk)
                    yield chunk
            while True:
                wait = 3.0 if pending else keepalive
                try:
                    changes: list[Change] = [await asyncio.wait_for(queue.get(), wait)]
                except TimeoutError:
                    if not pending:
                        yield log_events.KEEPALIVE
                        continue
                    changes = []
                await asyncio.sleep(0.05)  # gather the rest of a burst
                while not queue.empty():
                    changes.append(queue.get_nowait())
                ids = {c.session_id or c.id for c in changes if c.kind in ("session", "kernel")}
                if session is not None:
                    ids = {session} if session in ids or not changes else set()
                if ids:
                    async for chunk in render_ids(ids):
                        pending = _changing(chunk)
                        yield chunk

    return SlotResponse(slot, body(), media_type=log_events.MEDIA_TYPE)


# -- the API docs, from local files ------------------------------------------------------------
def docs_page(request: Request, app: FastAPI) -> HTMLResponse:
    """Swagger UI under the pages' CSP (finding N10(b), docs/reliability.md): FastAPI's own
    docs page starts Swagger UI with an inline script, which that CSP forbids, so a template
    and ``static/docs.js`` do it instead."""
    openapi = app.openapi_url or "/openapi.json"
    return render(request, "docs.html", title=f"{app.title} API", openapi_url=openapi)


class _Files(StaticFiles):
    """The UI's files, revalidated at every use (``no-cache``: a 304 while unchanged): a page
    is never served with a script older than itself after an upgrade (a stale sessions.js
    would leave "New session" asking for the page again and again)."""

    def file_response(self, *args: Any, **kwargs: Any) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers["Cache-Control"] = "no-cache"
        return response


def install(app: FastAPI) -> None:
    """Mounts the UI at ``/``, its files at ``/static`` and Swagger UI at ``/docs``."""
    app.mount(STATIC, _Files(directory=HERE / "static"), name="static")
    app.include_router(router)
    app.include_router(specs.router)

    @app.get("/docs", include_in_schema=False)
    async def docs(request: Request) -> HTMLResponse:
        return docs_page(request, app)

    @app.exception_handler(SignInNeeded)
    async def _sign_in(request: Request, e: SignInNeeded) -> Response:
        return RedirectResponse(f"/signin?next={quote(e.path)}", status_code=303)

    web_paths = ("/sessions/", "/folders", "/agents")
    previous = app.exception_handlers.get(TroupeError)

    @app.exception_handler(TroupeError)
    async def _page_error(request: Request, e: TroupeError) -> Response:
        """Pages answer errors with a page; ``/v1`` and ``/ui`` keep the JSON shape."""
        page = request.url.path == "/" or request.url.path.startswith(web_paths)
        if page and request.method == "GET":
            if isinstance(e, Unauthorized):
                return RedirectResponse("/signin", status_code=303)
            return render(request, "error.html", http_status(e), user=None, message=e.message)
        assert previous is not None
        result = previous(request, e)
        if asyncio.iscoroutine(result):
            result = await result
        assert isinstance(result, Response)
        return result


__all__ = ["install"]
