"""The choices and defaults the session commands show and take, as plain values.

They are those of :mod:`troupe.api.models` and :mod:`troupe.cluster` (``SessionType``,
``ClusterMode``, ``DistEnvMode``, ``ExecUser``, what :class:`~troupe.api.models.SessionCreate`
assumes for a field left out), written here so that building the command line loads neither
pydantic nor the cluster package; ``tests/unit/test_cli_fast.py`` holds the two together.
The server still decides: these only shape help texts and the options' choices.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from troupe.api import defaults


class SessionType(StrEnum):
    INTERACTIVE = "interactive"
    BATCH = "batch"


class ClusterMode(StrEnum):
    SINGLE_NODE = "single-node"
    MULTI_NODE = "multi-node"


class DistEnvMode(StrEnum):
    DEFAULT = "default"
    PER_CONTAINER = "per-container"


#: Who a command runs as in a kernel.
ExecUser = Literal["work", "root"]

#: What the server assumes for a field of a new session left out.
CREATE_DEFAULTS: dict[str, Any] = {
    "cluster_size": 1,
    "cluster_mode": ClusterMode.SINGLE_NODE,
    "type": SessionType.INTERACTIVE,
    "dist_env": DistEnvMode.DEFAULT,
    "group": defaults.GROUP,
    "priority": 0,
    "uid": 1000,
    "gid": 1000,
}
#: Per-kernel resources of a new session that names none.
RESOURCE_DEFAULTS: dict[str, Any] = {"cpu": defaults.CPU, "mem": defaults.MEM, "gpu": 0}
