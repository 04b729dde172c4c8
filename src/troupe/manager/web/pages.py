"""The web UI's pages (server-rendered Jinja2), its sign-in, one live event stream per page,
the launch dialog's capacity answer and the API docs served from local files.

Pages read through the same functions as the REST API (``find_session``, ``session_infos``,
``list_agents``, ``list_images``), so they show what the CLI shows; everything that changes
state goes through ``/v1`` from the browser, authenticated by the sign-in cookie.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from troupe import __version__
from troupe.api.errors import Invalid, NotFound, TroupeError, Unauthorized
from troupe.api.lifecycle import SESSION_ACTIVE, SESSION_FINAL, Change
from troupe.api.models import AgentInfo, Resources, SessionInfo, parse_size
from troupe.cluster.contract import ClusterMode
from troupe.manager import log_events, websessions
from troupe.manager.deps import DB, CurrentUser, RegistryDep, StreamsDep
from troupe.manager.routes.misc import list_agents, list_images
from troupe.manager.routes.sessions import find_session
from troupe.manager.routes.views import session_columns, session_info, session_infos
from troupe.manager.store.models import Folder, Session, User
from troupe.manager.streams import SlotResponse
from troupe.manager.web import signin, views

HERE = Path(__file__).parent
STATIC = "/static"
#: Sessions on one page of the list (the newest).
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


# -- reading --------------------------------------------------------------------------------
def visible(user: User) -> Any:
    """The sessions ``user`` may see: their own, or everyone's for admins."""
    q = session_columns()
    return q if user.admin else q.where(Session.owner_id == user.id)


async def session_list(db: AsyncSession, user: User, finished: bool) -> list[SessionInfo]:
    statuses = SESSION_FINAL if finished else SESSION_ACTIVE
    q = (
        visible(user)
        .where(Session.status.in_(sorted(statuses)))
        .order_by(Session.created_at.desc())
        .limit(PAGE)
    )
    return await session_infos(db, q)


async def sessions_by_id(db: AsyncSession, user: User, ids: set[str]) -> list[SessionInfo]:
    return await session_infos(db, visible(user).where(Session.id.in_(sorted(ids))))


async def one_session(db: AsyncSession, user: User, ref: str) -> SessionInfo:
    """A session by id or name, the API's way: another user's is simply not found."""
    return session_info(await find_session(db, user, ref))


def folder_users(sessions: list[Session]) -> dict[str, list[str]]:
    """folder id -> names of the active sessions that mount it."""
    out: dict[str, list[str]] = {}
    for s in sessions:
        for m in s.mounts:
            out.setdefault(str(m.get("folder_id")), []).append(s.name)
    return out


# -- pages ----------------------------------------------------------------------------------
@router.get("/")
async def sessions_page(
    request: Request,
    db: DB,
    user: PageUser,
    registry: RegistryDep,
    show: Annotated[str, Query(pattern="^(running|finished)$")] = "running",
) -> HTMLResponse:
    sessions = await session_list(db, user, finished=show == "finished")
    agents = await list_agents(db, user, registry)
    folders = await db.execute(
        select(Folder.name).where(Folder.owner_id == user.id).order_by(Folder.name)
    )
    return render(
        request,
        "sessions.html",
        user=user,
        nav="sessions",
        show=show,
        sessions=sessions,
        folders=list(folders.scalars()),
        groups=sorted({a.group for a in agents}) or ["default"],
        mode_help=views.MODE_HELP,
        largest=_largest(agents, Resources()),
    )


@router.get("/sessions/{ref}")
async def session_page(request: Request, ref: str, db: DB, user: PageUser) -> HTMLResponse:
    s = await one_session(db, user, ref)
    return render(request, "session.html", user=user, nav="sessions", s=s)


@router.get("/sessions/{ref}/logs")
async def logs_page(
    request: Request, ref: str, db: DB, user: PageUser, kernel: str = ""
) -> HTMLResponse:
    s = await one_session(db, user, ref)
    names = [k.hostname for k in views.kernels_in_order(s.kernels)]
    chosen = kernel if kernel in names else ""
    return render(
        request, "logs.html", user=user, nav="sessions", s=s, kernels=names, chosen=chosen
    )


@router.get("/sessions/{ref}/terminal")
async def terminal_page(request: Request, ref: str, db: DB, user: PageUser) -> HTMLResponse:
    s = await one_session(db, user, ref)
    return render(request, "terminal.html", user=user, nav="sessions", s=s)


