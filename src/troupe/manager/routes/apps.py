"""/v1/sessions/{ref}/apps: the apps of a session's main1, and opening one (docs/apps.md).

Listing answers each declared app's state and origin; opening starts the app if needed, waits
until it answers and answers a one-time link into it. The session is looked up among the
caller's own (another user's is "not found"); an admin may list another user's apps but only
the owner opens them: the link lets its holder into the app as the owner. Each open is logged
and goes to the session's event list (``app-open``), refused ones too.
"""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Path, Request
from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.errors import Forbidden, Invalid, TroupeError
from troupe.api.models import AppInfo
from troupe.manager.apps.links import app_origin, issue_link
from troupe.manager.apps.state import Apps
from troupe.manager.deps import CurrentUser, RegistryDep
from troupe.manager.reads.sessions import lookup
from troupe.manager.session_events import actor_of, record_event

router = APIRouter(tags=["apps"])
log = logging.getLogger(__name__)

#: ``{app}``: a declared app's name or a port number.
AppRef = Annotated[str, Path(min_length=1, max_length=255, description="app name or port")]


def apps_of(request: Request) -> Apps:
    """The manager's :class:`Apps`, made on first use."""
    apps: Apps | None = getattr(request.app.state, "apps", None)
    if apps is None:
        apps = request.app.state.apps = Apps()
    return apps


@router.get("/sessions/{ref}/apps", response_model=list[AppInfo])
async def list_apps(
    ref: str, request: Request, user: CurrentUser, registry: RegistryDep
) -> list[AppInfo]:
    """The apps main1's image declares, with their state (``running``, ``starting``,
    ``failed`` with the log's last lines, ``stopped``) and origin (no link: see the POST)."""
    s = await lookup(request, user, ref)
    return [
        AppInfo(
            name=a.name,
            port=a.port,
            state=a.state,
            url=app_origin(request.app.state, s.id, a.port),
            log_tail=a.log_tail,
        )
        for a in await apps_of(request).states(registry.fleet, s)
    ]


@router.post("/sessions/{ref}/apps/{app}", response_model=AppInfo)
async def open_app(
    ref: str, app: AppRef, request: Request, user: CurrentUser, registry: RegistryDep
) -> AppInfo:
    """Starts app ``app`` (a declared name, or a port number for any port, which must be
    served already) in main1 if it is not running, waits until it answers (up to a minute)
    and answers it with a one-time link in ``url``. An app that fails to start: 422 with its
    log's last lines; nothing answering on an undeclared port: 409."""
    s = await lookup(request, user, ref)
    if s.owner_id != user.id:
        raise Forbidden("only the session's owner opens its apps")
    if app_origin(request.app.state, s.id, 1) is None:
        raise Invalid("this server serves no apps (see docs/apps.md)")
    try:
        status = await apps_of(request).open(registry.fleet, s, app)
    except TroupeError as e:
        why = e.message.splitlines()[0]
        log.info(
            "app open: session %s (%s) app %r by %s: refused: %s", s.name, s.id, app, user.name, why
        )
        await _event(registry, s.id, f"app {app!r} not opened: {why}", actor_of(user, s.owner_id))
        raise
    log.info(
        "app open: session %s (%s) app %r port %d by %s: %s",
        s.name,
        s.id,
        status.name,
        status.port,
        user.name,
        status.state,
    )
    message = f"app {status.name!r} (port {status.port}) opened: {status.state}"
    await _event(registry, s.id, message, actor_of(user, s.owner_id))
    return AppInfo(
        name=status.name,
        port=status.port,
        state=status.state,
        url=issue_link(request.app.state, s.id, s.owner_id, status.port),
    )


async def _event(registry: RegistryDep, session_id: str, message: str, actor: str) -> None:
    async def step(db: AsyncSession) -> None:
        await record_event(db, session_id, "app-open", message, actor, kernel="main1")

    await registry.store.write(step)
