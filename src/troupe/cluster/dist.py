"""Distributed-training variables (docs/contract.md, 'Environment in every kernel'), the Python
twin of `setup_dist_environ.sh`.

The shell script is what runs inside kernels (any image, only `/bin/sh` needed); this module is
its executable specification: the tests compare the two on many environments.

Rules beyond docs/contract.md, kept identical in the script:
- a number is 1..18 ASCII digits once leading zeros are dropped (`+4`, ` 4`, `4_0` are not);
- nothing is derived unless BACKENDAI_CLUSTER_HOSTS is set and every comma-separated host is
  non-empty and made of ASCII letters, digits, `.`, `_` and `-` (so TF_CONFIG needs no escaping);
- worker ports are base port + rank, not clipped at 65535.
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
    tf_config = {
        "cluster": {"worker": [f"{h}:{base + i}" for i, h in enumerate(hosts)]},
        "task": {"type": "worker", "index": rank},
    }
    derived = {
        "MASTER_ADDR": hosts[0],
        "MASTER_PORT": str(base),
        "TF_CONFIG": json.dumps(tf_config),
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
