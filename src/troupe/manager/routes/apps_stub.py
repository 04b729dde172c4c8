"""STUB of apps-core's ``routes/apps.py`` (issue 22), only so that the proxy's web buttons and
browser test run on this branch: the lead drops this file (and its line in ``app.py``) when
merging apps-core's real routes. Opens a port without starting anything."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from troupe.api.errors import Invalid
from troupe.manager.apps.links import app_origin, issue_link
from troupe.manager.deps import DB, CurrentUser
from troupe.manager.reads.sessions import find_session

router = APIRouter(tags=["sessions"])
KNOWN = {"jupyter": 8888, "tensorboard": 6006}


@router.get("/sessions/{ref}/apps")
async def list_apps(ref: str, db: DB, user: CurrentUser, request: Request) -> list[Any]:
    s = await find_session(db, user, ref)
    return [
        {"name": n, "port": p, "state": "stopped", "url": app_origin(request.app.state, s.id, p)}
        for n, p in KNOWN.items()
        if s.image.startswith("troupe/pytorch")
    ]


@router.post("/sessions/{ref}/apps/{app}")
async def open_app(ref: str, app: str, db: DB, user: CurrentUser, request: Request) -> Any:
    s = await find_session(db, user, ref)
    port = KNOWN.get(app) or (int(app) if app.isdigit() else 0)
    if not 1 <= port <= 65535:
        raise Invalid.field_rule("app", "a declared app or a port, 1-65535")
    url = issue_link(request.app.state, s.id, s.owner_id, port)
    return {"name": app, "port": port, "state": "running", "url": url, "log_tail": []}
