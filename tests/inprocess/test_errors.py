"""Validation and domain errors at the API edge, all in one shape:
``{"error": {"code", "message", "field"}}`` (plus ``kernel`` when one is concerned)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.inprocess.conftest import IMAGE, Harness
from tests.inprocess.helpers import anon_client, error_of, running
from troupe.api.errors import AgentFailed
from troupe.api.exec import decode


async def post_session(h: Harness, **body: Any) -> httpx.Response:
    return await h.client.post("/sessions", json={"name": "s", "image": IMAGE, **body})


#: request body (over a valid one) -> the error's code and field
REFUSED: list[tuple[dict[str, Any], str, str]] = [
    ({"name": "bad name!"}, "invalid", "name"),
    ({"name": "-starts-with-dash"}, "invalid", "name"),
    ({"name": "x" * 64}, "invalid", "name"),
    ({"cluster_size": 65}, "invalid", "cluster_size"),
    ({"cluster_size": 0}, "invalid", "cluster_size"),
    ({"environ": {"BACKENDAI_X": "1"}}, "invalid", "environ"),
    ({"environ": {"X\n": "1"}}, "invalid", "environ"),
    ({"environ": {"X": "a\nb"}}, "invalid", "environ"),
    ({"resources": {"cpu": 0}}, "invalid", "resources.cpu"),
    ({"resources": {"mem": "lots"}}, "invalid", "resources.mem"),
    ({"resources": {"cpu": 5}}, "does_not_fit", "resources"),
    ({"resources": {"mem": "9g"}}, "does_not_fit", "resources"),
    ({"resources": {"gpu": 1}}, "does_not_fit", "resources"),
    ({"cluster_size": 5, "resources": {"cpu": 1}}, "does_not_fit", "resources"),
    ({"group": "nowhere"}, "does_not_fit", "resources"),
    ({"image": "no/such:image"}, "invalid", "image"),
    ({"mounts": [{"folder": "nope"}]}, "invalid", "mounts"),
    ({"type": "batch"}, "invalid", "startup_command"),
    ({"startup_command": "true"}, "invalid", "startup_command"),
    ({"surprise": 1}, "invalid", "surprise"),
]


async def test_create_refused_naming_the_field(manager: Harness) -> None:
    # one manager for every case (a harness costs more than the requests)
    for body, code, field in REFUSED:
        r = await post_session(manager, **body)
        assert r.status_code == 422, (body, r.text)
        err = error_of(r)
        assert (err["code"], err["field"]) == (code, field), (body, err)
        assert manager.local.session_ids() == set()
    r = await manager.client.get("/sessions", params={"all": True})
    assert r.json() == []
    assert (await post_session(manager)).status_code == 201  # the base body is fine


async def test_multi_node_session_over_every_agent_does_not_fit(manager: Harness) -> None:
    r = await post_session(manager, cluster_size=5, cluster_mode="multi-node", resources={"cpu": 1})
    assert r.status_code == 422
    err = error_of(r)
    assert err["code"] == "does_not_fit" and "room for only 4 of 5" in err["message"]


async def test_unknown_session_is_404(manager: Harness) -> None:
    for method, path in [
        ("GET", "/sessions/ghost"),
        ("DELETE", "/sessions/ghost"),
        ("GET", "/sessions/ghost/wait"),
        ("GET", "/sessions/ghost/logs"),
    ]:
        r = await manager.client.request(method, path)
        assert r.status_code == 404, (method, path, r.text)
        err = error_of(r)
        assert err["code"] == "not_found" and "ghost" in err["message"]
    r = await manager.client.post("/sessions/ghost/exec", json={"command": ["true"]})
    assert r.status_code == 404


async def test_wait_parameters_are_validated(manager: Harness) -> None:
    await manager.create("w")
    cases: list[tuple[dict[str, str | float], str]] = [
        ({"until": "forever"}, "until"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": 301}, "timeout"),
    ]
    for params, field in cases:
        r = await manager.client.get("/sessions/w/wait", params=params)
        assert r.status_code == 422, (params, r.text)
        assert error_of(r)["field"] == field


async def test_unknown_route_is_404_in_the_same_shape(manager: Harness) -> None:
    r = await manager.client.get("/nothing-here")
    assert r.status_code == 404
    assert error_of(r)["code"] == "not_found"


async def test_exec_on_a_session_not_running_is_409(manager: Harness) -> None:
    manager.local.ready_gate.clear()
    await manager.create("prep")
    await manager.wait_status("prep", "PREPARING")
    r = await manager.client.post("/sessions/prep/exec", json={"command": ["true"]})
    assert r.status_code == 409
    err = error_of(r)
    assert err["code"] == "not_running" and "PREPARING" in err["message"]
    manager.local.ready_gate.set()
    await manager.wait("prep")
    await manager.client.delete("/sessions/prep")
    r = await manager.client.post("/sessions/prep/exec", json={"command": ["true"]})
    assert r.status_code == 409
    assert error_of(r)["code"] == "not_running"


async def test_exec_request_is_validated(manager: Harness) -> None:
    await running(manager, "e")
    r = await manager.client.post("/sessions/e/exec", json={"command": []})
    assert r.status_code == 422 and error_of(r)["field"] == "command"
    r = await manager.client.post("/sessions/e/exec", json={"command": ["x"], "user": "admin"})
    assert r.status_code == 422 and error_of(r)["field"] == "user"


async def test_missing_or_invalid_api_key_is_401(manager: Harness) -> None:
    async with anon_client(manager) as anon:
        r = await anon.get("/sessions")
        assert r.status_code == 401
        err = error_of(r)
        assert err["code"] == "unauthorized" and "missing" in err["message"]
        r = await anon.get("/sessions", headers={"Authorization": "Bearer trp_nope"})
        assert r.status_code == 401 and error_of(r)["code"] == "unauthorized"
        r = await anon.get("/sessions", headers={"X-API-Key": "trp_nope"})
        assert r.status_code == 401
        # the agent token is not a user's key
        r = await anon.get("/sessions", headers={"Authorization": "Bearer agent-secret"})
        assert r.status_code == 401
        r = await anon.get("/health")  # the one open route
        assert r.status_code == 200


async def new_user(h: Harness, name: str, admin: bool = False) -> httpx.AsyncClient:
    r = await h.client.post("/users", json={"name": name, "admin": admin})
    assert r.status_code == 201, r.text
    key = r.json()["api_key"]
    assert key.startswith("trp_")
    return h.user_client(key)


async def test_users_are_created_by_admins_only(manager: Harness) -> None:
    alice = await new_user(manager, "alice")
    r = await alice.get("/users/me")
    assert r.json()["name"] == "alice" and r.json()["admin"] is False
    r = await alice.post("/users", json={"name": "mallory", "admin": True})
    assert r.status_code == 403
    assert error_of(r)["code"] == "forbidden"
    r = await alice.get("/users")
    assert r.status_code == 403
    r = await manager.client.get("/users")
    assert sorted(u["name"] for u in r.json()) == ["admin", "alice"]
    assert all(u["api_key"] is None for u in r.json())  # keys are shown once
    r = await manager.client.post("/users", json={"name": "alice"})
    assert r.status_code == 409 and error_of(r)["field"] == "name"


async def test_another_users_session_is_404(manager: Harness) -> None:
    alice = await new_user(manager, "alice")
    bob = await new_user(manager, "bob")
    r = await alice.post("/sessions", json={"name": "mine", "image": IMAGE})
    assert r.status_code == 201
    sid = r.json()["id"]
    for ref in ("mine", sid):
        r = await bob.get(f"/sessions/{ref}")
        assert r.status_code == 404, r.text
        assert error_of(r)["code"] == "not_found"
        r = await bob.delete(f"/sessions/{ref}")
        assert r.status_code == 404
        r = await bob.post(f"/sessions/{ref}/exec", json={"command": ["id"]})
        assert r.status_code == 404
        r = await bob.get(f"/sessions/{ref}/logs")
        assert r.status_code == 404
    r = await bob.get("/sessions")
    assert r.json() == []
    # bob may use the same name; the admin sees both
    r = await bob.post("/sessions", json={"name": "mine", "image": IMAGE})
    assert r.status_code == 201
    r = await manager.client.get("/sessions")
    assert sorted(s["owner"] for s in r.json()) == ["alice", "bob"]
    assert (await alice.get(f"/sessions/{sid}")).json()["owner"] == "alice"


async def test_another_users_folder_cannot_be_mounted(manager: Harness) -> None:
    alice = await new_user(manager, "alice")
    r = await alice.post("/folders", json={"name": "data"})
    assert r.status_code == 201
    r = await manager.client.post(
        "/sessions", json={"name": "s", "image": IMAGE, "mounts": [{"folder": "data"}]}
    )
    assert r.status_code == 422 and error_of(r)["field"] == "mounts"
    r = await alice.post(
        "/sessions", json={"name": "s", "image": IMAGE, "mounts": [{"folder": "data"}]}
    )
    assert r.status_code == 201, r.text


async def test_folder_in_use_cannot_be_deleted(manager: Harness) -> None:
    r = await manager.client.post("/folders", json={"name": "data"})
    assert r.status_code == 201
    await running(manager, "s", mounts=[{"folder": "data", "readonly": True}])
    r = await manager.client.delete("/folders/data")
    assert r.status_code == 409
    err = error_of(r)
    assert err["code"] == "conflict" and "s" in err["message"]
    await manager.client.delete("/sessions/s")
    r = await manager.client.delete("/folders/data")
    assert r.status_code == 204
    r = await manager.client.delete("/folders/data")
    assert r.status_code == 404 and error_of(r)["code"] == "not_found"


async def test_an_agent_failure_when_exec_starts_ends_the_stream_with_the_error(
    manager: Harness,
) -> None:
    # the answer has started (200) when the agent's exec is opened: its error is the last frame
    await running(manager, "e")
    manager.local.failures["exec"] = AgentFailed("engine gone", kernel="main1")
    r = await manager.client.post("/sessions/e/exec", json={"command": ["true"]})
    assert r.status_code == 200
    lines = r.content.splitlines()
    assert len(lines) == 1
    assert json.loads(lines[0]) == {
        "error": {
            "code": "agent_failed",
            "message": "engine gone",
            "field": None,
            "kernel": "main1",
        }
    }
    with pytest.raises(AgentFailed) as info:
        decode(lines[0])
    assert info.value.kernel == "main1" and info.value.message == "engine gone"


async def test_logs_of_a_vanished_container_end_with_the_reason(manager: Harness) -> None:
    s = await running(manager, "l", cluster_size=2)
    manager.local.containers.pop(s["kernels"][1]["container_id"])  # gone, no exit reported yet
    r = await manager.client.get("/sessions/l/logs", params={"container": "sub1"})
    assert r.status_code == 200
    assert r.text.splitlines()[-1].startswith("troupe: logs ended: container ")
    assert "not found" in r.text


async def test_logs_of_all_kernels_keep_the_kernels_that_answer(manager: Harness) -> None:
    s = await running(manager, "l", cluster_size=2)
    manager.local.containers.pop(s["kernels"][1]["container_id"])  # sub1 is gone
    r = await manager.client.get("/sessions/l/logs")
    assert r.status_code == 200
    lines = r.text.splitlines()
    assert "[main1] main1 started" in lines, lines
    assert lines[-1].startswith("troupe: logs ended:")
