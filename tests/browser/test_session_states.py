"""The session page shows what makes sense in each state, in a real browser against a real
manager on Docker: a finished session only its history (facts, kernels, events, logs, what it
used or that nothing was sampled), no live controls (terminal, connect, apps, destroy), and
its terminal page says it ended; a
running one that ends loses them while the page is open; a PENDING one has apps that wait for
RUNNING (and the page asks the apps API nothing meanwhile). The events' clock times stay clock
times. Every state passes axe-core. ``webui.png`` (the running page with roles and its charts)
is docs/webui.png."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
from playwright.sync_api import Browser, Page, Request, Response, Route, expect

from tests.browser.conftest import Web, signed_in
from tests.conftest import BASE_IMAGE, Server, serving
from troupe.api.models import Resources, SessionCreate
from troupe.api.roles import RoleSpec

pytestmark = pytest.mark.docker
CLOCK = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")


@pytest.fixture
def sampled(browser: Browser, tmp_path: Path, docker_engine: None) -> Iterator[Web]:
    """A signed-in context on a server of its own whose agent samples every second (5 s by
    default): a running page's charts have their points within seconds. (The module's server
    keeps 5 s: its short session ends before the first sample.)"""
    with serving(tmp_path, "--metrics-interval", "1") as s, signed_in(browser, s) as w:
        yield w


def no_live_controls(page: Page) -> None:
    for name in ("Terminal", "Destroy", "Open port…"):
        expect(page.get_by_role("button", name=name)).to_have_count(0)
    expect(page.get_by_role("link", name="Terminal")).to_have_count(0)
    for region in ("Apps", "Connect"):
        expect(page.get_by_role("region", name=region, exact=True)).to_have_count(0)
    expect(page.locator("#port-dialog")).to_have_count(0)


def test_a_short_finished_session_shows_its_history_only(web: Web, server: Server) -> None:
    c = server.client()
    req = SessionCreate(name="brief", image=BASE_IMAGE, type="batch", startup_command="echo done")
    sid = c.create_session(req).id
    assert c.wait_session(sid, until="final", timeout=120).status == "TERMINATED"

    page = web.page
    page.clock.install()
    web.go(f"/sessions/{sid}")
    expect(page.locator("h1 .badge")).to_have_text("TERMINATED")
    no_live_controls(page)
    expect(page.get_by_role("link", name="Logs").first).to_be_visible()
    # it ended before the first sampling interval: the page says so at once
    usage = page.get_by_role("region", name="Utilisation")
    expect(usage).to_contain_text("No samples: the session ended before", timeout=10_000)
    expect(usage).not_to_contain_text("first figures")
    events = page.get_by_role("region", name="Events")
    expect(events.locator("tr", has_text="TERMINATED")).to_have_count(1)
    # the ages of the list are refreshed every 15 s; the events' times are clock times
    times = events.locator("time")
    page.clock.run_for(20_000)
    for text in times.all_inner_texts():
        assert CLOCK.match(text), text
    web.shot("state-finished-short", full_page=True)
    web.audit("session-finished-short")
    # its terminal page (an old link) says it ended and links its logs, and connects nothing
    web.go(f"/sessions/{sid}/terminal")
    expect(page.locator("main")).to_contain_text("The session has ended")
    expect(page.get_by_role("region", name="Terminal")).to_have_count(0)
    expect(page.get_by_role("link", name="logs")).to_have_attribute("href", f"/sessions/{sid}/logs")
    web.audit("terminal-finished")


def test_a_session_that_ends_while_open_loses_its_live_controls(sampled: Web) -> None:
    web = sampled
    c = web.server.client()
    req = SessionCreate(
        name="ending",
        image=BASE_IMAGE,
        resources=Resources(cpu=0.5, mem="256m"),
        roles=[RoleSpec(name="worker", replicas=1)],
        max_restarts=1,
    )
    sid = c.create_session(req).id
    assert c.wait_session(sid, timeout=120).status == "RUNNING"
    busy = "nohup timeout 60 sh -c 'while :; do :; done' >/dev/null 2>&1 &"
    assert c.exec(sid, ["sh", "-c", busy])[0] == 0  # a CPU chart with something on it
    page = web.go(f"/sessions/{sid}")
    expect(page.get_by_role("link", name="Terminal")).to_be_visible()
    expect(page.get_by_role("button", name="Open port…")).to_be_enabled()
    expect(page.get_by_role("region", name="Connect", exact=True)).to_contain_text("ssh worker1")
    # docs/webui.png: the page of a running session with roles, its charts drawn
    usage = page.get_by_role("region", name="Utilisation")
    for host in ("main1", "worker1"):
        expect(usage.get_by_role("region", name=host)).to_be_visible(timeout=30_000)
    # a few samples: lines rather than dots
    expect(usage.locator("figure").first).to_have_attribute(
        "data-points", re.compile(r"^([5-9]|\d\d+)$"), timeout=60_000
    )
    web.shot("webui", full_page=True)

    c.destroy_session(sid)
    expect(page.locator("h1 .badge")).to_have_text(re.compile("TERMINATED|CANCELLED"))
    no_live_controls(page)
    usage = page.get_by_role("region", name="Utilisation")
    expect(usage).not_to_contain_text("first figures", timeout=20_000)
    web.shot("state-ended-live", full_page=True)
    web.audit("session-ended-live")


def test_a_pending_session_has_apps_that_wait_for_running(web: Web, server: Server) -> None:
    c = server.client()
    blocker = c.create_session(
        SessionCreate(name="blocker", image=BASE_IMAGE, resources=Resources(cpu=1, mem="256m"))
    ).id
    waiting = c.create_session(
        SessionCreate(name="waiter", image=BASE_IMAGE, resources=Resources(cpu=2, mem="256m"))
    ).id
    failed: list[str] = []

    def on_response(r: Response) -> None:
        if "/apps" in r.url and r.status >= 400:
            failed.append(f"{r.status} {r.url}")

    page = web.page
    page.on("response", on_response)
    try:
        web.go(f"/sessions/{waiting}")
        expect(page.locator("h1 .badge")).to_have_text("PENDING")
        apps = page.get_by_role("region", name="Apps", exact=True)
        expect(apps).to_contain_text("once the session is RUNNING")
        expect(apps.get_by_role("button", name="Open port…")).to_be_disabled()
        page.wait_for_timeout(1000)
        assert not failed, failed
        web.shot("state-pending", full_page=True)
        web.audit("session-pending-apps")
    finally:
        page.remove_listener("response", on_response)
        c.destroy_session(waiting)
        c.destroy_session(blocker)
    # destroyed before it ran: its page says it never ran
    web.go(f"/sessions/{waiting}")
    usage = page.get_by_role("region", name="Utilisation")
    expect(usage).to_contain_text("No samples: the session never ran.", timeout=10_000)


def refusing_streams(page: Page) -> list[bool]:
    """Answers the page's live streams (``/ui/events``) 429, as the server does to a user with
    too many streams open, while the flag this returns holds True; then lets them through."""
    refuse = [True]

    def handle(route: Route) -> None:
        if refuse[0]:
            body = '{"detail": "too many concurrent streams"}'
            route.fulfill(status=429, content_type="application/json", body=body)
        else:
            route.continue_()

    page.route("**/ui/events*", handle)
    return refuse


def the_list(url: str) -> bool:
    return urlparse(url).path == "/"


def asked_again(r: Request) -> bool:
    """The sessions list's own fetch of its page (its rows, after its stream was cut)."""
    return r.resource_type == "fetch" and the_list(r.url)


