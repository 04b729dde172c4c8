"""The apps an image declares in its labels (docs/contract.md, "Apps").

``ai.backend.service-ports`` is Backend.AI's list ``name:protocol:port[,...]``, so images made
for Backend.AI keep their declarations; troupe adds ``troupe.app.<name>.command``, the command
line that starts an app. Pure (no engine, no I/O), so every side reads labels the same way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

SERVICE_PORTS_LABEL = "ai.backend.service-ports"
MIN_PORT, MAX_PORT = 1, 65535

_NAME = re.compile(r"[a-z][a-z0-9-]*")
_PROTOCOL = re.compile(r"[a-z][a-z0-9]*")
_PORT = re.compile(r"[0-9]{1,5}")


@dataclass(frozen=True, slots=True)
class AppDecl:
    """One declared app. ``command`` is None when the image gives none: the app can still be
    opened once the user starts it on its port."""

    name: str
    protocol: str
    port: int
    command: str | None


def command_label(name: str) -> str:
    """The label holding app ``name``'s start command."""
    return f"troupe.app.{name}.command"


def parse_service_ports(labels: Mapping[str, str]) -> list[AppDecl]:
    """The apps in an image's ``labels``, in declared order; none without the label (or with
    it empty). A malformed label raises ValueError saying what is wrong. A command label for
    an app the list does not name is ignored: an image built FROM another inherits its labels
    and may declare fewer apps."""
    raw = labels.get(SERVICE_PORTS_LABEL, "")
    if not raw.strip():
        return []
    if "[" in raw:  # Backend.AI's name:protocol:[port,port] for an app with several ports
        raise ValueError(
            f"{SERVICE_PORTS_LABEL}: port lists ([...]) are not supported: one port per app"
        )
    apps: list[AppDecl] = []
    names: set[str] = set()
    ports: dict[int, str] = {}
    for entry in raw.split(","):
        name, protocol, port = _entry(entry.strip())
        if name in names:
            raise ValueError(f"{SERVICE_PORTS_LABEL}: app {name!r} is declared twice")
        if port in ports:
            twice = f"({ports[port]!r} and {name!r})"
            raise ValueError(f"{SERVICE_PORTS_LABEL}: port {port} is declared twice {twice}")
        names.add(name)
        ports[port] = name
        command = labels.get(command_label(name), "").strip() or None
        apps.append(AppDecl(name=name, protocol=protocol, port=port, command=command))
    return apps


def _entry(entry: str) -> tuple[str, str, int]:
    parts = entry.split(":")
    if len(parts) != 3:
        raise ValueError(f"{SERVICE_PORTS_LABEL}: {entry!r} is not name:protocol:port")
    name, protocol, port = parts
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"{SERVICE_PORTS_LABEL}: app name {name!r} must be a lowercase letter followed by "
            "lowercase letters, digits and '-'"
        )
    if not _PROTOCOL.fullmatch(protocol):
        raise ValueError(
            f"{SERVICE_PORTS_LABEL}: protocol {protocol!r} of app {name!r} must be a lowercase "
            "word such as http"
        )
    if not _PORT.fullmatch(port) or not MIN_PORT <= int(port) <= MAX_PORT:
        raise ValueError(
            f"{SERVICE_PORTS_LABEL}: port {port!r} of app {name!r} is not a number in "
            f"{MIN_PORT}-{MAX_PORT}"
        )
    return name, protocol, int(port)
