"""Admission: a create request checked against the current state, stored PENDING.

Reads, then asks agents (images), then writes: no agent call inside a transaction. The
database's unique index on active names decides between concurrent creates of one name.

The user's limits (:mod:`troupe.manager.quotas`) are checked in the transaction that stores
the session, under a lock per owner (:func:`owner_lock`): two concurrent creates of one user
cannot both fit the last free slot of a quota. The lock lives in this process, which is
enough because one manager process serves the API (the database is not shared by several
managers); deleting a user takes the same lock, so no session slips in while it is deleted.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from troupe.api.errors import Conflict, DoesNotFit, Invalid, QuotaExceeded, Unauthorized
from troupe.api.lifecycle import (
    SESSION_ACTIVE,
    AgentStatus,
    Change,
    KernelStatus,
    SessionStatus,
    begin,
    utcnow,
)
from troupe.api.models import SessionCreate
from troupe.api.policies import SuccessPolicy, kernel_command
from troupe.api.registries import split_image
from troupe.api.users import Usage
from troupe.cluster import build_cluster, generate_ed25519
from troupe.manager import disk, quotas
from troupe.manager.fleet import offered_gpus
from troupe.manager.life import times
from troupe.manager.life.context import Life
from troupe.manager.roles import request_of
from troupe.manager.scheduler import AgentState, Part, never_fits
from troupe.manager.session_events import actor_of
from troupe.manager.store.models import Agent, Folder, Kernel, Session, User
from troupe.manager.store.unit import changes_of


def _name_taken(name: str) -> Conflict:
    return Conflict(f"name: a session named {name!r} already exists", field="name")


_locks: dict[str, asyncio.Lock] = {}
_holders: Counter[str] = Counter()


@asynccontextmanager
async def owner_lock(owner_id: str) -> AsyncIterator[None]:
    """One admission (or user deletion) of an owner at a time, in this process."""
    lock = _locks.setdefault(owner_id, asyncio.Lock())
    _holders[owner_id] += 1
    try:
        async with lock:
            yield
    finally:
        _holders[owner_id] -= 1
        if not _holders[owner_id]:
            del _holders[owner_id]
            _locks.pop(owner_id, None)


async def active_usage(db: AsyncSession, owner_id: str) -> Usage:
    """What the owner's active sessions hold: each kernel with its own (its role's) size."""
    rows = await db.execute(
        select(Kernel.session_id, Kernel.cpu, Kernel.mem, Kernel.gpu)
        .join(Session, Kernel.session_id == Session.id)
        .where(Session.owner_id == owner_id, Session.status.in_(SESSION_ACTIVE))
    )
    return Usage.of_kernels((sid, cpu, mem, gpu) for sid, cpu, mem, gpu in rows.all())


def _parts(req: SessionCreate) -> list[Part]:
    return [Part(r.name, r.replicas, r.cpu, r.mem, r.gpu) for r in req.resolved_roles()]


async def lost_states(life: Life, db: AsyncSession) -> list[AgentState]:
    """The LOST agents with all their capacity free: what each could hold once back (their
    sessions were failed when they were lost). No query while none is LOST."""
    if not life.fleet.lost:
        return []
    rows = await db.execute(
        select(Agent).where(Agent.id.in_(sorted(life.fleet.lost)), Agent.status == AgentStatus.LOST)
    )
    return [
        AgentState(id=a.id, group=a.group, cpu=a.cpu, mem=a.mem, gpu=len(offered_gpus(a)))
        for a in rows.scalars()
    ]


def _ask(req: SessionCreate) -> quotas.Ask:
    request = request_of("-", req.group, req.cluster_mode, _parts(req))
    roles = tuple((p.kernels, p.cpu, p.mem, p.gpu) for p in request.parts)
    return quotas.Ask(
        req.group, req.priority, request.size, request.cpu, request.mem, request.gpu, roles
    )


def _images(req: SessionCreate) -> dict[str, str]:
    """field -> image, each image once: the session's, then the roles' own."""
    out = {"image": req.image}
    for i, r in enumerate(req.roles or []):
        if r.image and r.image not in out.values():
            out[f"roles[{i}].image"] = r.image
    return out


def check_image(life: Life, field: str, image: str) -> str:
    """The registry of ``image``; refuses (422 naming ``field``) a malformed reference or one
    from a registry the server does not allow. An image missing on the agents is pulled when
    the session starts if its registry is configured or allowed by name (docs/registries.md)."""
    try:
        registry = split_image(image)[0]
    except Invalid as e:
        raise Invalid.field_rule(field, e.message.removeprefix("image: ")) from None
    allowed = life.config.allowed_registries
    if allowed and registry not in allowed:
        raise Invalid.field_rule(
            field,
            f"images from registry {registry!r} are not allowed on this server (allowed:"
            f" {', '.join(allowed)})",
        )
    return registry


def _refuse(refusal: quotas.Refusal | None) -> None:
    if refusal is not None:
        raise QuotaExceeded(refusal.message, field=refusal.field)


async def admit(life: Life, owner: User, req: SessionCreate) -> Session:
    """Stores the session PENDING and returns it (with its kernels, as stored: no second read
    on the way to the scheduler); raises a domain error if it can't be."""
    if req.cluster_size > life.config.max_cluster_size:
        limit = f"must be at most {life.config.max_cluster_size}"
        if req.roles is not None:
            raise Invalid.field_rule("roles", f"{req.cluster_size} kernels in total; {limit}")
        raise Invalid.field_rule("cluster_size", limit)
    await disk.check_room(life.config)
    limits = quotas.limits_of(life.config, owner)
    _refuse(quotas.check_static(limits, _ask(req)))
    clocks = times.for_new(
        life.config, limits, req.type, req.time_limit, req.stop_grace, req.idle_timeout
    )
    async with life.store() as db:
        if not owner.admin:  # early, so a refusal says the quota; checked again when stored
            _refuse(quotas.check(limits, await active_usage(db, owner.id), _ask(req)))
        taken = await db.execute(
            select(Session.id).where(
                Session.owner_id == owner.id,
                Session.name == req.name,
                Session.status.in_(SESSION_ACTIVE),
            )
        )
        if taken.first():
            raise _name_taken(req.name)
        folders: dict[str, str] = {}
        for m in req.mounts:
            row = await db.execute(
                select(Folder.id).where(Folder.owner_id == owner.id, Folder.name == m.folder)
            )
            folder_id = row.scalar_one_or_none()
            if folder_id is None:
                raise Invalid.field_rule("mounts", f"folder {m.folder!r} not found")
            folders[m.folder] = folder_id
        agents = await life.fleet.states(db)
        lost = await lost_states(life, db)
    request = request_of("-", req.group, req.cluster_mode, _parts(req))
    # Only a LOST agent could hold it: it waits PENDING, as the agent may come back (and the
    # image is not checked: a LOST agent cannot be asked, the alive ones may lack it).
    waits_for_lost = never_fits(request, agents) is not None
    reason = never_fits(request, [*agents, *lost]) if waits_for_lost else None
    if reason:
        field = "roles" if request.parts else "resources"
        raise DoesNotFit(f"{field}: {reason}", field=field)
    group = [a.id for a in agents if a.group == req.group]
    for field, image in _images(req).items():
        registry = check_image(life, field, image)
        if (
            not waits_for_lost
            and registry not in life.config.allowed_registries
            and registry not in life.fleet.pulls.book.hosts()
            and not await life.fleet.any_has_image(group, image)
        ):
            raise Invalid.field_rule(
                field,
                f"image {image!r} not found on the agents of group {req.group!r}, and its"
                f" registry {registry!r} is not configured (troupe registry add)",
            )
    session_id = str(uuid.uuid4())

    async def store(db: AsyncSession) -> Session:
        user = await db.get(User, owner.id, populate_existing=True)
        if user is None or user.deleted_at is not None:
            raise Unauthorized("this user was deleted")
        if not user.admin:  # fresh limits: an admin may have changed them meanwhile
            used = await active_usage(db, user.id)
            _refuse(quotas.check(quotas.limits_of(life.config, user), used, _ask(req)))
        s = new_session(session_id, owner, req, folders, changes_of(db))
        s.time_limit, s.stop_grace, s.idle_timeout = (
            clocks.time_limit,
            clocks.stop_grace,
            clocks.idle_timeout,
        )
        db.add(s)
        return s

    try:
        async with owner_lock(owner.id):
            return await life.store.write(store)
    except IntegrityError:
        raise _name_taken(req.name) from None


