"""Where the API is and which key to send: one place for the SDK and the CLI's fast path.

Standard library only, so that a short command (:mod:`troupe.client.cli.fastpath`) can read
them without loading httpx.
"""

from __future__ import annotations

import json
import os
from typing import Any

from troupe.api import defaults

#: Proxy variables httpx honours; with any set, requests go through the SDK (which uses them).
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy")


def load_settings(url: str | None = None, key: str | None = None) -> tuple[str, str | None]:
    """The API URL and key: arguments, else the environment, else the credentials file."""
    creds: dict[str, Any] = {}
    path = defaults.credentials_file()
    if path.exists():
        try:
            creds = json.loads(path.read_text())
        except (OSError, ValueError):
            creds = {}
    url = url or os.environ.get("TROUPE_API_URL") or creds.get("api_url") or defaults.API_URL
    key = key or os.environ.get("TROUPE_API_KEY") or creds.get("api_key")
    return url, key


def plain_http(url: str) -> bool:
    """Whether every request goes over plain HTTP, straight to the server (no TLS, no proxy)."""
    return url.startswith("http://") and not any(
        os.environ.get(k) or os.environ.get(k.upper()) for k in PROXY_VARIABLES
    )
