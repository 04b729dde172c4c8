"""A session's roles on the wire (docs/design.md, 'Roles'): what a create request may give per
role, the rules it must keep, and each role with the session's values filled in.

A role's hostnames are ``<name><idx>``: names are lowercase words (no digit, so ``sub`` and
``sub1`` cannot both be roles and make two ``sub11``), each given once; ``main`` is main1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from troupe.api.values import Size, check_environ, check_image
from troupe.cluster.contract import MAIN_ROLE, ROLE_NAME, ROLE_NAME_MAX


class RoleResources(BaseModel):
    """A role's resources per kernel; what it leaves out is the session's (``resources``)."""

    model_config = ConfigDict(extra="forbid")

    cpu: float | None = Field(None, gt=0, le=1024, description="cores, may be fractional")
    mem: Size | None = Field(None, description="bytes, or a size such as 512m")
    gpu: int | None = Field(None, ge=0, le=64, description="whole devices")


class RoleSpec(BaseModel):
    """One role of a session: ``replicas`` kernels ``<name>1 ... <name>N``. What it leaves
    out comes from the session's top-level values, but for ``startup_command``: the top-level
    one is main's alone."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        description=f"a lowercase word (1-{ROLE_NAME_MAX} letters a-z); hostnames are "
        "<name><idx>; main is the session's first kernel and has one replica",
    )
    replicas: int = Field(1, description="kernels of this role (at least 1; main: 1)")
    image: str | None = Field(None, description="Docker image reference (default: the session's)")
    resources: RoleResources | None = None
    environ: dict[str, str] | None = Field(
        None, description="variables of this role's kernels, over the session's environ"
    )
    startup_command: str | None = Field(
        None, max_length=65536, description="batch sessions: what each kernel of the role runs"
    )


@dataclass(frozen=True)
class ResolvedRole:
    """A role with every value filled in from the session's: what its kernels get."""

    name: str
    replicas: int
    image: str
    cpu: float
    mem: int
    gpu: int
    #: the role's own variables (over the session's environ)
    environ: dict[str, str]
    startup_command: str | None


def roles_error(roles: Sequence[RoleSpec], batch: bool) -> str | None:
    """Why ``roles`` break a rule, as ``roles[i].field: rule`` (None: they keep them all).
    Resources are the caller's to check, once filled in from the session's."""
    if not roles:
        return "roles: give at least one role, or leave roles out"
    seen: set[str] = set()
    for i, role in enumerate(roles):
        at = f"roles[{i}]"
        if not ROLE_NAME.match(role.name):
            return (
                f"{at}.name: {role.name!r} must be a lowercase word of 1-{ROLE_NAME_MAX} letters"
                " a-z (hostnames are <name><idx>: a digit could make two equal)"
            )
        if role.name in seen:
            return f"{at}.name: role {role.name!r} is given twice"
        seen.add(role.name)
        if role.replicas < 1:
            return f"{at}.replicas: must be at least 1"
        if role.name == MAIN_ROLE and role.replicas != 1:
            return f"{at}.replicas: role main has exactly one replica (main1)"
        try:
            if role.image is not None:
                check_image(role.image)
        except ValueError as e:
            return f"{at}.image: {e}"
        try:
            check_environ(role.environ or {})
        except ValueError as e:
            return f"{at}.environ: {e}"
        if role.startup_command is not None and not batch:
            return f"{at}.startup_command: only batch sessions run a startup command"
        if role.startup_command == "":
            return f"{at}.startup_command: must not be empty"
    return None


def total_kernels(roles: Sequence[RoleSpec]) -> int:
    """The kernels of ``roles``, main1 counted when it is implicit."""
    implicit = 0 if any(r.name == MAIN_ROLE for r in roles) else 1
    return sum(r.replicas for r in roles) + implicit
