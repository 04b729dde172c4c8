"""The SDK's reads of event lists (docs/events.md): a session's events and the audit list.
:class:`troupe.client.sdk.Client` has these methods; they live here to keep that module small."""

from __future__ import annotations

from typing import TYPE_CHECKING

from troupe.client.paths import session_path
from troupe.client.sdk_requests import Requests

if TYPE_CHECKING:
    from troupe.api.events import AuditEntry, SessionEvent


def _paging(after: int | None, since: float | str | None, limit: int | None) -> dict[str, str]:
    values = {"after": after, "since": since, "limit": limit}
    return {k: str(v) for k, v in values.items() if v is not None}


class EventReads:
    def session_events(
        self: Requests,
        ref: str,
        after: int | None = None,
        since: float | str | None = None,
        limit: int | None = None,
    ) -> list[SessionEvent]:
        """The session's events, oldest first: the newest ``limit`` (server default 500), or
        the oldest after event id ``after`` (follow a list by passing the last id seen);
        ``since``: epoch seconds or RFC 3339."""
        from troupe.api.events import SessionEvent
        from troupe.client.sdk import _many

        data = self._req("GET", session_path(ref, "events"), params=_paging(after, since, limit))
        return _many(SessionEvent, data)

    def audit(
        self: Requests,
        after: int | None = None,
        since: float | str | None = None,
        limit: int | None = None,
    ) -> list[AuditEntry]:
        """Changes of users and keys (admins), paged as :meth:`session_events`."""
        from troupe.api.events import AuditEntry
        from troupe.client.sdk import _many

        return _many(AuditEntry, self._req("GET", "/audit", params=_paging(after, since, limit)))
