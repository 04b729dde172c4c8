"""Apps in main1 (docs/apps.md) with a fake agent: the list, opening (start on demand, reuse,
start again after a death, one start for concurrent opens), any port, and every refusal
(unknown app, bad port, failed start with its log lines, session not running, another user's
session) before anything is started."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest

from tests.inprocess.conftest import IMAGE, Harness, eventually
from tests.inprocess.helpers import error_of, preparing, running
from tests.inprocess.test_sdk_errors import Bridge
from troupe.api import errors as E
from troupe.api.pipe import RUNNER_DIR
from troupe.manager.apps.links import app_origin
from troupe.manager.apps.state import APPS_DIR

LABELS = {
    "ai.backend.service-ports": "jupyter:http:8888,tensorboard:http:6006,ssh2:tcp:2201",
    "troupe.app.jupyter.command": "jupyter lab --port=8888",
    "troupe.app.tensorboard.command": "tensorboard --port 6006",
}


async def user(h: Harness, name: str) -> httpx.AsyncClient:
    r = await h.client.post("/users", json={"name": name})
    assert r.status_code == 201, r.text
    return h.user_client(r.json()["api_key"])


async def alice_session(h: Harness, name: str = "s", labels: dict[str, str] | None = None) -> Any:
    """Session ``name`` of user alice (not an admin), RUNNING, its image labelled."""
    h.local.labels[IMAGE] = LABELS if labels is None else labels
    alice = await user(h, "alice")
    r = await alice.post("/sessions", json={"name": name, "image": IMAGE})
    assert r.status_code == 201, r.text
    await h.wait(r.json()["id"])
    return alice


def app_execs(h: Harness) -> list[list[str]]:
    return h.local.apps.commands


async def test_list_shows_the_declared_apps_and_their_origins(manager: Harness) -> None:
    alice = await alice_session(manager)
    r = await alice.get("/sessions/s/apps")
    assert r.status_code == 200, r.text
    sid = (await alice.get("/sessions/s")).json()["id"]
    apps = r.json()
    assert [(a["name"], a["port"], a["state"]) for a in apps] == [
        ("jupyter", 8888, "stopped"),
        ("tensorboard", 6006, "stopped"),
        ("ssh2", 2201, "stopped"),
    ]
    assert manager.app is not None
    assert apps[0]["url"] == app_origin(manager.app.state, sid, 8888)
    assert apps[0]["url"].startswith(f"http://8888-{sid}.apps.localhost")
    assert "t=" not in apps[0]["url"]  # a list never hands out a link
    # one exec in main1, as work, through the runner's app.sh
    assert app_execs(manager) == [
        ["status", APPS_DIR, "jupyter:8888", "tensorboard:6006", "ssh2:2201"]
    ]


async def test_an_image_without_the_label_has_no_apps(manager: Harness) -> None:
    alice = await alice_session(manager, labels={})
    r = await alice.get("/sessions/s/apps")
    assert r.status_code == 200 and r.json() == []
    assert app_execs(manager) == []  # nothing to ask main1


async def test_open_starts_once_then_reuses(manager: Harness, caplog: Any) -> None:
    alice = await alice_session(manager)
    sid = (await alice.get("/sessions/s")).json()["id"]
    with caplog.at_level(logging.INFO, logger="troupe.manager.routes.apps"):
        r = await alice.post("/sessions/s/apps/jupyter")
    assert r.status_code == 200, r.text
    a = r.json()
    assert (a["name"], a["port"], a["state"]) == ("jupyter", 8888, "running")
    assert manager.app is not None
    origin = app_origin(manager.app.state, sid, 8888)
    assert a["url"].startswith(f"{origin}/_troupe/enter?t=")
    start = app_execs(manager)[-1]
    assert start == ["start", APPS_DIR, "jupyter", "8888", "60", "jupyter lab --port=8888"]
    assert "app open: session s" in caplog.text and "'jupyter'" in caplog.text
    # again, and by its port number: the running app is reused
    assert (await alice.post("/sessions/s/apps/jupyter")).status_code == 200
    r = await alice.post("/sessions/s/apps/8888")
    assert r.status_code == 200 and r.json()["name"] == "jupyter"
    assert manager.local.apps.started == ["jupyter"]
    states = {a["name"]: a["state"] for a in (await alice.get("/sessions/s/apps")).json()}
    assert states == {"jupyter": "running", "tensorboard": "stopped", "ssh2": "stopped"}


async def test_the_app_runs_through_the_exec_path_as_work(manager: Harness) -> None:
    alice = await alice_session(manager)
    seen: list[tuple[list[str], str]] = []
    real = manager.local.exec_stream

    def spy(container_id: str, command: list[str], user: str = "work") -> Any:
        seen.append((command, user))
        return real(container_id, command, user)

    manager.local.exec_stream = spy  # type: ignore[method-assign]
    assert (await alice.post("/sessions/s/apps/jupyter")).status_code == 200
    command, who = seen[-1]
    assert command[:2] == ["/bin/sh", f"{RUNNER_DIR}/app.sh"] and who == "work"


async def test_a_dead_app_is_started_again(manager: Harness) -> None:
    alice = await alice_session(manager)
    assert (await alice.post("/sessions/s/apps/tensorboard")).status_code == 200
    # it dies
    manager.local.apps.serving.discard(6006)
    manager.local.apps.ended["tensorboard"] = "exit:137"
    listed = {a["name"]: a for a in (await alice.get("/sessions/s/apps")).json()}
    assert listed["tensorboard"]["state"] == "failed"
    r = await alice.post("/sessions/s/apps/tensorboard")
    assert r.status_code == 200 and r.json()["state"] == "running"
    assert manager.local.apps.started == ["tensorboard", "tensorboard"]


async def test_concurrent_opens_start_the_app_once(manager: Harness) -> None:
    alice = await alice_session(manager)
    gate = manager.local.apps.start_gate = asyncio.Event()
    opens = [asyncio.create_task(alice.post("/sessions/s/apps/jupyter")) for _ in range(5)]
    await eventually(lambda: manager.local.apps.started == ["jupyter"])
    await asyncio.sleep(0.05)
    gate.set()
    answers = await asyncio.gather(*opens)
    assert [r.status_code for r in answers] == [200] * 5
    assert manager.local.apps.started == ["jupyter"]


async def test_an_app_that_fails_shows_its_log_lines(manager: Harness) -> None:
    alice = await alice_session(manager)
    manager.local.apps.behaviour["jupyter"] = "exit"
    r = await alice.post("/sessions/s/apps/jupyter")
    assert r.status_code == 422, r.text
    err = error_of(r)
    assert err["field"] == "app"
    assert "exited with code 1" in err["message"]
    assert "jupyter: cannot start" in err["message"]
    assert f"{APPS_DIR}/jupyter.log" in err["message"]
    listed = (await alice.get("/sessions/s/apps")).json()[0]
    assert listed["state"] == "failed"
    assert "jupyter: cannot start" in listed["log_tail"]


async def test_an_app_that_never_answers_is_stopped(manager: Harness) -> None:
    alice = await alice_session(manager)
    manager.local.apps.behaviour["tensorboard"] = "hang"
    r = await alice.post("/sessions/s/apps/tensorboard")
    assert r.status_code == 422, r.text
    assert "did not answer on port 6006 in time and was stopped" in error_of(r)["message"]
    assert 6006 not in manager.local.apps.serving


async def test_any_port_opens_when_something_answers(manager: Harness) -> None:
    alice = await alice_session(manager)
    r = await alice.post("/sessions/s/apps/9000")
    assert r.status_code == 409, r.text
    message = error_of(r)["message"]
    assert "nothing answers on port 9000 in main1" in message
    assert "troupe starts only the apps the image declares" in message
    manager.local.apps.serving.add(9000)  # the user started a server
    r = await alice.post("/sessions/s/apps/9000")
    assert r.status_code == 200, r.text
    assert (r.json()["name"], r.json()["port"], r.json()["state"]) == ("9000", 9000, "running")
    assert manager.local.apps.started == []  # troupe starts no undeclared port
    assert all(c[0] == "status" for c in app_execs(manager))


async def test_any_port_of_an_image_without_apps(manager: Harness) -> None:
    alice = await alice_session(manager, labels={})
    manager.local.apps.serving.add(65535)
    r = await alice.post("/sessions/s/apps/65535")
    assert r.status_code == 200 and r.json()["state"] == "running"


@pytest.mark.parametrize("app", ["0", "65536", "-1", "99999999999", "+0"])
async def test_a_port_outside_the_range_is_refused(manager: Harness, app: str) -> None:
    alice = await alice_session(manager)
    r = await alice.post(f"/sessions/s/apps/{app}")
    assert r.status_code == 422, r.text
    err = error_of(r)
    assert err["field"] == "app" and "1-65535" in err["message"]
    assert app_execs(manager) == []


async def test_an_unknown_app_is_not_found_and_names_the_apps(manager: Harness) -> None:
    alice = await alice_session(manager)
    r = await alice.post("/sessions/s/apps/vscode")
    assert r.status_code == 404, r.text
    message = error_of(r)["message"]
    assert "no app 'vscode'" in message and "jupyter, tensorboard, ssh2" in message
    assert "port number" in message
    r = await alice.post("/sessions/s/apps/" + "x" * 256)
    assert r.status_code == 422  # too long to be a name
    assert app_execs(manager) == []


async def test_an_app_of_another_protocol_is_refused(manager: Harness) -> None:
    alice = await alice_session(manager)
    r = await alice.post("/sessions/s/apps/ssh2")
    assert r.status_code == 422, r.text
    assert "speaks tcp: only http apps" in error_of(r)["message"]
    assert app_execs(manager) == []


async def test_a_declared_app_without_a_command_opens_only_if_it_answers(
    manager: Harness,
) -> None:
    labels = {"ai.backend.service-ports": "web:http:8080"}
    alice = await alice_session(manager, labels=labels)
    r = await alice.post("/sessions/s/apps/web")
    assert r.status_code == 409, r.text
    assert "troupe.app.web.command" in error_of(r)["message"]
    manager.local.apps.serving.add(8080)
    assert (await alice.post("/sessions/s/apps/web")).status_code == 200


async def test_malformed_labels_are_a_clear_error(manager: Harness) -> None:
    alice = await alice_session(manager, labels={"ai.backend.service-ports": "jupyter:http"})
    for r in (await alice.get("/sessions/s/apps"), await alice.post("/sessions/s/apps/jupyter")):
        assert r.status_code == 422, r.text
        assert "declares its apps wrongly" in error_of(r)["message"]
    assert app_execs(manager) == []


async def test_a_session_that_is_not_running(manager: Harness) -> None:
    manager.local.labels[IMAGE] = LABELS
    await preparing(manager, "p")
    for r in (
        await manager.client.get("/sessions/p/apps"),
        await manager.client.post("/sessions/p/apps/jupyter"),
    ):
        assert r.status_code == 409, r.text
        assert error_of(r)["code"] == "not_running"
    manager.local.ready_gate.set()
    await manager.wait("p")
    r = await manager.client.delete("/sessions/p")
    assert r.status_code == 200
    await manager.wait_status("p", "TERMINATED")
    r = await manager.client.post("/sessions/p/apps/jupyter")
    assert r.status_code == 409, r.text
    assert app_execs(manager) == []


async def test_another_users_session_and_admins(manager: Harness) -> None:
    await alice_session(manager)
    mallory = await user(manager, "mallory")
    for r in (await mallory.get("/sessions/s/apps"), await mallory.post("/sessions/s/apps/8888")):
        assert r.status_code == 404, r.text
        assert error_of(r)["code"] == "not_found"
    assert app_execs(manager) == []
    # an admin sees the apps of any session, but only the owner opens them
    assert (await manager.client.get("/sessions/s/apps")).status_code == 200
    r = await manager.client.post("/sessions/s/apps/jupyter")
    assert r.status_code == 403, r.text
    assert "owner" in error_of(r)["message"]
    assert manager.local.apps.started == []


async def test_a_runner_without_app_sh_is_a_502(manager: Harness) -> None:
    alice = await alice_session(manager)
    real = manager.local.apps.run

    async def old_runner(args: list[str]) -> tuple[int, str]:
        return 2, "/bin/sh: 0: cannot open /opt/troupe/app.sh: No such file\n"

    manager.local.apps.run = old_runner  # type: ignore[method-assign]
    r = await alice.post("/sessions/s/apps/jupyter")
    assert r.status_code == 502, r.text
    assert "cannot open /opt/troupe/app.sh" in error_of(r)["message"]
    manager.local.apps.run = real  # type: ignore[method-assign]


async def test_sdk_list_and_open(manager: Harness) -> None:
    manager.local.labels[IMAGE] = LABELS
    await running(manager, "k")
    bridge = Bridge(manager, asyncio.get_running_loop())
    key = str(manager.client.headers["authorization"]).removeprefix("Bearer ")
    sdk = bridge.sdk(key)

    def calls() -> tuple[Any, ...]:
        listed = sdk.list_apps("k")
        opened = sdk.open_app("k", "jupyter")
        with pytest.raises(E.Invalid) as bad:
            sdk.open_app("k", 70000)
        with pytest.raises(E.NotFound) as unknown:
            sdk.open_app("k", "a?b")  # escaped: one path segment
        return listed, opened, bad.value, unknown.value

    listed, opened, bad, unknown = await asyncio.to_thread(calls)
    await bridge.client.aclose()
    assert [a.name for a in listed] == ["jupyter", "tensorboard", "ssh2"]
    assert opened.state == "running" and opened.url and "_troupe/enter" in opened.url
    assert bad.status == 422 and "1-65535" in bad.message
    assert "no app 'a?b'" in unknown.message
