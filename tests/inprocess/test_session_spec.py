"""A session's file through the API: ``GET /v1/sessions/{ref}/spec`` gives back the create
request, which sent again makes the same session; ``GET /v1/schemas/session.json`` is that
request's JSON Schema, served without a key (docs/design.md, 'Session files')."""

from __future__ import annotations

from typing import Any

from sqlalchemy import update

from tests.inprocess.conftest import IMAGE, Harness
from tests.inprocess.helpers import anon_client, error_of, running
from troupe.api.models import SessionCreate
from troupe.manager.store.models import Session

TORCH = "troupe/pytorch:0.1.0"


def shape(s: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What makes two sessions the same: every kernel's host, role, image, resources."""
    return [
        (k["hostname"], k["role"], k["idx"], k["rank"], k["image"], k["resources"])
        for k in s["kernels"]
    ]


async def test_spec_recreates_the_same_session(manager: Harness) -> None:
    manager.local.image_names.add(TORCH)
    assert (await manager.client.post("/folders", json={"name": "data"})).status_code == 201
    body: dict[str, Any] = {
        "resources": {"cpu": 0.5, "mem": "1g"},
        "roles": [
            {"name": "worker", "replicas": 2, "image": TORCH, "resources": {"cpu": 0.25}},
            {"name": "ps", "environ": {"X": "ps"}},
        ],
        "mounts": [{"folder": "data", "readonly": True}],
        "environ": {"A": "1"},
        "priority": 3,
        "uid": 1001,
    }
    first = await running(manager, "t", **body)
    r = await manager.client.get("/sessions/t/spec")
    assert r.status_code == 200, r.text
    spec = r.json()
    assert SessionCreate.model_validate(spec) == SessionCreate.model_validate(
        {"name": "t", "image": IMAGE, **body}
    )
    assert (await manager.client.delete("/sessions/t")).status_code == 200
    r = await manager.client.post("/sessions", json=spec)
    assert r.status_code == 201, r.text
    again = await manager.wait("t")
    assert again["id"] != first["id"]
    assert shape(again) == shape(first)
    keys = ("cluster_size", "resources", "mounts", "priority", "uid", "gid", "image", "type")
    assert {k: again[k] for k in keys} == {k: first[k] for k in keys}
    # each kernel's own variables too
    for host, var in (("ps1", "ps"), ("worker1", None)):
        env = manager.local.container(again["id"], host).spec.env
        assert env.get("X") == var and env["A"] == "1"


async def test_spec_of_a_session_stored_before_specs(manager: Harness) -> None:
    await manager.create("old")
    assert manager.app is not None
    async with manager.app.state.db() as db:
        await db.execute(update(Session).where(Session.name == "old").values(request=None))
        await db.commit()
    r = await manager.client.get("/sessions/old/spec")
    assert r.status_code == 409 and "before specs were kept" in error_of(r)["message"]


async def test_spec_of_no_session(manager: Harness) -> None:
    r = await manager.client.get("/sessions/nope/spec")
    assert r.status_code == 404


async def test_schema_is_the_create_requests_and_needs_no_key(manager: Harness) -> None:
    async with anon_client(manager) as c:
        r = await c.get("/schemas/session.json")
    assert r.status_code == 200
    schema = r.json()
    assert schema["title"] == "troupe session file"
    # every field of the request, derived from the model (fields added later come in too)
    assert set(schema["properties"]) == set(SessionCreate.model_fields)
    assert schema["additionalProperties"] is False
    role = schema["$defs"]["RoleSpec"]
    assert set(role["properties"]) >= {"name", "replicas", "image", "resources", "environ"}
    # sizes may be written as 2g: the schema says so, so editors accept them
    mem = schema["$defs"]["Resources"]["properties"]["mem"]
    assert {"type": "string"} in mem["anyOf"]
