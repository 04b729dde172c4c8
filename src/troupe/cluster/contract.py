"""The container-side cluster contract (docs/contract.md, 'Environment in every kernel'):
hostnames, ranks and BACKENDAI_* variables.

Pure functions only, so the manager, the agent and the tests all derive the very same values
from the same inputs and nothing can drift between them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum


class ClusterMode(StrEnum):
    """Where a session's kernels may go: all on one agent, or spread over several."""

    SINGLE_NODE = "single-node"
    MULTI_NODE = "multi-node"


class DistEnvMode(StrEnum):
    """``per-container`` adds WORLD_SIZE/RANK/LOCAL_RANK for one process per kernel."""

    DEFAULT = "default"
    PER_CONTAINER = "per-container"


#: A role's name: a lowercase word (``main``, ``sub``, ``worker``, ``ps`` ...). Hostnames are
#: ``<role><idx>``, so a name with a digit could collide with another role's host (``sub`` and
#: ``sub1``); letters only, and no two roles share a name, so no two hosts do.
Role = str
MAIN_ROLE = "main"
#: The role of every kernel but main1 when a session names no roles (today's sessions).
SUB_ROLE = "sub"
ROLE_NAME_MAX = 16
ROLE_NAME = re.compile(rf"[a-z]{{1,{ROLE_NAME_MAX}}}\Z")
#: A session's roles in order, main first: (name, replicas).
Layout = Sequence[tuple[str, int]]

SSH_PORT = 2200
DEFAULT_MASTER_PORT = 29500
RESERVED_ENV_PREFIX = "BACKENDAI_"

#: The one reserved name a user may set: it is the knob for the distributed master/base port.
USER_SETTABLE_RESERVED = frozenset({"BACKENDAI_DIST_MASTER_PORT"})


def reserved_names(environ: Mapping[str, str]) -> list[str]:
    """The names in ``environ`` a user may not set (``BACKENDAI_*`` but the settable one)."""
    return sorted(
        k for k in environ if k.startswith(RESERVED_ENV_PREFIX) and k not in USER_SETTABLE_RESERVED
    )


#: Every variable of the first table of docs/contract.md, 'Environment in every kernel';
#: set in every kernel, including size 1.
CLUSTER_ENV_NAMES: tuple[str, ...] = (
    "BACKENDAI_CLUSTER_SIZE",
    "BACKENDAI_CLUSTER_HOSTS",
    "BACKENDAI_CLUSTER_REPLICAS",
    "BACKENDAI_CLUSTER_HOST",
    "BACKENDAI_CLUSTER_IDX",
    "BACKENDAI_CLUSTER_ROLE",
    "BACKENDAI_CLUSTER_LOCAL_RANK",
    "BACKENDAI_CLUSTER_MODE",
    "BACKENDAI_KERNEL_ID",
    "BACKENDAI_SESSION_ID",
)

# Hostnames end up in ssh_config, known_hosts and hostfiles: a strict shape keeps them from
# injecting extra lines or options there.
_HOSTNAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]*\Z")


def check_hostname(host: str) -> str:
    """Return `host` if it is a plain hostname, else raise ValueError: it goes into configs."""
    if not _HOSTNAME_RE.match(host):
        raise ValueError(f"invalid hostname: {host!r}")
    return host


def default_layout(size: int) -> list[tuple[str, int]]:
    """The roles of a session that names none: ``main:1`` plus ``sub:size-1``."""
    if size < 1:
        raise ValueError(f"cluster size must be at least 1, got {size}")
    return [(MAIN_ROLE, 1)] + ([(SUB_ROLE, size - 1)] if size > 1 else [])


def role_error(layout: Layout) -> str | None:
    """Why ``layout`` is no session's roles (None: it is one): main first with one replica,
    each name a lowercase word given once, at least one replica each."""
    if not layout or layout[0] != (MAIN_ROLE, 1):
        return "the first role must be main with one replica"
    seen: set[str] = set()
    for name, replicas in layout:
        if not ROLE_NAME.match(name):
            return f"role name {name!r} must be 1-{ROLE_NAME_MAX} lowercase letters"
        if name in seen:
            return f"role {name!r} is given twice"
        if replicas < 1:
            return f"role {name!r} needs at least one replica"
        seen.add(name)
    return None


def _layout_of(layout: Layout | int) -> list[tuple[str, int]]:
    if isinstance(layout, int):
        return default_layout(layout)
    why = role_error(layout)
    if why is not None:
        raise ValueError(why)
    return list(layout)


def layout_hostnames(layout: Layout | int) -> list[tuple[str, int, str]]:
    """(role, idx, hostname) of every kernel, in rank order: main1, then each role's
    ``<role>1 ... <role>N`` in the roles' order."""
    return [
        (name, idx, f"{name}{idx}")
        for name, replicas in _layout_of(layout)
        for idx in range(1, replicas + 1)
    ]


