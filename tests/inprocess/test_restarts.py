"""Whole-session restarts and success rules (docs/policies.md) with the fake agent: which
exit restarts the session, which ends it, what the session shows, what survives a manager
restart in the middle of a restart."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.inprocess.conftest import Harness, eventually
from tests.inprocess.helpers import error_of, running
from troupe.api.agent import KernelExit


def spec_of(h: Harness, sid: str, host: str) -> Any:
    return h.local.container(sid, host).spec


def _kernel_conf(spec: Any) -> str:
    return next(f.content for f in spec.files if f.path.endswith("/kernel.conf"))


async def restarted(h: Harness, name: str, count: int) -> dict[str, Any]:
    """The session once it is RUNNING again after its ``count``-th restart."""
    for _ in range(250):
        s = await h.get(name)
        if s["status"] == "RUNNING" and s["restarts"] == count:
            return s
        assert s["status"] not in ("ERROR", "TERMINATED"), s
        await asyncio.sleep(0.02)
    raise AssertionError(s)


async def test_a_failure_restarts_the_whole_session_in_place(manager: Harness) -> None:
    s = await running(
        manager, "job", type="batch", startup_command="train", cluster_size=3, max_restarts=2
    )
    sid = s["id"]
    assert (s["restarts"], s["max_restarts"], s["restart_history"]) == (0, 2, [])
    assert spec_of(manager, sid, "sub1").env["TROUPE_RESTART_COUNT"] == "0"
    before = {k["hostname"]: k for k in s["kernels"]}
    names = {c.spec.container_name for c in manager.local.containers.values()}
    before_started = s["started_at"]
    await manager.local.exit_kernel(sid, "sub1", 137)
    s = await restarted(manager, "job", 1)
    # every kernel again: same names, hostnames, addresses, network; the new attempt's count
    assert {c.spec.container_name for c in manager.local.containers.values()} == names
    for k in s["kernels"]:
        assert k["status"] == "RUNNING" and k["exit_code"] is None
        spec = spec_of(manager, sid, k["hostname"])
        assert spec.env["TROUPE_RESTART_COUNT"] == "1"
        assert spec.ip == before[k["hostname"]]["ip"]
        assert spec.network == s["network"]
        # the same container, started again (not removed and made anew)
        assert k["container_id"] == before[k["hostname"]]["container_id"]
        assert "export TROUPE_RESTART_COUNT=1" in _kernel_conf(spec)
    assert manager.local.calls.count("create_network") == 1
    assert manager.local.calls.count("remove_kernels") == 0
    assert manager.local.calls.count("restart_kernels") == 1
    assert manager.local.calls.count("signal_go") == 2  # the batch command started again
    assert s["started_at"] == before_started  # the first start (the timeline has the latest)
    assert s["timeline"]["RUNNING"] > s["timeline"]["RESTARTING"]
    [r] = s["restart_history"]
    assert (r["attempt"], r["kernel"], r["exit_code"], r["reason"]) == (
        0,
        "sub1",
        137,
        "kernel exited",
    )
    assert r["last_logs"] == ["sub1 says goodbye"] and r["at"]
    # then main1 succeeds: TERMINATED, exit 0, one restart
    await manager.local.exit_kernel(sid, "main1", 0)
    s = await manager.wait("job", until="final")
    assert (s["status"], s["exit_code"], s["restarts"]) == ("TERMINATED", 0, 1), s


async def test_logs_of_every_attempt_are_kept_and_labelled(manager: Harness) -> None:
    s = await running(
        manager, "logs", type="batch", startup_command="x", cluster_size=2, max_restarts=1
    )
    await manager.local.exit_kernel(s["id"], "main1", 3)
    await restarted(manager, "logs", 1)
    await manager.local.exit_kernel(s["id"], "main1", 0)
    await manager.wait("logs", until="final")
    r = await manager.client.get("/sessions/logs/logs")
    assert r.status_code == 200, r.text
    lines = r.text.splitlines()
    assert any(line.startswith("[main1#0] main1 started") for line in lines), lines
    assert any(line.startswith("[main1#1] main1 started") for line in lines), lines
    assert any(line.startswith("[sub1#0]") for line in lines), lines
    r = await manager.client.get("/sessions/logs/logs", params={"container": "sub1"})
    assert [x.split("]")[0] for x in r.text.splitlines()] == ["[sub1#0", "[sub1#1"], r.text


async def test_failure_after_the_last_restart_ends_with_the_count(manager: Harness) -> None:
    s = await running(manager, "flaky", cluster_size=2, max_restarts=1)
    await manager.local.exit_kernel(s["id"], "sub1", 1)
    await restarted(manager, "flaky", 1)
    await manager.local.exit_kernel(s["id"], "sub1", 1)
    s = await manager.wait("flaky", until="final")
    assert s["status"] == "ERROR", s
    assert (s["status_info"]["reason"], s["status_info"]["kernel"]) == ("kernel exited", "sub1")
    assert s["status_info"]["restarts"] == 1 and s["restarts"] == 1
    assert manager.local.session_ids() == set()


async def test_no_restarts_fails_fast_as_before(manager: Harness) -> None:
    s = await running(manager, "fast", cluster_size=2)
    await manager.local.exit_kernel(s["id"], "sub1", 1)
    s = await manager.wait("fast", until="final")
    assert s["status"] == "ERROR" and "restarts" not in s["status_info"]
    assert s["restarts"] == 0 and s["restart_history"] == []


async def test_a_no_restart_exit_code_ends_the_session_at_once(manager: Harness) -> None:
    s = await running(
        manager,
        "stop",
        type="batch",
        startup_command="x",
        cluster_size=2,
        max_restarts=3,
        no_restart_exit_codes=[2, 1],
    )
    assert s["no_restart_exit_codes"] == [1, 2]
    await manager.local.exit_kernel(s["id"], "main1", 2)
    s = await manager.wait("stop", until="final")
    assert (s["status"], s["exit_code"], s["restarts"]) == ("ERROR", 2, 0), s
    assert s["status_info"]["reason"] == "exit code 2 ends the session (no_restart_exit_codes)"
    assert s["status_info"]["kernel"] == "main1"


async def test_success_all_runs_the_command_everywhere(manager: Harness) -> None:
    s = await running(
        manager, "all", type="batch", startup_command="work", cluster_size=3, success_policy="all"
    )
    assert s["success_policy"] == "all"
    sid = s["id"]
    await eventually(lambda: manager.local.calls.count("signal_go") == 3)
    assert all(spec_of(manager, sid, h).command[-1] == "work" for h in ("main1", "sub1", "sub2"))
    await manager.local.exit_kernel(sid, "main1", 0)
    await manager.local.exit_kernel(sid, "sub2", 0)
    assert (await manager.get("all"))["status"] == "RUNNING"
    await manager.local.exit_kernel(sid, "sub1", 0)
    s = await manager.wait("all", until="final")
    assert (s["status"], s["exit_code"]) == ("TERMINATED", 0), s


async def test_success_all_fails_naming_the_kernel(manager: Harness) -> None:
    s = await running(
        manager, "one", type="batch", startup_command="work", cluster_size=3, success_policy="all"
    )
    await manager.local.exit_kernel(s["id"], "main1", 0)
    await manager.local.exit_kernel(s["id"], "sub2", 1)
    s = await manager.wait("one", until="final")
    assert (s["status"], s["exit_code"]) == ("ERROR", 1), s
    assert s["status_info"]["kernel"] == "sub2"


async def test_a_restart_that_fails_ends_the_session_with_the_reason(manager: Harness) -> None:
    from troupe.api.errors import AgentFailed

    s = await running(manager, "broken", cluster_size=2, max_restarts=1)
    manager.local.failures["restart_kernel:sub1"] = AgentFailed("no space", kernel="sub1")
    await manager.local.exit_kernel(s["id"], "main1", 1)
    s = await manager.wait("broken", until="final")
    assert s["status"] == "ERROR", s
    assert s["status_info"]["reason"] == "restart failed: failed while starting the kernels again"
    assert s["status_info"]["kernel"] == "sub1"
    assert manager.local.session_ids() == set() and not manager.local.networks


async def test_destroy_during_a_restart(manager: Harness) -> None:
    s = await running(manager, "gone", cluster_size=2, max_restarts=1)
    manager.local.ready_gate.clear()
    await manager.local.exit_kernel(s["id"], "main1", 1)
    await manager.wait_status("gone", "RESTARTING")
    r = await manager.client.delete("/sessions/gone")
    assert r.status_code == 200, r.text
    s = await manager.wait("gone", until="final")
    assert s["status"] == "TERMINATED"
    assert all(k["status"] == "TERMINATED" for k in s["kernels"])
    assert manager.local.session_ids() == set() and not manager.local.networks


async def test_manager_restart_in_the_middle_of_a_restart(manager: Harness) -> None:
    s = await running(manager, "mid", cluster_size=3, max_restarts=2)
    manager.local.ready_gate.clear()
    await manager.local.exit_kernel(s["id"], "sub2", 1)
    await manager.wait_status("mid", "RESTARTING")
    await eventually(lambda: len(manager.local.session_ids()) == 1)
    await manager.restart()
    manager.local.ready_gate.set()
    s = await manager.wait("mid", until="final")
    assert s["status"] == "ERROR", s
    assert s["status_info"] == {
        "reason": "manager restarted while the session was restarting",
        "restarts": 1,
    }
    assert manager.local.session_ids() == set() and not manager.local.networks


async def test_bad_rules_are_refused_naming_the_field(manager: Harness) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"max_restarts": -1}, "max_restarts"),
        ({"max_restarts": 1000}, "max_restarts"),
        ({"no_restart_exit_codes": [256]}, "no_restart_exit_codes"),
        ({"no_restart_exit_codes": [-1]}, "no_restart_exit_codes"),
        ({"success_policy": "some"}, "success_policy"),
        ({"success_policy": "all"}, "success_policy"),  # interactive: no success rule
    ]
    for body, field in cases:
        r = await manager.client.post(
            "/sessions", json={"name": "bad", "image": "troupe/base:0.1.0", **body}
        )
        assert r.status_code == 422, (body, r.text)
        assert error_of(r)["field"] == field, (body, r.text)
    r = await manager.client.get("/sessions", params={"all": "true"})
    assert r.json()["items"] == [] if "items" in r.json() else r.json() == []


async def test_the_session_page_shows_the_restarts(manager: Harness) -> None:
    from tests.inprocess.helpers import signed_in

    s = await running(manager, "page", cluster_size=2, max_restarts=2)
    await manager.local.exit_kernel(s["id"], "sub1", 7)
    await restarted(manager, "page", 1)
    c = await signed_in(manager)
    r = await c.get(f"/sessions/{s['id']}")
    assert r.status_code == 200
    section = r.text.split('id="restarts"', 1)[1].split("</section>", 1)[0]
    for text in ("Restarts", "1 of at most 2", "sub1", "exit code 7", "sub1 says goodbye"):
        assert text in section, section


async def test_exits_of_the_failed_attempt_do_not_fail_the_restart(manager: Harness) -> None:
    """Other kernels often fall with the first (a peer of a collective is gone): their exits,
    reported while the failed attempt is being started again, are not failures of the restart."""
    s = await running(manager, "fall", cluster_size=3, max_restarts=1)
    manager.local.delays["restart_kernels"] = 0.5
    await manager.local.exit_kernel(s["id"], "sub1", 137)
    await manager.wait_status("fall", "RESTARTING")
    await eventually(lambda: "restart_kernels" in manager.local.calls)
    await manager.local.exit_kernel(s["id"], "main1", 1)
    await manager.local.exit_kernel(s["id"], "sub2", 1)
    del manager.local.delays["restart_kernels"]
    s = await restarted(manager, "fall", 1)
    assert [r["kernel"] for r in s["restart_history"]] == ["sub1"]


async def test_each_restart_is_in_the_event_list(manager: Harness) -> None:
    s = await running(manager, "ev", cluster_size=2, max_restarts=2)
    await manager.local.exit_kernel(s["id"], "sub1", 3)
    await restarted(manager, "ev", 1)
    r = await manager.client.get("/sessions/ev/events")
    assert r.status_code == 200, r.text
    evs = r.json()
    [restart] = [e for e in evs if e["kind"] == "restart"]
    assert restart["actor"] == "policy max_restarts" and restart["kernel"] == "sub1"
    assert restart["message"] == "restart 1 of 2: sub1 exited with code 3"
    moves = [(e["status"], e["actor"]) for e in evs if e["kind"] == "status"]
    assert moves[-2:] == [
        ("RESTARTING", "policy max_restarts"),
        ("RUNNING", "policy max_restarts"),
    ], moves
    by_status = {e["status"]: e for e in evs if e["kind"] == "status"}
    assert by_status["RESTARTING"]["message"].startswith("restarting: sub1 exited with 3")
    assert by_status["RUNNING"]["message"] == "every kernel is ready (attempt 1)"
    # the order: the exit, the restart, then the status change
    kinds = [e["kind"] for e in evs]
    assert kinds.index("kernel-exit") < kinds.index("restart")


async def test_a_gone_container_is_made_anew_the_others_started_again(manager: Harness) -> None:
    s = await running(manager, "gone2", cluster_size=3, max_restarts=1)
    ids = {k["hostname"]: k["container_id"] for k in s["kernels"]}
    c = manager.local.containers.pop(ids["sub1"])  # removed behind troupe's back
    assert manager.local.on_exit is not None
    await manager.local.on_exit(
        KernelExit(session_id=s["id"], kernel_id=c.spec.kernel_id, exit_code=-1)
    )
    s = await restarted(manager, "gone2", 1)
    now = {k["hostname"]: k["container_id"] for k in s["kernels"]}
    assert now["sub1"] != ids["sub1"]
    assert (now["main1"], now["sub2"]) == (ids["main1"], ids["sub2"])
    assert spec_of(manager, s["id"], "sub1").env["TROUPE_RESTART_COUNT"] == "1"
