from __future__ import annotations

from tests.inprocess.conftest import Harness


async def test_create_reaches_running(manager: Harness) -> None:
    s = await manager.create("a", cluster_size=3)
    assert s["status"] == "PENDING"
    assert [k["hostname"] for k in s["kernels"]] == ["main1", "sub1", "sub2"]
    s = await manager.wait("a")
    assert s["status"] == "RUNNING", s
    assert all(k["status"] == "RUNNING" for k in s["kernels"])
    assert set(s["timeline"]) >= {"PENDING", "SCHEDULED", "PREPARING", "RUNNING"}
    r = await manager.client.delete("/sessions/a")
    assert r.json()["status"] == "TERMINATED"
    assert manager.local.session_ids() == set()