@router.get("/folders")
async def folders_page(request: Request, db: DB, user: PageUser) -> HTMLResponse:
    rows = await db.execute(select(Folder).where(Folder.owner_id == user.id).order_by(Folder.name))
    active = await db.execute(
        select(Session).where(
            Session.owner_id == user.id, Session.status.in_(sorted(SESSION_ACTIVE))
        )
    )
    used = folder_users(list(active.scalars()))
    folders = [(f, used.get(f.id, [])) for f in rows.scalars()]
    return render(request, "folders.html", user=user, nav="folders", folders=folders)


@router.get("/agents")
async def agents_page(
    request: Request, db: DB, user: PageUser, registry: RegistryDep
) -> HTMLResponse:
    agents = await list_agents(db, user, registry)
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
    agents = await list_agents(db, user, registry)
    return JSONResponse({"largest": _largest(agents, r, group)})


@router.get("/ui/images")
async def images(user: CurrentUser, registry: RegistryDep) -> JSONResponse:
    """The agents' image names for the launch dialog's select (asked for when it opens)."""
    names = sorted(i.name for i in await list_images(user, registry))
    return JSONResponse(names)


def _fragment(name: str, **context: Any) -> str:
    return templates.get_template(name).render(v=views, static=STATIC, **context)


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()


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
    A PENDING session is re-rendered every few seconds, since its why-pending report
    changes without a status change.
    """
    store = request.app.state.db
    keepalive = request.app.state.registry.config.keepalive_seconds
    slot = streams.open(user)

    async def render_ids(ids: set[str]) -> AsyncIterator[bytes]:
        async with store() as db:
            found = await sessions_by_id(db, user, ids)
        for s in found:
            if session is not None:
                html = _fragment("_session_live.html", s=s, user=user)
            else:
                html = _fragment("_session_row.html", s=s, user=user)
            yield _event("session", {"id": s.id, "status": s.status, "html": html})

    async def body() -> AsyncIterator[bytes]:
        with store.bus.subscribe() as queue:
            yield b": live\n\n"
            pending = False
            if session is not None:  # what changed between the page's answer and now
                async for chunk in render_ids({session}):
                    pending = '"status": "PENDING"' in chunk.decode()
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
                        pending = '"status": "PENDING"' in chunk.decode()
                        yield chunk

    return SlotResponse(slot, body(), media_type=log_events.MEDIA_TYPE)


# -- the API docs, from local files ------------------------------------------------------------
def docs_page(app: FastAPI) -> HTMLResponse:
    vendor = f"{STATIC}/vendor/swagger-ui"
    return get_swagger_ui_html(
        openapi_url=app.openapi_url or "/openapi.json",
        title=f"{app.title} API",
        swagger_js_url=f"{vendor}/swagger-ui-bundle.js",
        swagger_css_url=f"{vendor}/swagger-ui.css",
        swagger_favicon_url=f"{vendor}/favicon-32x32.png",
        swagger_ui_parameters={"validatorUrl": None},
    )


def install(app: FastAPI) -> None:
    """Mounts the UI at ``/``, its files at ``/static`` and Swagger UI at ``/docs``."""
    app.mount(STATIC, StaticFiles(directory=HERE / "static"), name="static")
    app.include_router(router)

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return docs_page(app)

    @app.exception_handler(SignInNeeded)
    async def _sign_in(request: Request, e: SignInNeeded) -> Response:
        return RedirectResponse(f"/signin?next={quote(e.path)}", status_code=303)

    web_paths = ("/sessions/", "/folders", "/agents")
    previous = app.exception_handlers.get(TroupeError)

    @app.exception_handler(TroupeError)
    async def _page_error(request: Request, e: TroupeError) -> Response:
        """Pages answer errors with a page; ``/v1`` and ``/ui`` keep the JSON shape."""
        if request.url.path.startswith(web_paths) and request.method == "GET":
            status = 404 if isinstance(e, NotFound) else 403
            if isinstance(e, Unauthorized):
                return RedirectResponse("/signin", status_code=303)
            return render(request, "error.html", status, user=None, message=e.message)
        assert previous is not None
        result = previous(request, e)
        if asyncio.iscoroutine(result):
            result = await result
        assert isinstance(result, Response)
        return result


__all__ = ["install"]
