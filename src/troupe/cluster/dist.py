"""Distributed-training variables (docs/contract.md, 'Environment in every kernel'), the Python
twin of `setup_dist_environ.sh`.

The shell script is what runs inside kernels (any image, only `/bin/sh` needed); this module is
its executable specification: the tests compare the two on many environments.

Rules beyond docs/contract.md, kept identical in the script:
- a number is 1..18 ASCII digits once leading zeros are dropped (`+4`, ` 4`, `4_0` are not);
- nothing is derived unless BACKENDAI_CLUSTER_HOSTS is set and every comma-separated host is
  non-empty and made of ASCII letters, digits, `.`, `_` and `-` (so TF_CONFIG needs no escaping);
- worker ports are base port + rank, not clipped at 65535;
- a host's role is its name less its trailing digits (``worker2`` -> ``worker``); TF_CONFIG's
  cluster lists the task types in the order chief, worker, ps, evaluator (those with hosts);
- a rank past the hosts' end is task ``worker`` with that index (as before roles).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from troupe.cluster.contract import DEFAULT_MASTER_PORT, DistEnvMode

_MAX_DIGITS = 18
#: Where every kernel finds the session's hosts (``HOST slots=1`` lines; see contract.py).
HOSTFILE = "/home/config/hostfile"
#: Launchers that then need no flags: torchrun reads ``PET_<OPTION>`` for each of its options
#: (so a bare ``torchrun train.py`` in every kernel forms the job); Open MPI 4's ``mpirun``
#: (and Open MPI 5's, through PRRTE) uses this default hostfile, one slot per kernel.
LAUNCHER_NAMES = (
    "PET_NNODES",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
    "OMPI_MCA_orte_default_hostfile",
    "PRTE_MCA_prte_default_hostfile",
)
_DIST_HOST_RE = re.compile(r"[A-Za-z0-9._-]+")
#: TensorFlow's task types, in the order TF_CONFIG's cluster lists them.
TF_TASK_TYPES = ("chief", "worker", "ps", "evaluator")


def tf_task_types(hosts: list[str]) -> list[str]:
    """Each host's TensorFlow task type: a role named like one is that one; ``main`` is the
    ``chief`` when a ``ps`` role exists (and no ``chief`` one), else like every other role a
    ``worker``."""
    roles = [h.rstrip("0123456789") for h in hosts]
    main = "chief" if "ps" in roles and "chief" not in roles else "worker"
    return [r if r in TF_TASK_TYPES else main if r == "main" else "worker" for r in roles]


def tf_config(hosts: list[str], base: int, rank: int) -> dict[str, object]:
    """TF_CONFIG of the kernel at ``rank``: each host at base port + its position in hosts."""
    types = tf_task_types(hosts)
    cluster = {
        t: [f"{h}:{base + i}" for i, h in enumerate(hosts) if types[i] == t]
        for t in TF_TASK_TYPES
        if t in types
    }
    if rank >= len(hosts):
        return {"cluster": cluster, "task": {"type": "worker", "index": rank}}
    mine = types[rank]
    return {"cluster": cluster, "task": {"type": mine, "index": types[:rank].count(mine)}}


def _number(value: str | None, max_digits: int = _MAX_DIGITS) -> str | None:
    """Canonical digits of a plain decimal number, or None when `value` is not one."""
    if not value or not (value.isascii() and value.isdigit()):
        return None
    digits = value.lstrip("0") or "0"
    return digits if len(digits) <= max_digits else None


def _base_port(value: str | None) -> int:
    """BACKENDAI_DIST_MASTER_PORT when it is a port number; anything else counts as unset."""
    digits = _number(value, max_digits=5)
    if digits is not None and 1 <= int(digits) <= 65535:
        return int(digits)
    return DEFAULT_MASTER_PORT


def derive_dist_env(environ: Mapping[str, str]) -> dict[str, str]:
    """Variables the script adds to `environ`: never one `environ` already has, even if empty."""
    size = _number(environ.get("BACKENDAI_CLUSTER_SIZE"))
    if size is None or size in ("0", "1"):
        return {}
    hosts_value = environ.get("BACKENDAI_CLUSTER_HOSTS")
    if not hosts_value:
        return {}
    hosts = hosts_value.split(",")
    if not all(_DIST_HOST_RE.fullmatch(h) for h in hosts):
        return {}
    base = _base_port(environ.get("BACKENDAI_DIST_MASTER_PORT"))
    rank = int(_number(environ.get("BACKENDAI_CLUSTER_LOCAL_RANK")) or "0")
    derived = {
        "MASTER_ADDR": hosts[0],
        "MASTER_PORT": str(base),
        "TF_CONFIG": json.dumps(tf_config(hosts, base, rank)),
        "PET_NNODES": size,
        "PET_NODE_RANK": str(rank),
        "PET_MASTER_ADDR": hosts[0],
        "PET_MASTER_PORT": str(base),
        "OMPI_MCA_orte_default_hostfile": HOSTFILE,
        "PRTE_MCA_prte_default_hostfile": HOSTFILE,
    }
    if environ.get("BACKENDAI_DIST_ENV") == DistEnvMode.PER_CONTAINER:
        derived |= {
            "WORLD_SIZE": size,
            "RANK": str(rank),
            "WORLD_RANK": str(rank),
            "LOCAL_RANK": "0",
        }
    return {name: value for name, value in derived.items() if name not in environ}
