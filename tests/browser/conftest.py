"""Playwright (Python) driving Debian's chromium (installed by scripts/setup.sh; no browser
download). Every request a page makes must stay on the server's origin: one to any other
origin fails the test. Screenshots go to $TROUPE_ARTIFACTS (default tests/browser/artifacts).
``Web.audit`` runs axe-core (vendored under tests/browser/vendor, no network) on the page."""

from __future__ import annotations

import contextlib
import os
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    Page,
    Playwright,
    Request,
    Response,
    sync_playwright,
)

from tests.conftest import Reporting, Server

CHROMIUM = os.environ.get("TROUPE_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: axe-core, committed (scripts/update-web-vendor.sh fetches it; version in vendor/VERSIONS).
AXE = Path(__file__).parent / "vendor" / "axe-core" / "axe.min.js"
#: The axe impacts that fail a page (the others, "moderate" and "minor", are printed only).
FAILING = ("serious", "critical")
#: Rules whose "needs review" answers fail a page too (at a failing impact): ARIA misuse that
#: axe finds certain only on an empty element (a log view before its first line) and a
#: control whose name is not its visible text (experimental in axe, switched on here). Other
#: answers that need review (mostly contrast over overlapping boxes) are printed only.
REVIEW_FAILS = ("aria-", "label-content-name-mismatch")
AXE_OPTIONS = {
    "resultTypes": ["violations", "incomplete"],
    "rules": {"label-content-name-mismatch": {"enabled": True}},
}
ARTIFACTS = Path(os.environ.get("TROUPE_ARTIFACTS", Path(__file__).parent / "artifacts"))
#: At most this many of a page's console lines, errors and failed requests are kept.
BROWSER_LOG_LINES = 60


# Module scope, not session: while Playwright's sync API runs, the main thread has a running
# event loop, and pytest-asyncio cannot run the async tests that come after these.
@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} missing; run scripts/setup.sh first")
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    b = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture(scope="module")
def web(browser: Browser, server: Server) -> Iterator[Web]:
    """A signed-in browser context on the module's server (a module that needs another server
    or a signed-out context defines its own ``web``)."""
    with signed_in(browser, server) as w:
        yield w


@contextlib.contextmanager
def signed_in(browser: Browser, server: Server) -> Iterator[Web]:
    """A browser context on ``server``, signed in as its admin, closed at the end."""
    w = Web(browser, server)
    try:
        w.sign_in(server.key)
        yield w
    finally:
        w.close()


class Web(Reporting):
    """A browser context on the test server that records requests to other origins."""

    def __init__(self, browser: Browser, server: Server, width: int = 1280, height: int = 800):
        self.server = server
        self.context: BrowserContext = browser.new_context(
            viewport={"width": width, "height": height}
        )
        self.context.set_default_timeout(20_000)
        self.foreign: list[str] = []
        self.context.on("request", lambda r: self._check(r.url))
        #: what the page said and what failed (for a failed test's report): console lines,
        #: script errors, failed requests and the live streams' answers
        self.log: deque[str] = deque(maxlen=BROWSER_LOG_LINES)
        self.context.on("requestfailed", self._failed)
        self.context.on("response", self._response)
        self.page: Page = self.context.new_page()
        self.page.on("websocket", lambda ws: self._check(ws.url))
        self.page.on("console", lambda m: self.log.append(f"console {m.type}: {m.text}"))
        self.page.on("pageerror", lambda e: self.log.append(f"page error: {e}"))

    def _check(self, url: str) -> None:
        host = self.server.url.split("://", 1)[1]
        same = url.startswith((f"http://{host}/", f"ws://{host}/"))
        if not same and not url.startswith(("data:", "blob:", "about:")):
            self.foreign.append(url)

    def _failed(self, r: Request) -> None:
        if r.failure == "net::ERR_ABORTED" and "/ui/events" in r.url:
            return  # (a page's live stream, ended by leaving the page)
        self.log.append(f"failed {r.method} {r.url}: {r.failure}")

    def _response(self, r: Response) -> None:
        if "/ui/events" in r.url or r.status >= 400:
            self.log.append(f"{r.status} {r.request.method} {r.url}")

    def go(self, path: str) -> Page:
        self.page.goto(self.server.url + path)
        return self.page

    def sign_in(self, key: str) -> None:
        self.go("/")
        self.page.get_by_label("API key").fill(key)
        self.page.get_by_role("button", name="Sign in").click()
        self.page.get_by_role("heading", name="Sessions").wait_for()
        # the page shows before its scripts at the end have run: a click on "New session"
        # then asks for the page again before the dialog opens (sessions.html)
        self.page.wait_for_load_state("load")

    def shot(self, name: str, full_page: bool = False) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=full_page)

    def failure_sections(self, name: str) -> list[tuple[str, str]]:
        return [(f"page of {name!r}", self.report())]

    def report(self) -> str:
        """The page's address and text, and its log: what a failed test saw. Never raises (a
        report that fails would hide the failure it reports)."""
        try:
            text = self.page.evaluate("() => document.body.innerText")
        except Exception as e:  # (a page that is gone or navigating)
            text = f"(no text: {e})"
        try:
            return "\n".join([f"at {self.page.url}", str(text)[:3000], "-- log:", *self.log])
        except Exception as e:
            return f"(no report: {e!r})"

    def close(self) -> None:
        self.context.close()
        assert not self.foreign, f"requests left the server's origin: {self.foreign}"

    def audit(self, where: str) -> None:
        """Runs axe-core on the page as it is now and fails on any serious or critical
        violation, naming each rule and the elements it found (all of them, milder ones too,
        go to ``$TROUPE_ARTIFACTS/axe-WHERE.txt``). axe is evaluated through the DevTools
        protocol, which the page's CSP does not govern: pages are audited as served."""
        if not self.page.evaluate("() => 'axe' in window"):
            self.page.evaluate(AXE.read_text())
        result: dict[str, Any] = self.page.evaluate(
            "async (options) => await axe.run(document, options)", AXE_OPTIONS
        )
        found = [("", v, v["impact"] in FAILING) for v in result["violations"]]
        found += [
            ("needs review: ", v, v["impact"] in FAILING and v["id"].startswith(REVIEW_FAILS))
            for v in result["incomplete"]
        ]
        lines = [
            (
                f"{kind}{v['impact']} {v['id']}: {v['help']}: "
                + ", ".join(" ".join(map(str, n["target"])) for n in v["nodes"]),
                fails,
            )
            for kind, v, fails in found
        ]
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / f"axe-{where}.txt").write_text("".join(f"{x}\n" for x, _ in lines))
        bad = [x for x, fails in lines if fails]
        assert not bad, f"axe-core on {where} ({self.page.url}):\n" + "\n".join(bad)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Marks where each test begins in its pages' logs (a module's pages serve many tests)."""
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, Web):
            value.log.append(f"-- {item.name}")
    yield
