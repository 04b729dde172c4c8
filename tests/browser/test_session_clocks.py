"""The session page shows a session's clocks (docs/policies.md): its time limit and when it is
reached, and how long it has been idle and when it ends; the page passes axe-core."""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import Browser, expect

from tests.browser.conftest import Web
from tests.conftest import BASE_IMAGE, Server

pytestmark = pytest.mark.docker


def test_session_page_shows_idle_and_time_limit(browser: Browser, server: Server) -> None:
    r = server.cli(
        "session", "create", "clocked", "-i", BASE_IMAGE, "--cpu", "0.25", "--mem", "128m",
        "--idle-timeout", "30m", "--time-limit", "3h", "--wait", "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    with server.client() as c:  # the reaper's first round (every 5 s) found it idle
        deadline = time.monotonic() + 30
        while c.get_session("clocked").idle_since is None:
            assert time.monotonic() < deadline, "idle_since never set"
            time.sleep(0.5)
    web = Web(browser, server)
    try:
        web.sign_in(server.key)
        page = web.go("/sessions/clocked")
        expect(page.locator('dd[data-clock="time limit"]')).to_contain_text(
            "3 h (stop grace 10 s), reached "
        )
        idle = page.locator('dd[data-clock="idle reclaim"]')
        expect(idle).to_contain_text("ends in 29 min (after 30 min idle)")
        expect(idle).to_contain_text("idle for ")
        web.shot("11-session-clocks", full_page=True)
        web.audit("session-clocks")
    finally:
        web.close()
        server.cli("session", "destroy", "clocked")
