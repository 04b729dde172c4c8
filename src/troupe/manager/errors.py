"""Errors in the JSON shape of SPEC section 9, never a stack trace to the client."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field


def not_found(what: str, ref: str) -> ApiError:
    return ApiError(404, "not_found", f"{what} {ref!r} not found")


def invalid(field: str, message: str) -> ApiError:
    return ApiError(422, "invalid", f"{field}: {message}", field)


def conflict(field: str, message: str) -> ApiError:
    return ApiError(409, "conflict", message, field)


def body(code: str, message: str, field: str | None = None) -> dict[str, object]:
    return {"error": {"code": code, "message": message, "field": field}}


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api(_: Request, e: ApiError) -> JSONResponse:
        return JSONResponse(body(e.code, e.message, e.field), status_code=e.status)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, e: RequestValidationError) -> JSONResponse:
        err = e.errors()[0]
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path")]
        field = ".".join(loc) or None
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        message = f"{field}: {msg}" if field and not msg.startswith(f"{field}:") else msg
        if field is None and ":" in msg:  # model-level rule naming its field
            field = msg.split(":", 1)[0]
        return JSONResponse(body("invalid", message, field), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, e: StarletteHTTPException) -> JSONResponse:
        code = {401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed"}
        return JSONResponse(
            body(code.get(e.status_code, "error"), str(e.detail)), status_code=e.status_code
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, e: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return JSONResponse(
            body("internal", f"internal error: {type(e).__name__}"), status_code=500
        )
