"""The manager's tunnel, archive and ssh endpoints (issue 12) with a fake agent: checks before
anything runs (key, owner, kernel, port), the pipe protocol end to end, stream slots."""

from __future__ import annotations

import json

from tests.inprocess.asgi import AsgiWebSocket, key_of
from tests.inprocess.conftest import Harness, eventually
from tests.inprocess.helpers import running
from troupe.api.pipe import EOF_FRAME, RUNNER_DIR
from troupe.cluster import generate_ed25519


def send_text(ws: AsgiWebSocket, text: str) -> None:
    ws.inbox.put_nowait({"type": "websocket.receive", "text": text})


def out_bytes(ws: AsgiWebSocket) -> bytes:
    return b"".join(m.get("bytes") or b"" for m in ws.sent if m["type"] == "websocket.send")


async def test_tunnel_relays_bytes_half_closes_and_ends_with_the_exit_code(
    manager: Harness,
) -> None:
    await running(manager, "t")
    ws = AsgiWebSocket(manager, "/v1/sessions/t/tunnel", "port=8888", key=key_of(manager.client))
    await eventually(lambda: bool(manager.local.pipes))
    assert manager.local.pipes[0].command == ["/bin/sh", f"{RUNNER_DIR}/relay.sh", "8888"]
    ws.send_bytes(b"ping")
    send_text(ws, EOF_FRAME)
    assert await ws.close_code() == 1000
    assert out_bytes(ws) == b"ping"
    assert ws.texts()[-1] == {"exit_code": 0}


async def test_another_users_session_cannot_be_tunnelled_into(manager: Harness) -> None:
    await running(manager, "mine")
    r = await manager.client.post("/users", json={"name": "mallory"})
    assert r.status_code == 201, r.text
    mallory = r.json()["api_key"]
    for path in ("tunnel", "archive"):
        ws = AsgiWebSocket(manager, f"/v1/sessions/mine/{path}", "path=x", key=mallory)
        assert await ws.close_code() == 4404
        assert ws.texts()[0]["error"]["code"] == "not_found"
    r = await manager.user_client(mallory).get("/sessions/mine/ssh")
    assert r.status_code == 404
    assert not manager.local.pipes  # nothing ran in the kernel


async def test_refusals_before_anything_runs(manager: Harness) -> None:
    await running(manager, "r")
    key = key_of(manager.client)
    cases = [
        ("tunnel", "", None, 4401),  # no key
        ("tunnel", "port=70000", key, 4422),
        ("tunnel", "kernel=sub9", key, 4422),  # no such kernel in a session of one
        ("tunnel", "kernel=evil", key, 4422),
        ("archive", "op=put&path=/tmp", key, 4422),  # put needs the archive's name
        ("archive", "op=put&path=/tmp&name=..", key, 4422),
    ]
    for path, query, k, code in cases:
        ws = AsgiWebSocket(manager, f"/v1/sessions/r/{path}", query, key=k)
        assert await ws.close_code() == code, (path, query, ws.texts())
    assert not manager.local.pipes


async def test_ssh_key_goes_to_main1_only_and_ssh_info_pins_its_host_key(
    manager: Harness,
) -> None:
    pub = generate_ed25519(comment="me@laptop").public_openssh
    await running(manager, "k", cluster_size=2, ssh_key=pub)
    r = await manager.client.get("/sessions/k/ssh")
    assert r.status_code == 200, r.text
    info = r.json()
    assert info["user"] == "work" and info["user_key"] == pub
    assert info["host_key"].startswith("ssh-ed25519 ") and len(info["host_key"].split()) == 2
    files = {
        c.spec.hostname: {f.path: f.content for f in c.spec.files}
        for c in manager.local.containers.values()
    }
    assert pub in files["main1"]["/home/work/.ssh/authorized_keys"]
    assert pub not in files["sub1"]["/home/work/.ssh/authorized_keys"]
    assert files["main1"]["/job/hostfile"] == "main1 slots=1\nsub1 slots=1\n"
    r = await manager.client.post(
        "/sessions", json={"name": "bad", "image": "troupe/base:0.1.0", "ssh_key": "nope"}
    )
    assert r.status_code == 422 and "ssh_key" in json.dumps(r.json())