def cluster_hostnames(size: Layout | int) -> list[str]:
    """Hostnames of a session: of `size` kernels (`main1` first, then `sub1` ... `sub{size-1}`),
    or of its roles in order (`main1, worker1, worker2, ps1`)."""
    return [host for _, _, host in layout_hostnames(size)]


@dataclass(frozen=True)
class KernelContract:
    """Identity and complete container environment of one kernel of a session."""

    kernel_id: str
    hostname: str
    role: Role
    idx: int  # one-based within the role
    rank: int  # zero-based in the whole session: main1=0, sub1=1, ...
    env: dict[str, str]


def replicas_text(size: Layout | int) -> str:
    """`BACKENDAI_CLUSTER_REPLICAS` value: `main:1,sub:3`, just `main:1` for size 1, or the
    roles in order (`main:1,worker:3,ps:1`)."""
    return ",".join(f"{name}:{replicas}" for name, replicas in _layout_of(size))


def build_cluster(
    session_id: str,
    kernel_ids: Sequence[str],
    mode: ClusterMode | str,
    user_environ: Mapping[str, str] | None = None,
    dist_env: DistEnvMode | str = DistEnvMode.DEFAULT,
    layout: Layout | None = None,
    role_environ: Mapping[str, Mapping[str, str]] | None = None,
) -> list[KernelContract]:
    """One contract per kernel (main1, sub1, ... or main1 then each role's kernels), each with
    the environment the agent sets.

    ``layout``: the roles in order (default: ``main:1`` plus ``sub``); its total must be the
    number of kernels. ``role_environ``: role -> variables of that role's kernels, over
    ``user_environ``.

    `kernel_ids[0]` is main1's id and must equal `session_id`, as docs/contract.md, 'Environment
    in every kernel' promises programs that compare BACKENDAI_SESSION_ID with
    BACKENDAI_KERNEL_ID.
    """
    try:
        mode, dist_env = ClusterMode(mode), DistEnvMode(dist_env)
    except ValueError as e:
        raise ValueError(f"invalid cluster mode or dist_env: {e}") from None
    size = len(kernel_ids)
    if size < 1:
        raise ValueError("a session needs at least one kernel")
    if kernel_ids[0] != session_id:
        raise ValueError("the session id must equal main1's kernel id")
    if len(set(kernel_ids)) != size:
        raise ValueError("kernel ids must be unique")
    user = dict(user_environ or {})
    per_role = {name: dict(env) for name, env in (role_environ or {}).items()}
    reserved = sorted({n for env in (user, *per_role.values()) for n in reserved_names(env)})
    if reserved:
        raise ValueError(f"reserved environment variable(s) cannot be set: {', '.join(reserved)}")

    roles = _layout_of(size if layout is None else layout)
    kernels = layout_hostnames(roles)
    if len(kernels) != size:
        raise ValueError(f"the roles have {len(kernels)} kernels, not {size}")
    common = {
        "BACKENDAI_CLUSTER_SIZE": str(size),
        "BACKENDAI_CLUSTER_HOSTS": ",".join(host for _, _, host in kernels),
        "BACKENDAI_CLUSTER_REPLICAS": replicas_text(roles),
        "BACKENDAI_CLUSTER_MODE": mode.value,
        "BACKENDAI_SESSION_ID": session_id,
    }
    if dist_env is DistEnvMode.PER_CONTAINER:
        common["BACKENDAI_DIST_ENV"] = dist_env.value

    contracts: list[KernelContract] = []
    for rank, (kernel_id, (role, idx, host)) in enumerate(zip(kernel_ids, kernels, strict=True)):
        env = {
            **user,
            **per_role.get(role, {}),
            **common,
            "BACKENDAI_CLUSTER_HOST": host,
            "BACKENDAI_CLUSTER_IDX": str(idx),
            "BACKENDAI_CLUSTER_ROLE": role,
            "BACKENDAI_CLUSTER_LOCAL_RANK": str(rank),
            "BACKENDAI_KERNEL_ID": kernel_id,
        }
        contracts.append(KernelContract(kernel_id, host, role, idx, rank, env))
    return contracts


def hostfile_text(hosts: Sequence[str], slots: int | Sequence[int] = 1) -> str:
    """OpenMPI hostfile for `mpirun` (`/home/config/hostfile`): one `HOST slots=N` line per host;
    ``slots`` is every host's, or each host's in order (its GPU count, 1 without GPUs)."""
    each = [slots] * len(hosts) if isinstance(slots, int) else list(slots)
    if len(each) != len(hosts):
        raise ValueError(f"{len(each)} slot counts for {len(hosts)} hosts")
    if any(n < 1 for n in each):
        raise ValueError(f"slots must be at least 1, got {min(each)}")
    return "".join(f"{check_hostname(h)} slots={n}\n" for h, n in zip(hosts, each, strict=True))
