"""Sessions as the API and the web pages read them: who sees which (:func:`owner_scope`),
what a reference may be (:func:`check_ref`), the look-up by id or name and pages of the list.

Only sessions the caller may see are ever read: another user's session is "not found".
"""

from __future__ import annotations

import functools
import re
from typing import Any, Literal, TypeVarTuple

from sqlalchemy import Select, bindparam, case, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import joinedload
from sqlalchemy.sql.elements import BindParameter
from starlette.requests import HTTPConnection

from troupe.api.errors import Invalid, NotFound
from troupe.api.lifecycle import SESSION_ACTIVE, SESSION_FINAL
from troupe.api.metrics import UsageSummary
from troupe.api.models import NAME_PATTERN, SessionInfo
from troupe.manager.reads.wire import as_infos, session_columns, session_info, session_wires
from troupe.manager.store.models import Session, SessionUsage, User

#: Which sessions a list shows: active ones, finished ones, or both.
Which = Literal["active", "final", "all"]
#: ``status IN (...)`` written out as the text of the partial indexes on active sessions, so
#: that the planner uses them (SQLite matches an index's WHERE against literal terms only).
ACTIVE: BindParameter[list[str]] = bindparam(
    "active", sorted(SESSION_ACTIVE), expanding=True, literal_execute=True
)
FINAL: BindParameter[list[str]] = bindparam(
    "final", sorted(SESSION_FINAL), expanding=True, literal_execute=True
)
#: A reference names a session by its name or its id (an id has a name's shape too).
REF_RULE = "a session's name or id (letters, digits, _ . -; 1-63, first a letter or digit)"


def owner_scope(user: User) -> str | None:
    """Who sees which session, the one rule: a user sees their own sessions, an admin
    everyone's. The owner id to filter by, or None for every owner."""
    return None if user.admin else user.id


Ts = TypeVarTuple("Ts")


def visible(q: Select[*Ts], user: User) -> Select[*Ts]:
    """``q`` (over sessions) narrowed to the sessions ``user`` sees."""
    owner = owner_scope(user)
    return q if owner is None else q.where(Session.owner_id == owner)


def check_ref(ref: str) -> str:
    """``ref`` if it can be a session's name or id; else 422 naming ``ref``: a path
    (``../folders/x``), a query (``m?x=1``), an overlong or empty reference names no session
    and is refused before any look-up (finding N4, docs/reliability.md)."""
    if not re.fullmatch(NAME_PATTERN, ref):
        raise Invalid.field_rule("ref", REF_RULE)
    return ref


def lookup_query(user: User, ref: str) -> Select[Session]:
    """The session ``ref`` names among those ``user`` sees: the one whose id it is, whoever
    named another session so (finding N3, docs/reliability.md); else the caller's own of that
    name before another user's (admins), the active one before finished ones, the newest. A
    name thus means the active session of that name, else the newest finished one, so logs
    of a destroyed session stay reachable by name.
    """
    by_id, by_name = Session.id == ref, Session.name == ref
    owner = owner_scope(user)
    if owner is not None:  # in each branch: one index search each (id; owner and name)
        by_id, by_name = by_id & (Session.owner_id == owner), by_name & (Session.owner_id == owner)
    exact = case((Session.id == ref, 0), else_=1)
    mine = case((Session.owner_id == user.id, 0), else_=1)
    active = case((Session.status.in_(SESSION_ACTIVE), 0), else_=1)
    return (
        select(Session)
        .where(by_id | by_name)
        .order_by(exact, mine, active, Session.created_at.desc())
        .limit(1)
        .options(joinedload(Session.owner), joinedload(Session.kernels))  # one query
    )


async def find_session(db: AsyncSession, user: User, ref: str) -> Session:
    """The session :func:`lookup_query` names, loaded with its owner and kernels;
    :class:`~troupe.api.errors.Invalid` for a reference that cannot name one,
    :class:`~troupe.api.errors.NotFound` if none."""
    q = lookup_query(user, check_ref(ref))
    s = (await db.execute(q)).unique().scalar_one_or_none()
    if s is None:
        raise NotFound.of("session", ref)
    return s


