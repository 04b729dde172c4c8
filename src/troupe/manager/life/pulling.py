"""Preparing's first step: every kernel's image on its agent, pulled where it is missing.

The pulls are the fleet's (:class:`~troupe.manager.pulls.Pulls`: one per agent and image,
shared with other sessions). While they run, the session's ``status_info["pulling"]`` shows
each one (agent, image, bytes done and in all), rewritten at most twice a second; when they
are done it is removed and the phase ``pulled`` stamped. This step has its own limit (the
pull's), so the create time-out counts only what follows it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable

from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.aio import gather_all
from troupe.api.lifecycle import SessionStatus, mark, utcnow
from troupe.manager.life.context import Life, load

#: Seconds between two reports of a session's pulls.
REPORT_SECONDS = 0.5


async def pull_missing(life: Life, session_id: str, needs: Iterable[tuple[str, str]]) -> None:
    """Makes sure each (agent, image) of ``needs`` is there; raises the first pull's failure."""
    needs = sorted(set(needs))
    pulls = life.fleet.pulls
    missing = [
        (a, i)
        for (a, i), has in zip(
            needs, await gather_all(_has(life, a, i) for a, i in needs), strict=True
        )
        if not has
    ]
    if not missing:
        return
    work = asyncio.ensure_future(gather_all(pulls.pull(a, i) for a, i in missing))
    try:
        while not work.done():
            await _report(life, session_id, missing)
            await asyncio.wait({work}, timeout=REPORT_SECONDS)
        await work
    finally:
        if not work.done():
            work.cancel()
            with contextlib.suppress(BaseException):
                await work
    await _report(life, session_id, [], pulled=True)


async def _has(life: Life, agent_id: str, image: str) -> bool:
    pulls = life.fleet.pulls
    if pulls.progress(agent_id, image) is not None:  # a pull under way: join it
        return False
    return await life.fleet[agent_id].has_image(image)


async def _report(
    life: Life, session_id: str, missing: list[tuple[str, str]], pulled: bool = False
) -> None:
    rows = []
    for agent_id, image in missing:
        p = life.fleet.pulls.progress(agent_id, image)
        done, total = (p.done_bytes, p.total_bytes) if p else (0, 0)
        rows.append({"agent": agent_id, "image": image, "done_bytes": done, "total_bytes": total})

    async def step(db: AsyncSession) -> None:
        s = await load(db, session_id)
        if s.status != SessionStatus.PREPARING:
            return
        info = {k: v for k, v in s.status_info.items() if k != "pulling"}
        if rows:
            info["pulling"] = rows
        s.status_info = info
        if pulled:
            mark(s, {"pulled": utcnow().isoformat()})

    await life.store.write(step)
