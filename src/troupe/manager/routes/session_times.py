"""``PATCH /v1/sessions/{ref}``: change a session's clocks (its time limit, stop grace and idle
timeout) while it is active; docs/policies.md."""

from __future__ import annotations

from fastapi import APIRouter, Request

from troupe.api.models import SessionInfo
from troupe.api.session_times import SessionUpdate
from troupe.manager import quotas
from troupe.manager.deps import DB, CurrentUser, RegistryDep
from troupe.manager.life import times
from troupe.manager.presence import presence_of
from troupe.manager.reads.sessions import lookup, session_by_ref

router = APIRouter(tags=["sessions"])


@router.patch("/sessions/{ref}", response_model=SessionInfo)
async def set_session(
    ref: str, req: SessionUpdate, request: Request, db: DB, user: CurrentUser, registry: RegistryDep
) -> SessionInfo:
    """The owner (or an admin) changes the keys given; null is no limit. The owner's maxima
    (``max_time_limit``, ``max_idle_timeout``) bound the new values; an admin has none."""
    s = await lookup(request, user, ref)
    given = {f: getattr(req, f) for f in req.model_fields_set}
    await times.change(registry.life, s.id, quotas.limits_of(registry.config, user), given)
    if "idle_timeout" in given:  # a new idle timeout counts from now
        presence_of(request.app.state).touch(s.id)
    reaper = getattr(request.app.state, "reaper", None)
    if reaper is not None:
        reaper.wake()
    return await session_by_ref(db, user, s.id)