async def lookup(conn: HTTPConnection, user: User, ref: str) -> Session:
    """:func:`find_session` in a transaction of its own, for requests that then wait or stream
    without holding a database connection."""
    async with conn.app.state.db() as db:
        return await find_session(db, user, ref)


async def session_by_ref(db: AsyncSession, user: User, ref: str) -> SessionInfo:
    """:func:`find_session` as the API shows it; a finished one with its usage summary."""
    info = session_info(await find_session(db, user, ref))
    if info.status.is_final:
        info.usage = await stored_summary(db, info.id)
    return info


async def stored_summary(db: AsyncSession, session_id: str) -> UsageSummary | None:
    """The usage summary kept when the session finished (None if nothing was sampled)."""
    row = await db.get(SessionUsage, session_id)
    return UsageSummary.model_validate(row.summary) if row is not None else None


@functools.cache
def list_query(own: bool, which: Which, paged: bool) -> Select[Any]:
    """The list's statement for one combination of its filters, built once: its values are
    parameters (``owner_id``, ``limit``, ``mark_at``, ``mark_id``). Building the statement
    for each request, and SQLAlchemy matching a new statement's columns to its cached
    compiled form, cost a page a fifth of its time."""
    q = session_columns()
    if own:
        q = q.where(Session.owner_id == bindparam("owner_id"))
    if which != "all":
        q = q.where(Session.status.in_(ACTIVE if which == "active" else FINAL))
    if paged:
        mark = tuple_(bindparam("mark_at", type_=Session.created_at.type), bindparam("mark_id"))
        q = q.where(tuple_(Session.created_at, Session.id) < mark)
    return q.order_by(Session.created_at.desc(), Session.id.desc()).limit(bindparam("limit"))


async def list_page(
    db: AsyncSession, user: User, which: Which, limit: int, before: str | None = None
) -> tuple[list[dict[str, Any]], bool]:
    """The newest ``limit`` sessions ``user`` sees (``which``), newest first, as wire data;
    with ``before`` (a session's id) those older than that session (keyset paging: creation
    time, then id). And whether older ones remain: the next page is ``before`` the last one.
    A ``before`` the user does not see is :class:`~troupe.api.errors.NotFound`."""
    owner = owner_scope(user)
    params: dict[str, Any] = {"owner_id": owner, "limit": limit + 1}
    if before is not None:
        mark = visible(select(Session.created_at, Session.id).where(Session.id == before), user)
        row = (await db.execute(mark)).one_or_none()
        if row is None:
            raise NotFound.of("session", before)
        params.update(mark_at=row.created_at, mark_id=row.id)
    q = list_query(own=owner is not None, which=which, paged=before is not None)
    page = await session_wires(db, q, params)
    return page[:limit], len(page) > limit


async def sessions_by_id(db: AsyncSession, user: User, ids: set[str]) -> list[SessionInfo]:
    """The sessions among ``ids`` that ``user`` sees (the live views re-render them)."""
    q = visible(session_columns(), user).where(Session.id.in_(sorted(ids)))
    return as_infos(await session_wires(db, q))


async def active_names(db: AsyncSession, owner_id: str) -> list[str]:
    """Names of the active sessions of ``owner_id``, oldest first."""
    q = (
        select(Session.name)
        .where(Session.owner_id == owner_id, Session.status.in_(ACTIVE))
        .order_by(Session.created_at)
    )
    return list((await db.execute(q)).scalars())


async def folders_in_use(db: AsyncSession, owner_id: str) -> dict[str, list[str]]:
    """Folder id -> names of the active sessions of ``owner_id`` that mount it."""
    q = select(Session.name, Session.mounts).where(
        Session.owner_id == owner_id, Session.status.in_(ACTIVE)
    )
    out: dict[str, list[str]] = {}
    for name, mounts in await db.execute(q.order_by(Session.created_at)):
        for m in mounts:
            out.setdefault(str(m.get("folder_id")), []).append(name)
    return out
