"""What the SDK's call groups (``sdk_events``, ``sdk_registries``, ``sdk_users``) need of
:class:`troupe.client.sdk.Client`: its one request method. They annotate ``self`` with this
protocol, so each group is type-checked against the client without importing it."""

from __future__ import annotations

from typing import Any, Protocol


class Requests(Protocol):
    def _req(self, method: str, path: str, **kw: Any) -> Any: ...
