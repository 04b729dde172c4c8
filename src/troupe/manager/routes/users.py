"""/v1/users: admins create, list, limit, revoke, rotate and delete users; each user may see
their own limits and rotate their own key. A key is shown once, when it is made.

Deleting a user keeps its row (finished sessions name their owner) but renames it, so the
name can be taken again, and deletes its folders with their data. The last admin with a
valid key can be neither revoked nor deleted. Changes of keys and users are serialized in
this process (one manager process serves the API), so two admins cannot revoke each other
at once; a deletion also holds the user's admission lock, so no session slips in meanwhile.
Each change goes to the audit list (:mod:`troupe.manager.audit`) in its own transaction.
"""

from __future__ import annotations

import asyncio
import secrets

from fastapi import APIRouter
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.errors import Conflict, Forbidden, Invalid
from troupe.api.lifecycle import utcnow
from troupe.api.models import UserCreate, UserInfo
from troupe.api.users import LimitsUpdate, UserDetail, UserListed
from troupe.manager import audit, quotas
from troupe.manager.auth import REVOKED, create_user, is_revoked, revoke_key, rotate_key
from troupe.manager.deps import DB, AdminUser, CurrentUser, RegistryDep
from troupe.manager.life.admission import active_usage, owner_lock
from troupe.manager.reads.sessions import active_names
from troupe.manager.reads.users import find_user, live_users
from troupe.manager.routes.folders import delete_owned
from troupe.manager.store.models import User

router = APIRouter(tags=["users"])

#: Revokes, rotations and deletions, one at a time (the last-admin rule depends on it).
_changes = asyncio.Lock()
#: ``/users/me`` is the caller: no user may be called so.
RESERVED = "me"


def listed(u: User) -> UserListed:
    return UserListed(
        id=u.id, name=u.name, admin=u.admin, created_at=u.created_at, revoked=is_revoked(u)
    )


async def detail(db: AsyncSession, u: User, registry: RegistryDep) -> UserDetail:
    limits = quotas.limits_of(registry.config, u)
    used = await active_usage(db, u.id)
    return UserDetail(
        **listed(u).model_dump(),
        limits=limits,
        overrides=dict(u.limits or {}),
        usage=used,
    )


def with_key(u: User, key: str) -> UserInfo:
    return UserInfo(id=u.id, name=u.name, admin=u.admin, created_at=u.created_at, api_key=key)


async def check_not_last_admin(db: AsyncSession, user: User) -> None:
    """Refuses to take away the last admin that can still sign in."""
    if not user.admin or is_revoked(user):
        return
    others = await db.execute(
        select(func.count())
        .select_from(User)
        .where(
            User.admin.is_(True),
            User.deleted_at.is_(None),
            User.id != user.id,
            ~User.key_hash.startswith(REVOKED),
        )
    )
    if not others.scalar_one():
        raise Conflict(f"user {user.name!r} is the last admin; make another admin first")


# -- routes ------------------------------------------------------------------------------
@router.post("/users", status_code=201, response_model=UserInfo)
async def new_user(req: UserCreate, db: DB, admin: AdminUser) -> UserInfo:
    if req.name == RESERVED:
        raise Invalid.field_rule("name", f"{RESERVED!r} is reserved")
    taken = Conflict(f"name: a user named {req.name!r} already exists", field="name")
    if (await db.execute(select(User.id).where(User.name == req.name))).first():
        raise taken
    try:
        user, key = await create_user(db, req.name, req.admin)
        audit.record(db, admin.name, "user-create", req.name, {"admin": req.admin})
        await db.commit()  # the unique name settles concurrent creates
    except IntegrityError:
        raise taken from None
    return with_key(user, key)


@router.get("/users", response_model=list[UserListed])
async def list_users(db: DB, _: AdminUser) -> list[UserListed]:
    return [listed(u) for u in await live_users(db)]


@router.get("/users/me", response_model=UserDetail)
async def me(db: DB, user: CurrentUser, registry: RegistryDep) -> UserDetail:
    """You, your limits and what your active sessions hold."""
    return await detail(db, user, registry)


@router.post("/users/me/rotate", response_model=UserInfo)
async def rotate_mine(user: CurrentUser, registry: RegistryDep) -> UserInfo:
    """A new key for you (shown once); the one you used stops working."""
    return await _rotate(registry, user.name, user.name)


@router.get("/users/{name}", response_model=UserDetail)
async def get_user(name: str, db: DB, user: CurrentUser, registry: RegistryDep) -> UserDetail:
    """A user (admins: anyone; others: themselves), their effective limits and what their
    active sessions hold."""
    if not user.admin and name != user.name:
        raise Forbidden("admin only")
    return await detail(db, await find_user(db, name), registry)


@router.put("/users/{name}/limits", response_model=UserDetail)
async def set_limits(
    name: str, req: LimitsUpdate, db: DB, admin: AdminUser, registry: RegistryDep
) -> UserDetail:
    """Sets the keys given (null: back to the server's default); keeps the others."""
    user = await find_user(db, name)
    limits = dict(user.limits or {})
    for key in req.model_fields_set:
        value = getattr(req, key)
        if value is None:
            limits.pop(key, None)
        else:
            limits[key] = value
    user.limits = limits  # a new dict: the JSON column sees the change
    set_ = req.model_dump(mode="json", include=req.model_fields_set)
    audit.record(db, admin.name, "limits-set", user.name, set_)
    await db.commit()
    return await detail(db, user, registry)


@router.post("/users/{name}/revoke", response_model=UserListed)
async def revoke(name: str, admin: AdminUser, registry: RegistryDep) -> UserListed:
    """The user's key stops working at once; rotating gives them a new one."""
    async with _changes, registry.store() as db:
        user = await find_user(db, name)
        await check_not_last_admin(db, user)
        if not is_revoked(user):
            revoke_key(user)
            audit.record(db, admin.name, "key-revoke", user.name)
            await db.commit()
        return listed(user)


@router.post("/users/{name}/rotate", response_model=UserInfo)
async def rotate(name: str, admin: AdminUser, registry: RegistryDep) -> UserInfo:
    """A new key for the user (shown once); the old one stops working."""
    return await _rotate(registry, name, admin.name)


async def _rotate(registry: RegistryDep, name: str, actor: str) -> UserInfo:
    async with _changes, registry.store() as db:
        user = await find_user(db, name)
        key = rotate_key(user)
        audit.record(db, actor, "key-rotate", user.name)
        await db.commit()
        return with_key(user, key)


@router.delete("/users/{name}", status_code=204)
async def delete_user(name: str, admin: AdminUser, registry: RegistryDep) -> None:
    """Not while the user has active sessions. Their folders go with their data; their
    finished sessions stay (owned by the renamed, deleted user) until retention."""
    async with _changes:
        async with registry.store() as db:
            user_id = (await find_user(db, name)).id
        async with owner_lock(user_id), registry.store() as db:
            user = await find_user(db, name)
            if names := await active_names(db, user.id):
                raise Conflict(
                    f"user {name!r} has active session(s) {', '.join(names)}; destroy them first"
                )
            await check_not_last_admin(db, user)
            folder_ids = await delete_owned(db, user.id)
            revoke_key(user)
            user.deleted_at = utcnow()
            user.name = f"{name[:47]}~deleted~{secrets.token_hex(4)}"  # fits String(64)
            audit.record(db, admin.name, "user-delete", name, {"renamed": user.name})
            await db.commit()
    for folder_id in folder_ids:
        await registry.delete_folder_data(folder_id)
