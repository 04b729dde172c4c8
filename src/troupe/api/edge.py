"""The HTTP edge shared by the manager's and the agent's FastAPI apps: domain errors, request
validation and anything unexpected all leave in one shape, ``{"error": {...}}``
(:class:`~troupe.api.error_body.ErrorBody`), never as a stack trace; and the OpenAPI document
says so (:func:`document_errors`). Only servers import this module (it loads FastAPI)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute, RouteContext, iter_route_contexts
from starlette.exceptions import HTTPException as StarletteHTTPException

from troupe.api import errors as E
from troupe.api.error_body import ErrorBody
from troupe.api.rule_words import location, words

log = logging.getLogger(__name__)

#: The one place a domain error becomes an HTTP status.
HTTP_STATUS: dict[type[E.TroupeError], int] = {
    E.NotFound: 404,
    E.Invalid: 422,
    E.DoesNotFit: 422,
    E.Conflict: 409,
    E.NotRunning: 409,
    E.Unauthorized: 401,
    E.Forbidden: 403,
    E.QuotaExceeded: 403,
    E.TooMany: 429,
    E.TooLarge: 413,
    E.InsufficientStorage: 507,
    E.AgentFailed: 502,
    E.Unreachable: 502,
    E.Internal: 500,
}
_CODE_OF_STATUS = {
    400: E.Invalid,
    401: E.Unauthorized,
    403: E.Forbidden,
    404: E.NotFound,
    413: E.TooLarge,
    429: E.TooMany,
}


def http_status(e: E.TroupeError) -> int:
    for cls in type(e).__mro__:
        if cls in HTTP_STATUS:
            return HTTP_STATUS[cls]
    return 500


def response(e: E.TroupeError) -> JSONResponse:
    return JSONResponse(e.to_wire(), status_code=http_status(e))


def validation_error(e: RequestValidationError) -> E.Invalid:
    """The first of pydantic's errors, as ``field: rule`` naming the field, the rule in words
    (:mod:`troupe.api.rule_words`)."""
    err = e.errors()[0]
    field = location(tuple(err.get("loc", ())))
    msg = words(err)
    message = f"{field}: {msg}" if field and not msg.startswith(f"{field}:") else msg
    if field is None and ":" in msg:  # model-level rule naming its field
        field = msg.split(":", 1)[0]
    return E.Invalid(message, field=field)


def install(app: FastAPI) -> None:
    @app.exception_handler(E.TroupeError)
    async def _domain(_: Request, e: E.TroupeError) -> JSONResponse:
        return response(e)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, e: RequestValidationError) -> JSONResponse:
        return response(validation_error(e))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, e: StarletteHTTPException) -> JSONResponse:
        cls = _CODE_OF_STATUS.get(e.status_code)
        err = cls(str(e.detail)) if cls else E.TroupeError(str(e.detail))
        body = err.to_wire()
        if cls is None:  # e.g. 405: a code that names the status
            body["error"]["code"] = str(e.detail).lower().replace(" ", "_")
        return JSONResponse(body, status_code=e.status_code)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, e: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return response(E.Internal(f"internal error: {type(e).__name__}"))


# -- the OpenAPI document ---------------------------------------------------------------------
#: An operation's error statuses, from its route, method and generated operation object.
ErrorsOf = Callable[[RouteContext, str, dict[str, Any]], Iterable[int]]
_REF = "#/components/schemas/"
#: FastAPI's own 422 shape, which troupe never answers (see :func:`validation_error`).
_FASTAPI_422 = ("HTTPValidationError", "ValidationError")


def error_codes(status: int) -> list[str]:
    """The error codes answered with ``status``."""
    codes = [cls.code for cls, s in HTTP_STATUS.items() if s == status]
    fallback = _CODE_OF_STATUS.get(status)
    return codes or ([fallback.code] if fallback else [])


def input_errors(operation: dict[str, Any]) -> set[int]:
    """What an operation with input may answer, whatever it does: 422 for any input (it breaks
    a rule), 404 for a path that names a thing (there is none), for a body 400 (it cannot be
    parsed) and 413 (over the server's limit)."""
    params = operation.get("parameters", [])
    body = "requestBody" in operation
    out = {422} if params or body else set()
    if any(p.get("in") == "path" for p in params):
        out.add(404)
    if body:
        out |= {400, 413}
    return out


def dependency_calls(route: RouteContext) -> set[Callable[..., Any]]:
    """Every dependency of ``route``, the nested ones too (e.g. the admin check's user)."""

    def walk(d: Dependant) -> Iterator[Callable[..., Any]]:
        for sub in d.dependencies:
            if sub.call is not None:
                yield sub.call
            yield from walk(sub)

    dependant: Dependant = route.dependant
    return set(walk(dependant))


def operation_key(route: RouteContext, method: str) -> str:
    """``"METHOD path"``, e.g. ``"GET /v1/sessions/{ref}"``: how tables name an operation."""
    return f"{method} {route.path_format}"


def _error_response(status: int) -> dict[str, Any]:
    codes = " or ".join(error_codes(status)) or "see message"
    return {
        "description": f"{HTTPStatus(status).phrase} (code {codes})",
        "content": {"application/json": {"schema": {"$ref": f"{_REF}ErrorBody"}}},
    }


def with_errors(
    doc: dict[str, Any],
    routes: Sequence[Any],
    errors_of: ErrorsOf,
    media: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """``doc`` (FastAPI's document of ``routes``) with troupe's error model in place of
    FastAPI's 422 one and every operation's error answers (``errors_of``) listed with it;
    ``media``: the media types of success answers that are not JSON, by :func:`operation_key`
    (a streaming route's own, which FastAPI does not know)."""
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    for name in _FASTAPI_422:
        schemas.pop(name, None)
    model = ErrorBody.model_json_schema(ref_template=_REF + "{model}")
    schemas.update(model.pop("$defs", {}))
    schemas["ErrorBody"] = model
    for route in iter_route_contexts(routes):  # as FastAPI walks them (included routers too)
        if not isinstance(route.original_route, APIRoute) or not route.include_in_schema:
            continue
        for method in sorted(route.methods or ()):
            operation = doc["paths"][route.path_format][method.lower()]
            responses = operation["responses"]
            types = (media or {}).get(operation_key(route, method))
            if types:
                responses[str(route.status_code or 200)]["content"] = {t: {} for t in types}
            responses.pop("422", None)  # FastAPI's shape; put back below where it applies
            for status in sorted(set(errors_of(route, method, operation))):
                responses[str(status)] = _error_response(status)
    return doc


def document_errors(
    app: FastAPI, errors_of: ErrorsOf, media: Mapping[str, Sequence[str]] | None = None
) -> None:
    """Makes ``app``'s OpenAPI document (``/openapi.json``) true about errors: the one error
    model, and for each operation the statuses ``errors_of`` says it may answer (see
    :func:`with_errors`)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = FastAPI.openapi(app)
            app.openapi_schema = with_errors(doc, app.routes, errors_of, media)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
