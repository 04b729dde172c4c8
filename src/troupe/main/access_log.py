"""Secrets out of the server's request logs (finding N6, docs/reliability.md).

uvicorn logs every request line with its query string (``uvicorn.access``) and every
WebSocket path (``uvicorn.error``). A key sent where it does not belong (``?api_key=trp_...``,
which the server refuses) must not land in the log in clear text: the values of query
parameters named like a secret (``api_key``, ``key``, ``token``, ``password``, ``secret``, ...)
and anything shaped like a troupe key (``trp_...``), wherever it stands, are replaced by
``[redacted]`` before the line is written.
"""

from __future__ import annotations

import copy
import logging
import re
from typing import Any
from urllib.parse import unquote_plus

REDACTED = "[redacted]"
#: A query parameter (``?name=value`` or ``&name=value``) in a logged request line.
_PARAM = re.compile(r"(?P<lead>[?&;](?P<name>[^=&;#\s\"']+)=)(?P<value>[^&;#\s\"']*)")
#: Parameter names whose values are secrets (matched on the percent-decoded, lower-case name).
_SECRET_NAME = re.compile(r"key|token|passw|secret|credential")
#: A troupe API key (``troupe.manager.auth.KEY_PREFIX``), plain or percent-encoded.
_TROUPE_KEY = re.compile(r"trp(?:_|%5[fF])[A-Za-z0-9_%.~-]*")


def redact(text: str) -> str:
    """``text`` without secret query values and troupe keys."""

    def param(m: re.Match[str]) -> str:
        if not m["value"] or not _SECRET_NAME.search(unquote_plus(m["name"]).lower()):
            return m[0]
        return m["lead"] + REDACTED

    return _TROUPE_KEY.sub(f"trp_{REDACTED}", _PARAM.sub(param, text))


class RedactSecrets(logging.Filter):
    """Redacts a record's message and its string arguments (uvicorn passes the path as one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        return True


def uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's own logging set-up, with :class:`RedactSecrets` on its request loggers."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["redact_secrets"] = {"()": RedactSecrets}
    for name in ("uvicorn.access", "uvicorn.error"):
        config["loggers"].setdefault(name, {}).setdefault("filters", []).append("redact_secrets")
    return config
