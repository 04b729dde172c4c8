"""The image registries an admin configured, with their secrets, in one private file.

``<data dir>/registries.json``, mode 0600 (the data dir itself is 0700), written whole to a
new file and renamed over the old one, so a crash never leaves half of it. It holds each
registry's host, user name, password and CA; the API and the logs only ever see
:class:`RegistryInfo` (whether there is a password, never the password). A file rather than a
database table: the secrets then never sit in a database dump or its backups.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from troupe.api.errors import Conflict, NotFound
from troupe.api.registries import RegistryAdd, RegistryAuth, RegistryInfo, parse_host
from troupe.manager.private_file import write_private


class RegistryBook:
    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        return {str(k): dict(v) for k, v in data.items()}

    def _write(self, data: dict[str, dict[str, Any]]) -> None:
        write_private(self.path, json.dumps(data, indent=1, sort_keys=True))

    def infos(self) -> list[RegistryInfo]:
        return [_info(host, r) for host, r in sorted(self._read().items())]

    def add(self, req: RegistryAdd) -> RegistryInfo:
        """Adds a registry (409 if it is there: remove it first to change it)."""
        host = parse_host(req.host)
        data = self._read()
        if host in data:
            raise Conflict(f"registry {host!r} exists: remove it first to change it", field="host")
        data[host] = {"username": req.username, "password": req.password, "ca_pem": req.ca_pem}
        self._write(data)
        return _info(host, data[host])

    def remove(self, host: str) -> None:
        data = self._read()
        if data.pop(host.lower(), None) is None:
            raise NotFound.of("registry", host)
        self._write(data)

    def auth(self, registry: str) -> tuple[RegistryAuth | None, str | None]:
        """The credentials and CA of ``registry`` (None, None when it is not configured)."""
        r = self._read().get(registry)
        if r is None:
            return None, None
        auth = None
        if r.get("username") and r.get("password") is not None:
            auth = RegistryAuth(username=r["username"], password=r["password"])
        return auth, r.get("ca_pem")

    def hosts(self) -> list[str]:
        return sorted(self._read())


def _info(host: str, r: dict[str, Any]) -> RegistryInfo:
    return RegistryInfo(
        host=host,
        username=r.get("username"),
        has_password=r.get("password") is not None,
        has_ca=bool(r.get("ca_pem")),
    )
