"""Concurrent requests: the database decides, exactly one wins, the others get a clean 409."""

from __future__ import annotations

import asyncio

import httpx

from tests.inprocess.conftest import IMAGE, Harness
from tests.inprocess.helpers import error_of


def one_winner(responses: list[httpx.Response]) -> httpx.Response:
    codes = sorted(r.status_code for r in responses)
    assert codes == [201] + [409] * (len(responses) - 1), [r.text for r in responses]
    for r in responses:
        if r.status_code == 409:
            err = error_of(r)
            assert err["code"] == "conflict" and err["field"] == "name", err
    return next(r for r in responses if r.status_code == 201)


async def test_concurrent_session_creates_with_one_name(manager: Harness) -> None:
    body = {"name": "dup", "image": IMAGE}
    responses = await asyncio.gather(
        *(manager.client.post("/sessions", json=body) for _ in range(5))
    )
    won = one_winner(list(responses))
    r = await manager.client.get("/sessions", params={"all": True})
    assert [s["id"] for s in r.json()] == [won.json()["id"]]
    s = await manager.wait("dup")
    assert s["status"] == "RUNNING"
    assert manager.local.session_ids() == {s["id"]}


async def test_concurrent_creates_while_the_image_check_is_slow(manager: Harness) -> None:
    # the image check is an agent call between the name check and the insert: all five
    # requests pass the name check before any of them writes
    manager.local.delays["has_image"] = 0.1
    body = {"name": "dup", "image": IMAGE, "cluster_size": 2}
    responses = await asyncio.gather(
        *(manager.client.post("/sessions", json=body) for _ in range(5))
    )
    one_winner(list(responses))
    r = await manager.client.get("/sessions", params={"all": True})
    assert len(r.json()) == 1


async def test_concurrent_folder_creates(manager: Harness) -> None:
    responses = await asyncio.gather(
        *(manager.client.post("/folders", json={"name": "data"}) for _ in range(5))
    )
    won = one_winner(list(responses))
    r = await manager.client.get("/folders")
    assert [f["id"] for f in r.json()] == [won.json()["id"]]
    assert (manager.config.folders_dir / won.json()["id"]).is_dir()


async def test_concurrent_user_creates(manager: Harness) -> None:
    responses = await asyncio.gather(
        *(manager.client.post("/users", json={"name": "carol"}) for _ in range(3))
    )
    won = one_winner(list(responses))
    r = await manager.client.get("/users")
    assert sorted(u["name"] for u in r.json()) == ["admin", "carol"]
    key = won.json()["api_key"]
    r = await manager.user_client(key).get("/users/me")
    assert r.json()["name"] == "carol"


async def test_many_sessions_at_once_all_run_on_distinct_subnets(manager: Harness) -> None:
    names = [f"s{i}" for i in range(6)]
    responses = await asyncio.gather(
        *(
            manager.client.post(
                "/sessions", json={"name": n, "image": IMAGE, "resources": {"cpu": 0.5}}
            )
            for n in names
        )
    )
    assert [r.status_code for r in responses] == [201] * 6
    done = await asyncio.gather(*(manager.wait(n) for n in names))
    assert [s["status"] for s in done] == ["RUNNING"] * 6, [s["status_info"] for s in done]
    assert len({s["subnet"] for s in done}) == 6
    assert len(manager.local.networks) == 6


async def test_destroy_racing_the_scheduler(manager: Harness) -> None:
    # create and destroy at once, many times: every session ends, nothing is left behind
    async def create_and_destroy(name: str) -> str:
        r = await manager.client.post("/sessions", json={"name": name, "image": IMAGE})
        assert r.status_code == 201, r.text
        await asyncio.sleep(0.01 * (int(name[1:]) % 4))
        r = await manager.client.delete(f"/sessions/{name}")
        assert r.status_code == 200, r.text
        return str(r.json()["status"])

    finals = await asyncio.gather(*(create_and_destroy(f"d{i}") for i in range(8)))
    assert set(finals) <= {"CANCELLED", "TERMINATED"}, finals
    assert manager.local.session_ids() == set()
    r = await manager.client.get("/sessions")
    assert r.json() == []
