"""The web UI walkthrough in a real browser against a real manager on Docker: sign in,
launch a 2-kernel single-node session from the dialog, read sub1's log, use the terminal in
main1 (cluster variables, ``ssh sub1``), a PENDING session's reasons, a failing batch
session, destroy through the dialog, and another user locked out. The tests run in order
and share one signed-in page (module scope).

On the way, axe-core audits every page and dialog in each state it reaches (``Web.audit``):
no serious or critical accessibility violation anywhere. ``/docs`` is Swagger UI's page,
checked for its CSP only."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect
from playwright.sync_api import Error as PlaywrightError

from tests.browser.conftest import Web
from tests.conftest import BASE_IMAGE, Server

pytestmark = pytest.mark.docker
START = 120_000  # ms: a session's start-up, image already built
SUB1_LINE = "hello-from-sub1"


@pytest.fixture(scope="module")
def web(browser: Browser, server: Server) -> Iterator[Web]:
    w = Web(browser, server)
    try:
        yield w
    finally:
        w.close()


@pytest.fixture(scope="module")
def ids() -> dict[str, str]:
    """Session ids by name, as the tests learn them."""
    return {}


def launch(page: Page, name: str, cpu: str, size: int, batch: str | None = None) -> str:
    """Fills the launch dialog, presses Launch and returns the id of the page it opens."""
    page.get_by_role("button", name="New session").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Name", exact=True).fill(name)
    expect(dialog.locator(f'#f-image option[value="{BASE_IMAGE}"]')).to_have_count(1)
    dialog.get_by_label("Image").select_option(BASE_IMAGE)
    if batch is not None:
        dialog.get_by_label("Type").select_option("batch")
        dialog.get_by_label("Startup command").fill(batch)
    dialog.get_by_label("CPU", exact=True).fill(cpu)
    dialog.get_by_label("Memory").fill("256m")
    dialog.get_by_label("Single node").check()
    dialog.get_by_label("Cluster size").fill(str(size))
    expect(dialog.locator("#total")).to_contain_text(f"{size} \u00d7 {float(cpu):g} CPU")
    expect(dialog.locator("#largest")).to_contain_text("could start now")
    dialog.get_by_role("button", name="Launch").click()
    page.wait_for_url(re.compile(r"/sessions/[0-9a-f-]{36}$"))
    return page.url.rsplit("/", 1)[1]


def test_sign_in(web: Web) -> None:
    web.go("/")
    expect(web.page).to_have_url(re.compile(r"/signin"))
    web.shot("01-sign-in")
    web.audit("sign-in")
    web.sign_in(web.server.key)
    expect(web.page.get_by_role("button", name="New session")).to_be_visible()
    web.audit("sessions-empty")


def rgb(css: str) -> tuple[int, int, int]:
    r, g, b = (int(x) for x in re.findall(r"\d+", css)[:3])
    return r, g, b


def contrast(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    """WCAG 2 contrast ratio of two sRGB colours."""

    def lum(c: tuple[int, int, int]) -> float:
        lin = [x / 255 / 12.92 if x <= 10 else ((x / 255 + 0.055) / 1.055) ** 2.4 for x in c]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    hi, lo = sorted((lum(a), lum(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_focus_ring_stands_out_on_every_background(web: Web) -> None:
    """The keyboard focus ring is >= 3:1 (WCAG 1.4.11) against the cards and dialogs (white),
    the page and the dark header: axe does not check focus indicators."""
    page = web.go("/")
    page.keyboard.press("Tab")  # "Skip to content", then the header's links
    page.keyboard.press("Tab")
    ring = page.evaluate(
        """() => { const s = getComputedStyle(document.activeElement);
                   return [document.activeElement.closest('.top') !== null,
                           s.outlineStyle, s.outlineColor]; }"""
    )
    assert ring[0] and ring[1] == "solid", ring
    backgrounds = page.evaluate(
        """() => [document.documentElement, document.querySelector('.top')]
                   .map((e) => getComputedStyle(e).backgroundColor)"""
    )
    for bg in [(255, 255, 255), *(rgb(b) for b in backgrounds)]:
        assert contrast(rgb(ring[2]), bg) >= 3, (ring[2], bg)


def test_launch_two_kernel_single_node_session(web: Web, ids: dict[str, str]) -> None:
    page = web.page
    page.get_by_role("button", name="New session").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Cluster size").fill("3")
    expect(dialog.locator("#total")).to_contain_text("3 \u00d7 0.5 CPU = 1.5 CPU")
    dialog.get_by_role("button", name="Launch").click()  # no name: the API's error, by Name
    expect(dialog.locator('[data-error="name"]')).to_contain_text("name")
    expect(dialog.locator(f'#f-image option[value="{BASE_IMAGE}"]')).to_have_count(1)
    web.shot("02-launch-dialog")
    web.audit("launch-dialog")
    dialog.get_by_role("button", name="Cancel").click()

    ids["web2k"] = launch(page, "web2k", "0.5", 2)
    for host in ("main1", "sub1"):
        row = page.locator(f'tr[data-kernel="{host}"]')
        expect(row).to_contain_text("RUNNING", timeout=START)
    expect(page.locator("h1 .badge")).to_have_text("RUNNING", timeout=START)
    expect(page.get_by_text("troupe session shell web2k")).to_be_visible()
    expect(page.locator(".slow-tag")).to_have_count(1)
    web.shot("03-session-page", full_page=True)
    web.audit("session")


def test_empty_logs_say_no_output_yet(web: Web, ids: dict[str, str]) -> None:
    """main1 of an interactive session prints nothing: once the stream is open the view says
    so (it used to keep looking like it was still connecting)."""
    page = web.go(f"/sessions/{ids['web2k']}/logs?kernel=main1")
    expect(page.locator("#log-state")).to_have_text("following live · no output yet")
    expect(page.locator("#log")).to_have_text("(no output yet)")
    web.shot("05-logs-empty")
    web.audit("logs-empty")


def terminal_lines(page: Page) -> list[str]:
    text = page.locator(".xterm-rows").inner_text()
    return [line.strip() for line in text.replace("\u00a0", " ").splitlines()]


def wait_line(page: Page, line: str, timeout: float = 20_000) -> None:
    """Waits until a row of the terminal reads ``line`` (the command echo is another row)."""
    try:
        page.wait_for_function(
            """(want) => [...document.querySelectorAll('.xterm-rows > div')]
                 .some((r) => r.textContent.replace(/\\u00a0/g, ' ').trim() === want)""",
            arg=line,
            timeout=timeout,
        )
    except PlaywrightError:
        raise AssertionError(f"no line {line!r} in the terminal: {terminal_lines(page)}") from None


def test_terminal_in_main1(web: Web, ids: dict[str, str]) -> None:
    page = web.go(f"/sessions/{ids['web2k']}")
    page.get_by_role("link", name="Terminal").click()
    expect(page.locator("#term-state")).to_have_text("connected")
    page.locator(".xterm").click()
    page.keyboard.type("echo $BACKENDAI_CLUSTER_HOSTS\n")
    wait_line(page, "main1,sub1")
    page.keyboard.type("ssh sub1 hostname\n")
    wait_line(page, "sub1")
    web.shot("04-terminal")
    web.audit("terminal")


def test_sub1_logs(web: Web, ids: dict[str, str]) -> None:
    page = web.page
    # a line on the output of sub1's command (PID 1), through the API's exec as root
    r = httpx.post(
        f"{web.server.url}/v1/sessions/{ids['web2k']}/exec",
        json={
            "command": ["sh", "-c", f"echo {SUB1_LINE} > /proc/1/fd/1"],
            "kernel": "sub1",
            "user": "root",
        },
        headers={"Authorization": f"Bearer {web.server.key}"},
        timeout=30,
    )
    assert r.status_code == 200 and '"exit_code": 0' in r.text, r.text
    page.goto(f"{web.server.url}/sessions/{ids['web2k']}")
    page.locator('tr[data-kernel="sub1"]').get_by_role("link", name="Logs").click()
    expect(page.get_by_label("Kernel")).to_have_value("sub1")
    expect(page.locator("#log")).to_contain_text(SUB1_LINE)
    page.get_by_label("Kernel").select_option("")
    expect(page.locator("#log")).to_contain_text(f"[sub1] {SUB1_LINE}")
    page.get_by_label("Search").fill("sub1")
    expect(page.locator("#log-state")).to_contain_text("match")
    web.shot("06-logs")
    web.audit("logs")


def test_pending_session_says_why(web: Web, ids: dict[str, str]) -> None:
    page = web.go("/")
    ids["webwait"] = launch(page, "webwait", "1.5", 1)  # fits an idle agent, not now
    expect(page.locator("h1 .badge")).to_have_text("PENDING")
    expect(page.locator(".why")).to_contain_text("cpu: needs 1.5 cores", timeout=15_000)
    web.shot("07-pending")
    web.audit("pending")
    page.get_by_role("button", name="Destroy").click()
    page.get_by_role("dialog").get_by_role("button", name="Destroy").click()
    expect(page.locator("h1 .badge")).to_have_text(re.compile("CANCELLED|TERMINATED"))


def test_failing_batch_session_names_kernel_and_exit_code(web: Web, ids: dict[str, str]) -> None:
    page = web.go("/")
    cmd = "echo web-batch-boom; exit 3"
    ids["webfail"] = launch(page, "webfail", "0.5", 2, batch=cmd)
    failure = page.locator("#failure")
    expect(failure).to_contain_text("kernel main1 exited with code 3", timeout=START)
    expect(failure.locator("pre")).to_contain_text("web-batch-boom")
    expect(failure.get_by_role("link", name="Full log of main1")).to_be_visible()
    # the usage card follows the end at once (no "first figures come ..." of a live session)
    usage = page.get_by_role("region", name="Utilisation")
    expect(usage).not_to_contain_text("first figures", timeout=3000)
    web.shot("08-failed-batch", full_page=True)
    web.audit("failed-batch")


def test_second_user_is_locked_out(web: Web, browser: Browser, ids: dict[str, str]) -> None:
    r = httpx.post(
        f"{web.server.url}/v1/users",
        json={"name": "webother"},
        headers={"Authorization": f"Bearer {web.server.key}"},
    )
    assert r.status_code == 201, r.text
    other = Web(browser, web.server)
    try:
        other.sign_in(r.json()["api_key"])
        expect(other.page.get_by_text("web2k")).to_have_count(0)
        sid = ids["web2k"]
        for path in ("", "/logs", "/terminal"):
            other.go(f"/sessions/{sid}{path}")
            expect(other.page.get_by_text(f"session '{sid}' not found")).to_be_visible()
        other.audit("not-found")
        status = other.page.evaluate(
            "async (p) => (await fetch(p)).status", f"/v1/sessions/{sid}/logs"
        )
        assert status == 404
    finally:
        other.close()


def test_other_pages_and_narrow_window(web: Web, browser: Browser) -> None:
    web.go("/folders")
    web.page.get_by_label("Folder name").fill("webdata")
    web.page.get_by_role("button", name="Create folder").click()
    expect(web.page.get_by_role("cell", name="webdata")).to_be_visible()
    web.shot("09-folders")
    web.audit("folders")
    web.go("/agents")
    expect(web.page.get_by_role("heading", name="local")).to_be_visible()
    web.shot("10-agents")
    web.audit("agents")
    narrow = Web(browser, web.server, width=400, height=800)
    try:
        narrow.sign_in(web.server.key)
        expect(narrow.page.get_by_text("web2k")).to_be_visible()
        narrow.shot("11-sessions-400px", full_page=True)
        narrow.audit("sessions-400px")
    finally:
        narrow.close()


def test_destroy_through_the_dialog(web: Web, ids: dict[str, str]) -> None:
    page = web.go("/")
    row = page.locator(f"#row-{ids['web2k']}")
    expect(row).to_contain_text("RUNNING")
    web.shot("12-sessions")
    web.audit("sessions")
    row.get_by_role("button", name="Destroy").click()
    dialog = page.get_by_role("dialog", name=re.compile("Destroy session"))
    expect(dialog).to_contain_text("web2k")
    web.audit("destroy-dialog")
    dialog.get_by_role("button", name="Destroy").click()
    expect(row).to_have_count(0, timeout=60_000)  # the live stream removes the row
    page.get_by_role("link", name="Finished").click()
    expect(page.locator(f"#row-{ids['web2k']}")).to_contain_text("TERMINATED")
    web.audit("sessions-finished")


def test_api_docs_keep_the_pages_csp(browser: Browser, server: Server) -> None:
    """Finding N10(b) (docs/reliability.md): /docs is sent with the pages' CSP (no framing,
    scripts from this origin only) and Swagger UI still works under it."""
    docs = Web(browser, server)
    console: list[str] = []
    docs.page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    docs.page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
    try:
        response = docs.page.goto(f"{server.url}/docs")
        assert response is not None
        csp = response.headers.get("content-security-policy", "")
        assert "frame-ancestors 'none'" in csp and "script-src 'self';" in csp, csp
        expect(docs.page.locator(".swagger-ui .info .title")).to_contain_text("troupe")
        docs.page.get_by_role("button", name="GET /v1/health Health").click()
        docs.page.get_by_role("button", name="Try it out").click()
        docs.page.get_by_role("button", name="Execute").click()
        live = docs.page.locator(".live-responses-table tbody .response-col_status")
        expect(live).to_have_text("200")
        docs.shot("13-api-docs")
    finally:
        docs.close()
    errors = [m for m in console if m.startswith(("error", "pageerror"))]
    assert not errors, errors
