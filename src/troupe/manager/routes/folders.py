"""/v1/folders: named persistent data folders, owned by a user."""

from __future__ import annotations

import contextlib
import uuid

from fastapi import APIRouter
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.errors import Conflict
from troupe.api.models import FolderCreate, FolderInfo
from troupe.manager.deps import DB, CurrentUser, RegistryDep
from troupe.manager.reads.folders import find_folder, own_folders
from troupe.manager.reads.sessions import folders_in_use
from troupe.manager.store.models import Folder

router = APIRouter(tags=["folders"])


def folder_info(f: Folder, owner: str) -> FolderInfo:
    return FolderInfo(id=f.id, name=f.name, owner=owner, created_at=f.created_at)


async def delete_owned(db: AsyncSession, owner_id: str) -> list[str]:
    """Deletes the rows of every folder of ``owner_id`` (not committed); returns their ids,
    whose data the caller deletes once committed (``Registry.delete_folder_data``)."""
    rows = await db.execute(select(Folder).where(Folder.owner_id == owner_id))
    ids = []
    for f in rows.scalars():
        ids.append(f.id)
        await db.delete(f)
    return ids


@router.post("/folders", status_code=201, response_model=FolderInfo)
async def create_folder(
    req: FolderCreate, db: DB, user: CurrentUser, registry: RegistryDep
) -> FolderInfo:
    exists = await db.execute(
        select(Folder.id).where(Folder.owner_id == user.id, Folder.name == req.name)
    )
    taken = Conflict(f"name: a folder named {req.name!r} already exists", field="name")
    if exists.first():
        raise taken
    f = Folder(id=str(uuid.uuid4()), name=req.name, owner_id=user.id)
    db.add(f)
    try:
        await db.commit()  # the unique (owner, name) constraint settles concurrent creates
    except IntegrityError:
        raise taken from None
    # Mode 0700 whatever the umask: a kernel's entrypoint gives it to the kernel's user work
    # (uid 1000), whom it stays usable by (docs/reliability.md, finding N10).
    path = registry.config.folders_dir / f.id
    with contextlib.suppress(FileExistsError):
        path.mkdir(parents=True, mode=0o700)
        path.chmod(0o700)
    return folder_info(f, user.name)


@router.get("/folders", response_model=list[FolderInfo])
async def list_folders(db: DB, user: CurrentUser) -> list[FolderInfo]:
    return [folder_info(f, user.name) for f in await own_folders(db, user)]


@router.delete("/folders/{name}", status_code=204)
async def delete_folder(name: str, db: DB, user: CurrentUser, registry: RegistryDep) -> None:
    f = await find_folder(db, user, name)
    if users := (await folders_in_use(db, user.id)).get(f.id):
        raise Conflict(f"folder {name!r} is mounted by session(s) {', '.join(users)}", field="name")
    await db.delete(f)
    await db.commit()
    await registry.delete_folder_data(f.id)
