"""The session page's event timeline (docs/events.md) in a real browser against a real
manager on Docker: the page lists the session's events as served, and the page's event
stream adds the destroy's steps, with their actor, while the page is open. axe-core audits
the page with the timeline."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, expect

from tests.browser.conftest import Web
from tests.conftest import BASE_IMAGE, Server
from troupe.api.models import Resources, SessionCreate

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def web(browser: Browser, server: Server) -> Iterator[Web]:
    w = Web(browser, server)
    try:
        yield w
    finally:
        w.close()


def test_the_timeline_follows_the_session(web: Web, server: Server) -> None:
    c = server.client()
    name = f"tl-{uuid.uuid4().hex[:6]}"
    c.create_session(
        SessionCreate(name=name, image=BASE_IMAGE, resources=Resources(cpu=0.25, mem=256 * 1024**2))
    )
    s = c.wait_session(name, until="running", timeout=120)
    web.sign_in(server.key)
    page = web.go(f"/sessions/{s.id}")
    timeline = page.locator("#events")
    expect(timeline.get_by_role("heading", name="Events")).to_be_visible()
    expect(timeline.locator("tbody tr")).to_have_count(4)
    expect(timeline).to_contain_text("placed on local")
    expect(timeline).to_contain_text("scheduler")
    expect(timeline.locator("tbody tr").first).to_contain_text("user admin")  # created it
    expect(timeline.locator(".spinner")).to_have_count(0)  # a history: nothing spins
    web.audit("session-events")
    c.destroy_session(s.id)
    # the live stream re-renders the page's live part, the timeline with it
    expect(timeline.locator("tbody tr")).to_have_count(6, timeout=30_000)
    expect(timeline.locator("tbody tr").last).to_contain_text("destroyed by user")
    expect(timeline.locator("tbody tr").last).to_contain_text("user admin")
    timeline.scroll_into_view_if_needed()
    web.shot("events-timeline", full_page=True)
