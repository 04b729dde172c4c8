"""/v1/users: admins create users; each gets an API key shown once."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from troupe.api.errors import Conflict
from troupe.api.models import UserCreate, UserInfo
from troupe.manager.auth import create_user
from troupe.manager.deps import DB, AdminUser, CurrentUser
from troupe.manager.store.models import User

router = APIRouter(tags=["users"])


@router.post("/users", status_code=201, response_model=UserInfo)
async def new_user(req: UserCreate, db: DB, _: AdminUser) -> UserInfo:
    taken = Conflict(f"name: a user named {req.name!r} already exists", field="name")
    if (await db.execute(select(User.id).where(User.name == req.name))).first():
        raise taken
    try:
        user, key = await create_user(db, req.name, req.admin)
        await db.commit()  # the unique name settles concurrent creates
    except IntegrityError:
        raise taken from None
    return UserInfo(
        id=user.id, name=user.name, admin=user.admin, created_at=user.created_at, api_key=key
    )


@router.get("/users", response_model=list[UserInfo])
async def list_users(db: DB, _: AdminUser) -> list[UserInfo]:
    rows = await db.execute(select(User).order_by(User.name))
    return [
        UserInfo(id=u.id, name=u.name, admin=u.admin, created_at=u.created_at)
        for u in rows.scalars()
    ]


@router.get("/users/me", response_model=UserInfo)
async def me(user: CurrentUser) -> UserInfo:
    return UserInfo(id=user.id, name=user.name, admin=user.admin, created_at=user.created_at)
