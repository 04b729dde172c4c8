"""Saved logs stay within a total budget, oldest sessions' deleted first, and new sessions are
refused while the data disk is nearly full (finding N9, docs/reliability.md)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.inprocess.conftest import IMAGE, MakeManager
from tests.inprocess.helpers import error_of, running
from troupe.manager import disk
from troupe.manager.kernel_io import EVICTED
from troupe.manager.logs import LogStore

KIB = 1024


def test_the_oldest_sessions_logs_go_first_and_the_newest_last(tmp_path: Path) -> None:
    store = LogStore(tmp_path / "logs", total=250 * KIB)
    for sid in ("s1", "s2", "s3"):
        store.save(sid, {"main1": "a" * 60 * KIB + "\n", "sub1": "b" * 40 * KIB + "\n"})
    assert not store.evicted("s2") and store.has("s2", "main1") and store.has("s3", "sub1")
    assert store.evicted("s1") and not store.has("s1", "main1")
    assert store.used() <= 250 * KIB
    # the one just saved goes too if it alone is over the budget
    store.save("huge", {"main1": "c" * 300 * KIB + "\n"})
    assert all(store.evicted(s) for s in ("s2", "s3", "huge")) and store.used() == 0
    store.remove("huge")  # retention forgets the session: its marker goes too
    assert not store.evicted("huge")


def test_a_lower_budget_after_a_restart_trims_by_age(tmp_path: Path) -> None:
    store = LogStore(tmp_path, total=0)  # no cap
    for age, sid in enumerate(["new", "mid", "old"]):
        store.save(sid, {"main1": "x" * 100 * KIB + "\n"})
        t = 1_700_000_000 - age * 3600
        os.utime(tmp_path / sid, (t, t))
    again = LogStore(tmp_path, total=150 * KIB)  # a new manager process, a lower budget
    assert again.trim() == ["old", "mid"]
    assert again.has("new", "main1") and again.evicted("old") and again.evicted("mid")


async def test_a_session_whose_saved_logs_were_evicted_says_so(make_manager: MakeManager) -> None:
    manager = await make_manager(saved_logs_total=250 * KIB)
    for name in ("s1", "s2", "s3"):
        s = await running(manager, name)
        for c in manager.local.containers.values():
            if c.spec.session_id == s["id"]:
                c.logs[:] = [f"2026-11-27T10:00:00Z {name} " + "y" * 100 * KIB + "\n"]
        await manager.client.delete(f"/sessions/{name}")
        await manager.wait(name, until="final")
    r = await manager.client.get("/sessions/s1/logs")
    assert r.status_code == 200 and r.text == "[main1] " + EVICTED, r.text[:200]
    for name in ("s2", "s3"):
        r = await manager.client.get(f"/sessions/{name}/logs", params={"container": "main1"})
        assert r.text.startswith(f"{name} yyy"), r.text[:100]
    logs = Path(manager.config.logs_dir)
    used = await asyncio.to_thread(lambda: sum(f.stat().st_size for f in logs.rglob("*.log")))
    assert 200 * KIB < used <= 250 * KIB


async def test_new_sessions_are_refused_while_the_data_disk_is_nearly_full(
    make_manager: MakeManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = await make_manager(min_free_disk=64 * 1024**2)
    free = {"bytes": 5 * 1024**2}
    monkeypatch.setattr(disk, "free_bytes", lambda path: free["bytes"])
    r = await manager.client.post("/sessions", json={"name": "full", "image": IMAGE})
    assert r.status_code == 507, r.text
    err = error_of(r)
    assert err["code"] == "insufficient_storage"
    assert str(manager.config.data_dir) in err["message"] and "5242880" in err["message"]
    assert (await manager.client.get("/sessions")).json() == []  # nothing was stored
    free["bytes"] = 65 * 1024**2
    await running(manager, "full")
