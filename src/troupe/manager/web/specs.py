"""The launch dialog's session files: load one into the form, download what the form holds.

The browser has no YAML reader; the manager reads and writes the text with the CLI's
:mod:`troupe.api.specfile`, so a file from the dialog and one from ``troupe session spec``
are the same (docs/webui.md).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import ValidationError

from troupe.api.edge import validation_error
from troupe.api.errors import Invalid
from troupe.api.models import SessionCreate
from troupe.api.specfile import SpecFileError, dump, parse
from troupe.manager.deps import CurrentUser

router = APIRouter(include_in_schema=False)
#: The most a session file may be (the request body limit stops larger bodies before this).
MAX_TEXT = 256 * 1024


def _validated(data: dict[str, Any]) -> SessionCreate:
    try:
        return SessionCreate.model_validate(data)
    except ValidationError as e:
        raise validation_error(RequestValidationError(e.errors())) from None


@router.post("/ui/spec/load")
async def load(request: Request, _: CurrentUser) -> JSONResponse:
    """A session file's text in, the request it gives out (the values it sets, checked as a
    create would; the name may be left out): 422 naming the line or the field."""
    body = await request.body()
    if len(body) > MAX_TEXT:
        raise Invalid.field_rule("file", f"a session file is at most {MAX_TEXT // 1024} KiB")
    try:
        data = parse(body.decode("utf-8"))
    except (SpecFileError, UnicodeDecodeError) as e:
        raise Invalid.field_rule("file", str(e)) from None
    named = "name" in data
    req = _validated(data if named else {**data, "name": "unnamed"})
    out = req.model_dump(mode="json", exclude_unset=True)
    if not named:
        out.pop("name", None)
    return JSONResponse(out)


@router.post("/ui/spec/download")
async def download(request: Request, _: CurrentUser) -> PlainTextResponse:
    """The form's request (JSON, as it would be sent to create) as a session file."""
    data = await request.json()
    if not isinstance(data, dict):
        raise Invalid("the request must be a JSON object")
    req = _validated(data)
    base = str(request.base_url)
    return PlainTextResponse(dump(req, base), media_type="application/yaml")
