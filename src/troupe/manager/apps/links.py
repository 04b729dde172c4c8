"""STUB until the app proxy is merged: the one-time links into an app (docs/apps.md).

Same signatures as the proxy's module; this stand-in serves ``apps.localhost`` and its token
opens nothing.
"""

from __future__ import annotations

from starlette.datastructures import State

#: Where a link enters an app (on the app's origin).
ENTER_PATH = "/_troupe/enter"


def app_origin(state: State, session_id: str, port: int) -> str | None:
    """The app's origin URL (no token), or None if the server serves no apps."""
    return f"http://{port}-{session_id}.apps.localhost"


def issue_link(state: State, session_id: str, owner_id: str, port: int) -> str:
    """A one-time link into app ``port`` of the session, for its owner."""
    return f"{app_origin(state, session_id, port)}{ENTER_PATH}?t=stub"