#: the sessions list's pager as a page with more sessions than fit has it
OLDER = (
    '<nav class="pager" aria-label="Pages of sessions">'
    '<a href="/?before=x">Older sessions</a></nav>'
)


def with_older_sessions(route: Route) -> None:
    """The list's own fetch answered as if more sessions than fit had come meanwhile."""
    if not asked_again(route.request):
        route.continue_()
        return
    r = route.fetch()
    headers = {k: v for k, v in r.headers.items() if k.lower() != "content-length"}
    body = r.text().replace('<div id="pager">', '<div id="pager">' + OLDER)
    route.fulfill(response=r, headers=headers, body=body)


def test_a_page_whose_live_stream_was_refused_opens_another(web: Web, server: Server) -> None:
    """The browser's EventSource gives up for good after an answer that is not a stream (429,
    5xx): a page then opens a new stream after a pause and follows again (docs/webui.md, "Live
    pages"). The session page shows its session's changes from then on; the sessions list also
    shows what changed while it had no stream (its rows asked for again)."""
    c = server.client()
    res = Resources(cpu=0.5, mem="256m")
    sid = c.create_session(SessionCreate(name="refused", image=BASE_IMAGE, resources=res)).id
    page = web.page
    gap = None
    try:
        assert c.wait_session(sid, timeout=120).status == "RUNNING"
        refuse = refusing_streams(page)
        web.go(f"/sessions/{sid}")
        expect(page.locator("h1 .badge")).to_have_text("RUNNING")
        page.wait_for_timeout(500)  # (its first stream refused meanwhile)
        refuse[0] = False
        c.destroy_session(sid)
        expect(page.locator("h1 .badge")).to_have_text(
            re.compile("TERMINATED|CANCELLED"), timeout=30_000
        )

        refuse[0] = True
        web.go("/")
        expect(page.get_by_role("heading", name="Sessions")).to_be_visible()
        page.wait_for_timeout(500)
        gap = c.create_session(SessionCreate(name="in-the-gap", image=BASE_IMAGE, resources=res)).id
        assert c.wait_session(gap, timeout=120).status == "RUNNING"
        row = page.locator(f"#row-{gap}")
        expect(row).to_have_count(0)  # (no stream: no row yet)
        older = page.get_by_role("link", name="Older sessions")
        expect(older).to_have_count(0)
        page.route(the_list, with_older_sessions)
        # (the row comes with the rows asked for again, not with a late change of the session;
        # the links to older pages with them)
        with page.expect_request(asked_again, timeout=30_000):
            refuse[0] = False
            expect(row).to_contain_text("RUNNING", timeout=30_000)
        expect(older).to_have_count(1)
    finally:
        page.unroute("**/ui/events*")
        page.unroute(the_list)
        for s in (sid, gap):
            if s is not None:
                with contextlib.suppress(Exception):  # (destroyed already)
                    c.destroy_session(s)
