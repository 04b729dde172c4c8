"""A session's definition as a file: ``GET /v1/sessions/{ref}/spec`` (the create request that
recreates it) and ``GET /v1/schemas/session.json`` (that request's JSON Schema, for editors).

One schema: a session file is :class:`~troupe.api.models.SessionCreate` written in YAML, so
the schema is the model's own, and what the spec gives back is that model's JSON.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import ValidationError
from sqlalchemy import select

from troupe.api.errors import Conflict
from troupe.api.models import SessionCreate
from troupe.manager.deps import DB, CurrentUser
from troupe.manager.reads.sessions import find_session
from troupe.manager.store.models import Session

router = APIRouter()


def session_schema() -> dict[str, Any]:
    """:class:`SessionCreate`'s JSON Schema (what a create accepts), titled for a file."""
    schema = SessionCreate.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "troupe session file"
    schema["description"] = (
        "A troupe session: the body of POST /v1/sessions, written in YAML or JSON "
        "(troupe session create -f FILE)."
    )
    return schema


@router.get("/schemas/session.json", tags=["sessions"])
async def schema() -> dict[str, Any]:
    """The JSON Schema of a session file (the create request); no key needed, so editors
    may fetch it."""
    return session_schema()


@router.get("/sessions/{ref}/spec", response_model=SessionCreate, tags=["sessions"])
async def session_spec(ref: str, db: DB, user: CurrentUser) -> SessionCreate:
    """The create request of a session, as validated when it was created: sent again (or
    written to a file for ``troupe session create -f``) it makes the same session. 409 for a
    session created before requests were kept, or under rules that have changed since."""
    s = await find_session(db, user, ref)
    stored = (await db.execute(select(Session.request).where(Session.id == s.id))).scalar()
    if stored is None:
        raise Conflict(f"session {s.name!r} was created before specs were kept")
    try:
        return SessionCreate.model_validate(stored)
    except ValidationError as e:
        raise Conflict(f"session {s.name!r}'s request breaks today's rules: {e}") from None
