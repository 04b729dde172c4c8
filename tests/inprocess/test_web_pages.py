"""The web UI in-process: sign-in cookie, Origin checks, pages, the launch dialog's capacity
answer, the live event stream and the API docs served from local files."""

from __future__ import annotations

import asyncio
import html
import json
import re
from typing import Any

import pytest

from tests.inprocess.asgi import AsgiHttp
from tests.inprocess.conftest import Harness
from tests.inprocess.helpers import ORIGIN, heartbeats, signed_in, web_client
from tests.inprocess.test_session_list import store_finished
from troupe.manager.web import signin


async def test_pages_need_sign_in(manager: Harness) -> None:
    c = web_client(manager)
    r = await c.get("/")
    assert r.status_code == 303 and r.headers["location"].startswith("/signin")
    r = await c.get("/signin")
    assert r.status_code == 200 and "API key" in r.text and "Sign in" in r.text
    r = await c.post(
        "/signin", content="api_key=trp_wrong", headers={"Origin": ORIGIN, "Content-Type": "x"}
    )
    assert r.status_code == 401 and "not valid" in r.text


async def test_sign_in_then_pages_and_api_with_cookie(manager: Harness) -> None:
    await manager.create("web1", cluster_size=2)
    await manager.wait("web1")
    c = await signed_in(manager)
    r = await c.get("/")
    assert r.status_code == 200 and "web1" in r.text and "New session" in r.text
    assert "default-src 'self'" in r.headers["content-security-policy"]
    s = await manager.get("web1")
    r = await c.get(f"/sessions/{s['id']}")
    assert r.status_code == 200
    for text in ("main1", "sub1", "troupe session shell web1", "Terminal", "Destroy"):
        assert text in r.text
    for page in ("logs", "terminal"):
        assert (await c.get(f"/sessions/{s['id']}/{page}")).status_code == 200
    assert (await c.get("/folders")).status_code == 200
    assert "local" in (await c.get("/agents")).text
    # the REST API takes the cookie: reads as is, writes only with this origin's Origin
    assert (await c.get("/v1/sessions")).status_code == 200
    r = await c.post("/v1/folders", json={"name": "d1"})
    assert r.status_code == 403 and "Origin" in r.json()["error"]["message"]
    r = await c.post("/v1/folders", json={"name": "d1"}, headers={"Origin": "http://evil.test"})
    assert r.status_code == 403
    r = await c.get("/v1/sessions", headers={"Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 403
    r = await c.post("/v1/folders", json={"name": "d1"}, headers={"Origin": ORIGIN})
    assert r.status_code == 201
    # validation errors name their field, as the launch dialog shows them
    r = await c.post(
        "/v1/sessions",
        json={"name": "x", "image": "troupe/base:0.1.0", "resources": {"cpu": 0.001}},
        headers={"Origin": ORIGIN},
    )
    assert r.status_code == 422 and r.json()["error"]["field"] == "resources.cpu"
    r = await c.post("/signout", headers={"Origin": ORIGIN})
    assert r.status_code == 303 and 'troupe_web=""' in r.headers["set-cookie"]


async def test_rotating_the_key_ends_the_web_session(manager: Harness) -> None:
    r = await manager.client.post("/users", json={"name": "bob"})
    bob_key = r.json()["api_key"]
    c = await signed_in(manager, bob_key)
    assert (await c.get("/")).status_code == 200
    r = await manager.client.post("/users/bob/rotate")
    assert r.status_code == 200, r.text
    assert (await c.get("/")).status_code == 303
    assert (await c.get("/v1/sessions")).status_code == 401


async def test_other_users_sessions_are_not_found(manager: Harness) -> None:
    s = await manager.create("private")
    r = await manager.client.post("/users", json={"name": "eve"})
    c = await signed_in(manager, r.json()["api_key"])
    for path in ("", "/logs", "/terminal"):
        r = await c.get(f"/sessions/{s['id']}{path}")
        assert r.status_code == 404 and "not found" in r.text
    assert "private" not in (await c.get("/")).text


async def test_fit_answers_the_largest_size_now(manager: Harness) -> None:
    c = await signed_in(manager)
    r = await c.get("/ui/fit", params={"cpu": 1, "mem": "1g"})
    assert r.status_code == 200
    largest = r.json()["largest"]
    assert largest["single-node"] >= 1 and largest["multi-node"] >= largest["single-node"]
    assert (await c.get("/ui/fit", params={"mem": "lots"})).status_code == 422


async def test_docs_are_served_from_local_files(manager: Harness) -> None:
    c = web_client(manager)
    r = await c.get("/docs")
    assert r.status_code == 200 and "/static/vendor/swagger-ui/swagger-ui-bundle.js" in r.text
    assert "cdn" not in r.text.lower() and "https://" not in r.text
    r = await c.get("/static/vendor/swagger-ui/swagger-ui-bundle.js")
    assert r.status_code == 200 and len(r.content) > 100_000
    r = await c.get("/static/vendor/xterm/xterm.js")
    assert r.status_code == 200


async def test_event_stream_sends_rendered_rows(manager: Harness) -> None:
    c = await signed_in(manager)
    cookie = c.cookies[signin.COOKIE]
    stream = AsgiHttp(manager, "GET", "/ui/events", accept="text/event-stream")
    stream.scope["headers"].append((b"cookie", f"{signin.COOKIE}={cookie}".encode()))
    stream.start()
    await asyncio.sleep(0.1)
    s = await manager.create("live1")
    await manager.wait("live1")
    for _ in range(200):
        if b"live1" in stream.body():
            break
        await asyncio.sleep(0.02)
    stream.leave()
    assert stream.task is not None
    await asyncio.wait_for(stream.task, 5)
    events = [e for e in stream.body().decode().split("\n\n") if e.startswith("event: session")]
    data = json.loads(events[-1].split("data: ", 1)[1])
    assert data["id"] == s["id"] and f'id="row-{s["id"]}"' in data["html"]


async def test_the_uis_files_are_revalidated_at_every_use(manager: Harness) -> None:
    """A page is never run with a script older than itself after an upgrade: the files under
    /static say no-cache (a 304 while unchanged), the sessions page keeps the tab and page it
    is on in the "New session" form (a click before its scripts asks for it again)."""
    c = await signed_in(manager)
    r = await c.get("/static/sessions.js")
    assert r.status_code == 200 and r.headers["cache-control"] == "no-cache"
    again = await c.get("/static/sessions.js", headers={"If-None-Match": r.headers["etag"]})
    assert again.status_code == 304 and again.headers["cache-control"] == "no-cache"
    stored = await store_finished(manager, "admin", 1)
    r = await c.get("/", params={"show": "finished", "before": stored[0]})
    form = re.search(
        r'<form method="get" action="/" class="new-session">(.*?)</form>', r.text, re.S
    )
    assert form is not None
    assert '<input type="hidden" name="show" value="finished">' in form.group(1)
    assert f'<input type="hidden" name="before" value="{stored[0]}">' in form.group(1)
    assert '<input type="hidden" name="new" value="1">' in form.group(1)


async def test_the_session_list_pages_past_its_first_200(manager: Harness) -> None:
    """Finding N10 (docs/reliability.md): the list stopped at 200 rows without a word."""
    stored = await store_finished(manager, "admin", 205)
    newest_first = stored[::-1]
    c = await signed_in(manager)
    r = await c.get("/", params={"show": "finished"})
    assert r.status_code == 200
    assert re.findall(r'<tr id="row-([^"]+)"', r.text) == newest_first[:200]
    older = re.search(r'<a href="([^"]+)" rel="next">Older sessions</a>', r.text)
    assert older is not None and "Newest sessions" not in r.text
    r = await c.get(html.unescape(older.group(1)))
    assert r.status_code == 200
    assert re.findall(r'<tr id="row-([^"]+)"', r.text) == newest_first[200:]
    assert "Older sessions" not in r.text and '<a href="/?show=finished">Newest' in r.text
    # the running list has none of them, and no link
    r = await c.get("/")
    assert "<tr id=" not in r.text and "Older sessions" not in r.text
    # a page before a session the user does not see is not found
    r = await c.get("/", params={"show": "finished", "before": "ghost"})
    assert r.status_code == 404 and "text/html" in r.headers["content-type"]


async def test_agents_page_counts_in_words(manager: Harness) -> None:
    """``0 / 1 core`` for an agent of one core (not ``1 cores``)."""
    agent = await manager.register("one", cpu=1)
    async with heartbeats(agent, "one"):  # ALIVE (LOST after 1 s silent) while the page is read
        c = await signed_in(manager)
        text = (await c.get("/agents")).text
    assert "0 / 1 core" in text and "1 cores" not in text, text


async def test_a_lost_agents_bars_are_unknown_not_full(manager: Harness) -> None:
    """A LOST agent's free is 0 in the API (nothing can be placed there, docs/webui.md): its
    CPU and memory bars say its use is unknown (no meter value) instead of drawing it full."""
    await manager.register("gone", cpu=2)  # and no heartbeats: LOST after agent_timeout
    c = await signed_in(manager)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while True:
        gone = next(a for a in (await c.get("/v1/agents")).json() if a["name"] == "gone")
        if gone["status"] == "LOST":
            break
        assert loop.time() < deadline, gone
        await asyncio.sleep(0.05)
    assert (gone["cpu_free"], gone["mem_free"], gone["gpu_free"]) == (0, 0, 0)
    text = (await c.get("/agents")).text
    card = text[text.index(">gone</h2>") :].split("</section>")[0]
    assert "unknown while lost · 2 cores" in card and "unknown while lost · 8 GiB" in card, card
    assert 'aria-valuenow="100.0"' not in card and "2 / 2 cores" not in card, card
    assert 'aria-label="GPU allocated"' in card and "0 / 0 GPUs" in card  # none offered: known


async def test_an_agent_lost_between_the_reads_of_its_list_has_nothing_free(
    manager: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The list reads the agents' use, then their rows: one that went LOST in between is shown
    LOST with nothing free (its use as read while it was ALIVE is not what it has free)."""
    agent = await manager.register("gone", cpu=2)
    fleet = manager.app.state.registry.fleet  # type: ignore[union-attr]
    async with heartbeats(agent, "gone"):  # ALIVE while read, however long the steps take
        alive = [s for s in await _states(manager) if s.id == "gone"]
    assert alive and alive[0].cpu_free == 2
    c = await signed_in(manager)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while (
        next(a for a in (await c.get("/v1/agents")).json() if a["name"] == "gone")["status"]
        != "LOST"
    ):
        assert loop.time() < deadline
        await asyncio.sleep(0.05)

    async def as_read_before(db: object, ids: object = None) -> list[object]:
        return list(alive)  # (what it read while the agent was ALIVE)

    monkeypatch.setattr(fleet, "states", as_read_before)
    gone = next(a for a in (await c.get("/v1/agents")).json() if a["name"] == "gone")
    assert gone["status"] == "LOST"
    assert (gone["cpu_free"], gone["mem_free"], gone["gpu_free"]) == (0, 0, 0)


async def _states(manager: Harness) -> list[Any]:
    registry = manager.app.state.registry  # type: ignore[union-attr]
    async with registry.life.store() as db:
        return list(await registry.fleet.states(db))
