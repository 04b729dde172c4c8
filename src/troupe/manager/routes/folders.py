"""/v1/folders: named persistent data folders, owned by a user."""

from __future__ import annotations

import uuid

from fastapi import APIRouter
from sqlalchemy import select

from troupe.api.models import FolderCreate, FolderInfo
from troupe.manager.deps import DB, CurrentUser, RegistryDep
from troupe.manager.errors import conflict, not_found
from troupe.manager.registry import ACTIVE
from troupe.manager.store.models import Folder, Session

router = APIRouter(tags=["folders"])


def folder_info(f: Folder, owner: str) -> FolderInfo:
    return FolderInfo(id=f.id, name=f.name, owner=owner, created_at=f.created_at)


@router.post("/folders", status_code=201, response_model=FolderInfo)
async def create_folder(
    req: FolderCreate, db: DB, user: CurrentUser, registry: RegistryDep
) -> FolderInfo:
    exists = await db.execute(
        select(Folder.id).where(Folder.owner_id == user.id, Folder.name == req.name)
    )
    if exists.first():
        raise conflict("name", f"name: a folder named {req.name!r} already exists")
    f = Folder(id=str(uuid.uuid4()), name=req.name, owner_id=user.id)
    (registry.config.folders_dir / f.id).mkdir(parents=True, exist_ok=True)
    db.add(f)
    await db.commit()
    return folder_info(f, user.name)


@router.get("/folders", response_model=list[FolderInfo])
async def list_folders(db: DB, user: CurrentUser) -> list[FolderInfo]:
    rows = await db.execute(select(Folder).where(Folder.owner_id == user.id).order_by(Folder.name))
    return [folder_info(f, user.name) for f in rows.scalars()]


@router.delete("/folders/{name}", status_code=204)
async def delete_folder(name: str, db: DB, user: CurrentUser, registry: RegistryDep) -> None:
    f = (
        await db.execute(select(Folder).where(Folder.owner_id == user.id, Folder.name == name))
    ).scalar_one_or_none()
    if f is None:
        raise not_found("folder", name)
    rows = await db.execute(
        select(Session).where(
            Session.owner_id == user.id, Session.status.in_([s.value for s in ACTIVE])
        )
    )
    users = [s.name for s in rows.scalars() if any(m["folder_id"] == f.id for m in s.mounts)]
    if users:
        raise conflict("name", f"folder {name!r} is mounted by session(s) {', '.join(users)}")
    await db.delete(f)
    await db.commit()
    await registry.delete_folder_data(f.id)
