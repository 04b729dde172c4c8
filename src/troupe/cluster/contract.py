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
from typing import Literal


class ClusterMode(StrEnum):
    """Where a session's kernels may go: all on one agent, or spread over several."""

    SINGLE_NODE = "single-node"
    MULTI_NODE = "multi-node"


class DistEnvMode(StrEnum):
    """``per-container`` adds WORLD_SIZE/RANK/LOCAL_RANK for one process per kernel."""

    DEFAULT = "default"
    PER_CONTAINER = "per-container"


Role = Literal["main", "sub"]

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


def cluster_hostnames(size: int) -> list[str]:
    """Hostnames of a session of `size` kernels: `main1` first, then `sub1` ... `sub{size-1}`."""
    if size < 1:
        raise ValueError(f"cluster size must be at least 1, got {size}")
    return ["main1", *(f"sub{i}" for i in range(1, size))]


@dataclass(frozen=True)
class KernelContract:
    """Identity and complete container environment of one kernel of a session."""

    kernel_id: str
    hostname: str
    role: Role
    idx: int  # one-based within the role
    rank: int  # zero-based in the whole session: main1=0, sub1=1, ...
    env: dict[str, str]


def replicas_text(size: int) -> str:
    """`BACKENDAI_CLUSTER_REPLICAS` value: `main:1,sub:3`, or just `main:1` for size 1."""
    if size < 1:
        raise ValueError(f"cluster size must be at least 1, got {size}")
    return "main:1" if size == 1 else f"main:1,sub:{size - 1}"


def build_cluster(
    session_id: str,
    kernel_ids: Sequence[str],
    mode: ClusterMode | str,
    user_environ: Mapping[str, str] | None = None,
    dist_env: DistEnvMode | str = DistEnvMode.DEFAULT,
) -> list[KernelContract]:
    """One contract per kernel (main1, sub1, ...), each with the environment the agent sets.

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
    reserved = reserved_names(user)
    if reserved:
        raise ValueError(f"reserved environment variable(s) cannot be set: {', '.join(reserved)}")

    hosts = cluster_hostnames(size)
    common = {
        "BACKENDAI_CLUSTER_SIZE": str(size),
        "BACKENDAI_CLUSTER_HOSTS": ",".join(hosts),
        "BACKENDAI_CLUSTER_REPLICAS": replicas_text(size),
        "BACKENDAI_CLUSTER_MODE": mode.value,
        "BACKENDAI_SESSION_ID": session_id,
    }
    if dist_env is DistEnvMode.PER_CONTAINER:
        common["BACKENDAI_DIST_ENV"] = dist_env.value

    contracts: list[KernelContract] = []
    for rank, (kernel_id, host) in enumerate(zip(kernel_ids, hosts, strict=True)):
        role: Role = "main" if rank == 0 else "sub"
        idx = 1 if rank == 0 else rank
        env = {
            **user,
            **common,
            "BACKENDAI_CLUSTER_HOST": host,
            "BACKENDAI_CLUSTER_IDX": str(idx),
            "BACKENDAI_CLUSTER_ROLE": role,
            "BACKENDAI_CLUSTER_LOCAL_RANK": str(rank),
            "BACKENDAI_KERNEL_ID": kernel_id,
        }
        contracts.append(KernelContract(kernel_id, host, role, idx, rank, env))
    return contracts


def hostfile_text(hosts: Sequence[str], slots: int = 1) -> str:
    """OpenMPI hostfile for `mpirun` (`/home/config/hostfile`): one `HOST slots=N` line per host."""
    if slots < 1:
        raise ValueError(f"slots must be at least 1, got {slots}")
    return "".join(f"{check_hostname(h)} slots={slots}\n" for h in hosts)
