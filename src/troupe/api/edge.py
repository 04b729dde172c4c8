"""The HTTP edge shared by the manager's and the agent's FastAPI apps: domain errors, request
validation and anything unexpected all leave in one shape, ``{"error": {...}}``, never as a
stack trace. Only servers import this module (it loads FastAPI)."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from troupe.api import errors as E

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
    """The first of pydantic's errors, as ``field: rule`` naming the field."""
    err = e.errors()[0]
    loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path")]
    field = ".".join(loc) or None
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
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
