"""``/openapi.json`` tells errors as they are: troupe's one error model (never FastAPI's 422
shape), and each operation's error answers. That the answers keep to it is the fuzz run's
part (``tests/fuzz/test_api_fuzz.py``, Schemathesis' conformance checks)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute, iter_route_contexts

from tests.inprocess.conftest import Harness
from troupe.api import edge
from troupe.api import errors as E
from troupe.api.error_body import ErrorBody
from troupe.manager import openapi
from troupe.manager.app import create_app

ERROR_REF = {"$ref": "#/components/schemas/ErrorBody"}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    """The manager's app, never started (building its document touches no disk)."""
    tmp: Path = tmp_path_factory.mktemp("openapi")
    return create_app(Harness(tmp).config)


@pytest.fixture(scope="module")
def doc(app: FastAPI) -> dict[str, Any]:
    return dict(app.openapi())


def operations(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{m.upper()} {p}": op for p, ops in doc["paths"].items() for m, op in ops.items()}


def errors(op: dict[str, Any]) -> set[int]:
    return {int(s) for s in op["responses"] if int(s) >= 400}


def test_one_error_model_and_no_fastapi_422(doc: dict[str, Any]) -> None:
    text = json.dumps(doc)
    assert "HTTPValidationError" not in text and '"ValidationError"' not in text
    for label, op in operations(doc).items():
        for status, answer in op["responses"].items():
            if int(status) >= 400:
                assert answer["content"] == {"application/json": {"schema": ERROR_REF}}, label


#: (operation, error statuses): what the handlers and their dependencies raise
EXPECTED = {
    "GET /v1/health": set(),
    "GET /v1/folders": {401},
    "POST /v1/sessions": {400, 401, 403, 409, 413, 422, 507},
    "GET /v1/sessions": {401, 404, 422},
    "GET /v1/sessions/{ref}": {401, 404, 422},
    "GET /v1/sessions/{ref}/wait": {401, 404, 422, 429},
    "GET /v1/sessions/{ref}/spec": {401, 404, 409, 422},
    "GET /v1/schemas/session.json": set(),
    "GET /v1/sessions/{ref}/logs": {401, 404, 422, 429, 502},
    "POST /v1/sessions/{ref}/exec": {400, 401, 404, 409, 413, 422, 429, 502},
    "GET /v1/users": {401, 403},
    "GET /v1/users/{name}": {401, 403, 404, 422},
    "DELETE /v1/users/{name}": {401, 403, 404, 409, 422},
    "DELETE /v1/agents/{name}": {401, 403, 404, 409, 422},
    "POST /v1/agents/register": {400, 401, 409, 413, 422},
    "POST /v1/agents/{name}/heartbeat": {401, 404, 422},
}


def test_each_operation_lists_its_error_answers(doc: dict[str, Any]) -> None:
    ops = operations(doc)
    got = {label: errors(ops[label]) for label in EXPECTED}
    assert got == EXPECTED
    for label, op in ops.items():  # every operation with a key is refused without one
        if label not in ("GET /v1/health", "GET /v1/schemas/session.json"):
            assert 401 in errors(op), label


def test_every_status_of_the_edge_is_documented_where_it_is_answered(
    doc: dict[str, Any],
) -> None:
    """A status the edge maps a domain error to (but 500) that no operation lists means an
    error class was added without saying where it is answered (manager/openapi.py)."""
    documented = set().union(*(errors(op) for op in operations(doc).values()))
    assert set(edge.HTTP_STATUS.values()) - {500} <= documented


def test_the_tables_name_operations_and_dependencies_that_exist(
    app: FastAPI, doc: dict[str, Any]
) -> None:
    """A renamed route or dependency would leave its row silently unused."""
    assert set(openapi.EXTRA) | set(openapi.MEDIA) <= set(operations(doc))
    routes = [r for r in iter_route_contexts(app.routes) if isinstance(r.original_route, APIRoute)]
    used = set().union(*(edge.dependency_calls(r) for r in routes))
    assert set(openapi.BY_DEPENDENCY) <= used


def test_exec_says_its_media_type(doc: dict[str, Any]) -> None:
    ok = operations(doc)["POST /v1/sessions/{ref}/exec"]["responses"]["200"]
    assert list(ok["content"]) == ["application/x-ndjson"]


def wire_errors() -> list[dict[str, Any]]:
    """What the edge answers: every domain error (with and without field and kernel), a
    request validation error, a status of Starlette's own."""
    out = []
    for cls in {*edge.HTTP_STATUS, E.TroupeError}:
        out.append(cls("what went wrong").to_wire())
        out.append(cls("name: taken", field="name", kernel="sub1").to_wire())
    invalid = RequestValidationError([{"loc": ("body", "name"), "msg": "bad", "type": "x"}])
    out.append(edge.validation_error(invalid).to_wire())
    return out


@pytest.mark.parametrize("body", wire_errors(), ids=lambda b: str(b["error"]["code"]))
def test_the_model_is_what_the_edge_answers(doc: dict[str, Any], body: dict[str, Any]) -> None:
    assert ErrorBody.model_validate(body).model_dump(exclude_none=True) == {
        "error": {k: v for k, v in body["error"].items() if v is not None}
    }
    schema = {"$ref": "#/components/schemas/ErrorBody", "components": doc["components"]}
    jsonschema_rs.validate(schema, body)


def test_the_model_refuses_other_shapes(doc: dict[str, Any]) -> None:
    schema = {"$ref": "#/components/schemas/ErrorBody", "components": doc["components"]}
    for bad in [
        {"detail": [{"loc": ["body"], "msg": "x", "type": "y"}]},  # FastAPI's
        {"error": {"code": "not_found", "message": "x"}},  # no field
        {"error": {"code": "not_found", "message": "x", "field": None, "extra": 1}},
        {"error": {"code": "Not Found", "message": "x", "field": None}},
        {"error": {"code": "not_found", "message": "x", "field": None, "kernel": None}},
    ]:
        with pytest.raises(jsonschema_rs.ValidationError):
            jsonschema_rs.validate(schema, bad)
