"""Session references (``{ref}`` in ``/v1/sessions/{ref}...`` and the web pages): a session's
exact id always means that session, whatever another session is called (finding N3, see
docs/reliability.md), and a reference that can be neither a name nor an id is refused before
any look-up (finding N4, the server's half)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import update

from tests.inprocess.asgi import AsgiWebSocket, key_of
from tests.inprocess.conftest import Harness
from tests.inprocess.helpers import error_of, running, signed_in
from tests.inprocess.test_hardening_users import create, new_user
from troupe.manager.store.models import Session


def spy(h: Harness, method: str) -> list[str]:
    """Records the container id each call of the local fake agent's ``method`` is for."""
    seen: list[str] = []
    real = getattr(h.local, method)

    def recording(container_id: str, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        seen.append(container_id)
        return real(container_id, *args, **kwargs)  # type: ignore[no-any-return]

    setattr(h.local, method, recording)
    return seen


def sessions_of(h: Harness, container_ids: list[str]) -> list[str]:
    return [h.local.containers[c].spec.session_id for c in container_ids]


async def test_an_exact_id_means_that_session_whatever_another_is_named(
    manager: Harness,
) -> None:
    carol, _ = await new_user(manager, "carol")
    bob, _ = await new_user(manager, "bob")
    c1 = (await create(carol, "c1")).json()["id"]
    assert (await manager.wait(c1))["status"] == "RUNNING"
    # a name with an id's shape is refused when the session is created
    for name in (c1, c1.upper()):
        r = await create(bob, name)
        assert r.status_code == 422 and error_of(r)["field"] == "name", r.text
    # the impostor: bob's session named after carol's id (as one stored before that rule)
    imp = (await create(bob, "imp")).json()["id"]
    assert (await manager.wait(imp))["status"] == "RUNNING"
    assert manager.app is not None
    async with manager.app.state.db() as db:
        await db.execute(update(Session).where(Session.id == imp).values(name=c1))
        await db.commit()
    # bob does not see carol's session: to him the reference is his own session's name
    r = await bob.get(f"/sessions/{c1}")
    assert r.status_code == 200 and r.json()["id"] == imp
    # the admin's look-up, exec, terminal, web page and destroy all reach carol's session
    s = await manager.get(c1)
    assert s["id"] == c1 and s["owner"] == "carol" and s["name"] == "c1"
    execs = spy(manager, "exec_stream")
    r = await manager.client.post(f"/sessions/{c1}/exec", json={"command": ["true"]})
    assert r.status_code == 200 and json.loads(r.text.splitlines()[-1]) == {"exit_code": 0}
    assert sessions_of(manager, execs) == [c1]
    shells = spy(manager, "shell")
    ws = AsgiWebSocket(manager, f"/v1/sessions/{c1}/shell", key=key_of(manager.client))
    ws.send_bytes(b"exit\n")
    assert await ws.close_code() == 1000
    assert sessions_of(manager, shells) == [c1]
    page = await (await signed_in(manager)).get(f"/sessions/{c1}")
    assert page.status_code == 200 and "troupe session shell c1" in page.text
    assert f"troupe session shell {c1}" not in page.text  # not the impostor's page
    r = await manager.client.delete(f"/sessions/{c1}")
    assert r.status_code == 200 and r.json()["id"] == c1
    assert (await manager.wait(c1, until="final"))["status"] == "TERMINATED"
    assert (await manager.get(imp))["status"] == "RUNNING"  # the impostor is left alone
    await carol.aclose()
    await bob.aclose()


#: References as they go into a URL path (percent-encoded so they reach the route) and what
#: the route receives: a path, a query, a NUL, a space, overlong, not starting with a letter.
BAD_REFS = {
    "%2E%2E": "..",
    "m%3Fx%3D1": "m?x=1",
    "m%00": "m\0",
    "%20": " ",
    "a" * 64: "a" * 64,
    "-m": "-m",
    ".hidden": ".hidden",
}


async def test_references_that_are_no_name_or_id_are_refused(manager: Harness) -> None:
    await running(manager, "m")
    calls = [
        ("GET", ""),
        ("GET", "/wait"),
        ("GET", "/logs"),
        ("GET", "/ssh"),
        ("POST", "/exec"),
        ("DELETE", ""),
    ]
    for encoded, ref in BAD_REFS.items():
        for method, tail in calls:
            body = {"command": ["true"]} if tail == "/exec" else None
            r = await manager.client.request(method, f"/sessions/{encoded}{tail}", json=body)
            assert r.status_code == 422, (ref, method, tail, r.text)
            err = error_of(r)
            assert err["code"] == "invalid" and err["field"] == "ref", err
        for tail, query in (("shell", ""), ("tunnel", ""), ("archive", "path=x")):
            path = f"/v1/sessions/{ref}/{tail}"  # the path as the route receives it
            ws = AsgiWebSocket(manager, path, query, key=key_of(manager.client))
            assert await ws.close_code() == 4422, (ref, tail)
            assert ws.texts()[0]["error"]["field"] == "ref"
    # "../x" names a path of two segments: it reaches no session route (and no other)
    r = await manager.client.post("/folders", json={"name": "tmpf"})
    assert r.status_code == 201, r.text
    r = await manager.client.delete("/sessions/..%2Ffolders%2Ftmpf")
    assert r.status_code in (404, 405), r.text
    assert [f["name"] for f in (await manager.client.get("/folders")).json()] == ["tmpf"]
    # "../logs": the route of a session's logs, with ".." as the reference
    r = await manager.client.get("/sessions/..%2Flogs")
    assert r.status_code == 422 and error_of(r)["field"] == "ref", r.text
    # an empty reference reaches no session route either
    r = await manager.client.post("/sessions//exec", json={"command": ["true"]})
    assert r.status_code == 404, r.text
    # the web pages refuse them too (a page, not JSON)
    c = await signed_in(manager)
    r = await c.get("/sessions/m%3Fx%3D1")
    assert r.status_code == 422 and "ref:" in r.text
    # names and ids are references as before
    assert (await manager.get("m"))["status"] == "RUNNING"
    s = await manager.get("m")
    assert (await manager.get(s["id"]))["name"] == "m"
