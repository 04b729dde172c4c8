"""Which errors each operation of the manager's API may answer, as ``/openapi.json`` lists them
(:func:`troupe.api.edge.document_errors` writes them in; the fuzz run of
``tests/fuzz/test_api_fuzz.py`` checks every answer's status and body against them).

Derived where the route says it: any input may be refused (422), a path names a thing that may
not be there (404), a body may not parse (400) or be over the limit (413); the dependencies
tell who is asked for
(a key: 401; an admin: 403; a stream slot: 429; the agent token or an agent's credential:
401, and that agent may be unknown: 404); a create may clash with what exists (409). What a
route's handler raises besides is in :data:`EXTRA`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.routing import RouteContext

from troupe.api import edge
from troupe.api.exec import MEDIA_TYPE as EXEC_MEDIA_TYPE
from troupe.manager import deps
from troupe.manager.routes import agents

#: Statuses a dependency answers (nested ones count: an admin check needs a user first).
BY_DEPENDENCY: dict[Callable[..., Any], set[int]] = {
    deps.current_user: {401},
    deps.admin_user: {403},
    deps.get_streams: {429},
    agents.agent_token: {401},
    agents.agent_credential: {401, 404},
}

#: What a handler raises beyond the derived statuses, by "METHOD path".
EXTRA: dict[str, set[int]] = {
    "GET /v1/sessions": {404},  # ``before`` names no session of the caller
    "POST /v1/sessions": {403, 507},  # quotas, resource groups; the data disk nearly full
    "GET /v1/sessions/{ref}/spec": {409},  # created before specs were kept
    "GET /v1/sessions/{ref}/logs": {502},  # the kernel's agent
    "POST /v1/sessions/{ref}/exec": {409, 502},  # not RUNNING; the kernel's agent
    "GET /v1/sessions/{ref}/apps": {409, 502},  # not RUNNING; main1's agent
    # an admin's open of another user's app; not RUNNING or nothing on the port; main1's agent
    "POST /v1/sessions/{ref}/apps/{app}": {403, 409, 502},
    "DELETE /v1/folders/{name}": {409},  # mounted by an active session
    "GET /v1/users/{name}": {403},  # someone else, for a user who is no admin
    "POST /v1/users/{name}/revoke": {409},  # the last admin
    "DELETE /v1/users/{name}": {409},  # active sessions, the last admin
    "DELETE /v1/agents/{name}": {409},  # ALIVE, or the manager's own
    "POST /v1/agents/register": {409},  # the name of a live agent
    "POST /v1/images/pull": {404, 502},  # no such agent; the pull failed on an agent
}

#: Success answers that are not JSON, by "METHOD path": their media types.
MEDIA: dict[str, list[str]] = {
    "POST /v1/sessions/{ref}/exec": [EXEC_MEDIA_TYPE],
}


def errors_of(route: RouteContext, method: str, operation: dict[str, Any]) -> set[int]:
    out = edge.input_errors(operation)
    for call in edge.dependency_calls(route):
        out |= BY_DEPENDENCY.get(call, set())
    if method == "POST" and route.status_code == 201:
        out.add(409)  # a name already taken
    return out | EXTRA.get(edge.operation_key(route, method), set())


def install(app: FastAPI) -> None:
    edge.document_errors(app, errors_of, MEDIA)
