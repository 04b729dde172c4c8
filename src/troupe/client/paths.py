"""The one place where the client puts names into the manager's URL paths (the SDK, the CLI's
fast path, the WebSocket URLs of shells, tunnels and copies).

Each segment is escaped whole, so a ``/``, ``?``, ``#`` or ``%`` stays inside it. Escaping is
not enough for ``.`` and ``..``: HTTP clients (httpx among them) resolve those segments before
sending, so ``destroy ..`` would become ``DELETE /v1`` and ``../folders/x`` once reached
another route (finding N4, docs/reliability.md). They are refused, and a session reference
must be what the server can name a session by, a name or an id; anything else is refused
here, before any request, with :class:`~troupe.api.errors.Invalid`.

Standard library only: the fast path must not load httpx or pydantic.
"""

from __future__ import annotations

import re
from urllib.parse import quote

from troupe.api.errors import Invalid

#: A session's name or id (``troupe.api.models.NAME_PATTERN`` without its anchors; ids are
#: UUIDs, which fit it). A unit test holds the two together.
REF_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}"
_REF = re.compile(REF_PATTERN)


def api_path(*segments: str) -> str:
    """``/a/b`` (under ``/v1``) from ``segments``, each escaped whole; an empty, ``.`` or
    ``..`` segment is refused (it would be resolved away)."""
    for seg in segments:
        if seg in ("", ".", ".."):
            raise Invalid(f"{seg!r} is not a name")
    return "".join("/" + quote(seg, safe="") for seg in segments)


def check_ref(ref: str) -> str:
    """``ref`` if it can name a session (a name or an id), else :class:`Invalid`."""
    if not _REF.fullmatch(ref):
        raise Invalid.field_rule(
            "session",
            f"{ref[:100]!r} is not a session name or id (letters, digits, _ . -; at most 63,"
            " starting with a letter or digit)",
        )
    return ref


def session_path(ref: str, *rest: str) -> str:
    """``/sessions/REF[/...]`` of a session reference, checked (:func:`check_ref`)."""
    return api_path("sessions", check_ref(ref), *rest)