def new_session(
    session_id: str,
    owner: User,
    req: SessionCreate,
    folders: dict[str, str],
    changes: list[Change],
) -> Session:
    """The PENDING session with its kernels and fresh SSH keys (the session's and each
    kernel's host key)."""
    key = generate_ed25519(comment=f"troupe-{session_id[:8]}")
    s = Session(
        id=session_id,
        name=req.name,
        owner_id=owner.id,
        status_info={},
        type=req.type,
        image=req.image,
        cluster_size=req.cluster_size,
        cluster_mode=req.cluster_mode,
        cpu=req.resources.cpu,
        mem=req.resources.mem,
        gpu=req.resources.gpu,
        mounts=[{**m.model_dump(), "folder_id": folders[m.folder]} for m in req.mounts],
        environ=req.environ,
        startup_command=req.startup_command,
        dist_env=req.dist_env,
        group=req.group,
        priority=req.priority,
        max_pending_seconds=req.max_pending_seconds,
        uid=req.uid,
        gid=req.gid,
        isolated_network=req.isolated_network,
        ssh_private_key=key.private_openssh,
        ssh_public_key=key.public_openssh,
        user_ssh_key=req.ssh_key,
        max_restarts=req.max_restarts,
        no_restart_exit_codes=req.no_restart_exit_codes,
        success_policy=req.success_policy or SuccessPolicy.MAIN,
        request=req.model_dump(mode="json"),
    )
    s.created_at = now = utcnow()
    begin(s, SessionStatus.PENDING, changes, now, reason="created", actor=actor_of(owner))
    kernel_ids = [session_id] + [str(uuid.uuid4()) for _ in range(req.cluster_size - 1)]
    roles = {r.name: r for r in req.resolved_roles()}
    contracts = build_cluster(
        session_id,
        kernel_ids,
        req.cluster_mode,
        req.environ,
        req.dist_env,
        layout=[(r.name, r.replicas) for r in roles.values()],
        role_environ={r.name: r.environ for r in roles.values()},
    )
    for c in contracts:
        hk = generate_ed25519(comment=c.hostname)
        role = roles[c.role]
        k = Kernel(
            id=c.kernel_id,
            session_id=session_id,
            hostname=c.hostname,
            role=c.role,
            idx=c.idx,
            rank=c.rank,
            image=role.image,
            cpu=role.cpu,
            mem=role.mem,
            gpu=role.gpu,
            environ=role.environ,
            startup_command=kernel_command(
                req.success_policy, req.startup_command, role.startup_command
            ),
            host_public_key=hk.public_openssh,
            host_private_key=hk.private_openssh,
        )
        begin(k, KernelStatus.PENDING, changes, now)
        s.kernels.append(k)
    return s
