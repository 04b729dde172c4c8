"""Which origin serves which app: ``<port>-<session id>.<app domain>``.

Each app (a port of a session's main1) gets a host name of its own, so a page of one app is
another origin than the web UI and than every other app: it can read neither the UI's cookie
nor another app's. The app domain (``--app-domain``) is a host name with an optional port;
every host name under it (and the app domain itself) is the proxy's, never the UI's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The first label of an app's host name: the app's port, then the session's id (a UUID).
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
APP_LABEL = re.compile(rf"([0-9]{{1,5}})-({UUID})")


@dataclass(frozen=True)
class AppTarget:
    """An app's origin, parsed: the session and the port in its main1."""

    session_id: str
    port: int


def split_host(host: str) -> tuple[str, str]:
    """A ``Host`` header as (host name in lower case, ``:port`` or "")."""
    host = host.strip().lower()
    if host.startswith("["):  # an IPv6 literal: never an app's
        return host, ""
    name, sep, port = host.rpartition(":")
    return (name, sep + port) if sep and port.isdigit() else (host, "")


@dataclass(frozen=True)
class AppDomain:
    """``--app-domain``: ``name`` (e.g. ``apps.localhost``) and ``port`` (``:8090`` or "")."""

    name: str
    port: str
    https: bool = False

    @classmethod
    def of(cls, value: str, https: bool = False) -> AppDomain | None:
        """None for "" (a server without apps)."""
        if not value:
            return None
        name, port = split_host(value)
        return cls(name, port, https)

    def owns(self, host: str) -> bool:
        """True if a request to ``host`` (a ``Host`` header) is the proxy's: the app domain
        or any name under it, whatever the port."""
        name, _ = split_host(host)
        return name == self.name or name.endswith("." + self.name)

    def target(self, host: str) -> AppTarget | None:
        """The app a ``Host`` header names; None if it names none."""
        name, port = split_host(host)
        label, dot, rest = name.partition(".")
        m = APP_LABEL.fullmatch(label)
        if not dot or rest != self.name or port != self.port or m is None:
            return None
        number = int(m.group(1))
        return AppTarget(m.group(2), number) if 1 <= number <= 65535 else None

    def origin(self, session_id: str, port: int) -> str:
        """The app's origin as a URL, e.g. ``http://8888-<id>.apps.localhost:8090``."""
        scheme = "https" if self.https else "http"
        return f"{scheme}://{port}-{session_id}.{self.name}{self.port}"
