"""/v1/folders: named persistent data folders, owned by a user."""

from __future__ import annotations

import contextlib
import uuid

from fastapi import APIRouter
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.errors import Conflict, NotFound
from troupe.api.lifecycle import SESSION_ACTIVE
from troupe.api.models import FolderCreate, FolderInfo
from troupe.manager.deps import DB, CurrentUser, RegistryDep
from troupe.manager.store.models import Folder, Session

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
    rows = await db.execute(select(Folder).where(Folder.owner_id == user.id).order_by(Folder.name))
    return [folder_info(f, user.name) for f in rows.scalars()]


@router.delete("/folders/{name}", status_code=204)
async def delete_folder(name: str, db: DB, user: CurrentUser, registry: RegistryDep) -> None:
    f = (
        await db.execute(select(Folder).where(Folder.owner_id == user.id, Folder.name == name))
    ).scalar_one_or_none()
    if f is None:
        raise NotFound.of("folder", name)
    rows = await db.execute(
        select(Session).where(Session.owner_id == user.id, Session.status.in_(SESSION_ACTIVE))
    )
    users = [s.name for s in rows.scalars() if any(m["folder_id"] == f.id for m in s.mounts)]
    if users:
        raise Conflict(f"folder {name!r} is mounted by session(s) {', '.join(users)}", field="name")
    await db.delete(f)
    await db.commit()
    await registry.delete_folder_data(f.id)
