"""The apps an image declares in its labels (docs/contract.md, "Apps"), as plain data.

``ai.backend.service-ports`` lists them in Backend.AI's format ``name:protocol:port[,...]``;
``troupe.app.<name>.command`` says how to start one (a ``/bin/sh -c`` command line). Pure:
the manager reads the labels through the agent and turns a ``ValueError`` into a domain error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple

#: The label listing an image's apps.
SERVICE_PORTS = "ai.backend.service-ports"
#: ``troupe.app.<name>.command``: how to start app ``name``.
COMMAND_LABEL = "troupe.app.{name}.command"
#: An app's name: also a file name in the kernel (its log), so no ``/`` and no leading dot.
APP_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,62}\Z")


class AppDecl(NamedTuple):
    name: str
    protocol: str
    port: int
    command: str | None


def parse_service_ports(labels: Mapping[str, str]) -> list[AppDecl]:
    """The apps ``labels`` declare, in their order; [] without the label.

    Raises ``ValueError`` naming the label and the entry at fault."""
    text = labels.get(SERVICE_PORTS, "").strip()
    if not text:
        return []
    apps: list[AppDecl] = []
    for entry in text.split(","):
        parts = entry.strip().split(":")
        if len(parts) != 3:
            raise ValueError(f"{SERVICE_PORTS}: {entry.strip()!r} is not name:protocol:port")
        name, protocol, port = (p.strip() for p in parts)
        if not APP_NAME.match(name):
            raise ValueError(
                f"{SERVICE_PORTS}: app name {name!r} must be a letter, then letters, digits,"
                " _ or - (at most 63)"
            )
        if not (port.isdigit() and 1 <= int(port) <= 65535):
            raise ValueError(f"{SERVICE_PORTS}: port {port!r} of {name!r} is not 1-65535")
        if not protocol:
            raise ValueError(f"{SERVICE_PORTS}: {name!r} names no protocol")
        if any(a.name == name for a in apps) or any(a.port == int(port) for a in apps):
            raise ValueError(f"{SERVICE_PORTS}: {name!r} or its port {port} is declared twice")
        command = labels.get(COMMAND_LABEL.format(name=name), "").strip() or None
        apps.append(AppDecl(name, protocol.lower(), int(port), command))
    return apps
