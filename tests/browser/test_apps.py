"""Apps from the web session page (issue 22) in a real browser against a real manager on
Docker: "Open port…" reaches an ``http.server`` started in main1 in a new tab, on an origin
of its own (``<port>-<session id>.apps.localhost``: Chromium resolves ``*.localhost`` to this
machine), through the manager, the agent and the kernel's tunnel; the page and its dialog pass
axe-core; after the session is destroyed the app's tab gets a refusal, never the app."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Browser, expect

from tests.browser.conftest import Web
from tests.conftest import BASE_IMAGE, Server

pytestmark = pytest.mark.docker
APP_PORT = 8123
PAGE_TEXT = "hello-from-main1"


@pytest.fixture(scope="module")
def web(browser: Browser, server: Server) -> Iterator[Web]:
    w = Web(browser, server)
    try:
        yield w
    finally:
        # the app's tab talks to the app's origin (that is the point): not a foreign request
        w.foreign = [u for u in w.foreign if ".apps.localhost:" not in u]
        w.close()


def api(server: Server, method: str, path: str, **kw: object) -> httpx.Response:
    return httpx.request(
        method,
        f"{server.url}/v1{path}",
        headers={"Authorization": f"Bearer {server.key}"},
        timeout=120,
        **kw,  # type: ignore[arg-type]
    )


def test_open_port_reaches_a_server_in_main1_on_its_own_origin(web: Web) -> None:
    server = web.server
    r = api(server, "POST", "/sessions", json={"name": "apps-web", "image": BASE_IMAGE})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    r = api(server, "GET", f"/sessions/{sid}/wait", params={"until": "running", "timeout": 90})
    assert r.status_code == 200 and r.json()["status"] == "RUNNING", r.text
    serve = (
        f"mkdir -p /tmp/site && echo {PAGE_TEXT} > /tmp/site/index.html && cd /tmp/site &&"
        f" setsid nohup python3 -m http.server {APP_PORT} --bind 127.0.0.1"
        " >/tmp/site.log 2>&1 < /dev/null &"
    )
    r = api(server, "POST", f"/sessions/{sid}/exec", json={"command": ["sh", "-c", serve]})
    assert r.status_code == 200 and '"exit_code": 0' in r.text, r.text

    web.sign_in(server.key)
    page = web.go(f"/sessions/{sid}")
    page.get_by_role("button", name="Open port…").click()
    dialog = page.get_by_role("dialog", name="Open a port of main1")
    expect(dialog).to_be_visible()
    web.audit("open-port-dialog")
    dialog.get_by_label("Port (1-65535)").fill(str(APP_PORT))
    with web.context.expect_page() as opened:
        dialog.get_by_role("button", name="Open").click()
    tab = opened.value
    tab.wait_for_load_state()
    origin = f"http://{APP_PORT}-{sid}.apps.localhost:{server.url.rsplit(':', 1)[1]}"
    expect(tab.locator("body")).to_contain_text(PAGE_TEXT, timeout=30_000)
    assert tab.url == origin + "/", tab.url  # the link was used up: the app's own root
    assert not tab.url.startswith(server.url)
    # the app cookie is the app host's alone; the UI's cookie never went to the app's host
    cookies = web.context.cookies()
    app_host = origin.split("://", 1)[1].split(":")[0]
    assert {c["name"] for c in cookies if c["domain"] == app_host} == {"troupe_app"}
    ui = [c for c in cookies if c["name"] == "troupe_web"]
    assert ui and all(c["domain"] == "127.0.0.1" for c in ui)
    expect(dialog).to_be_hidden()
    web.audit("session-apps")

    r = api(server, "DELETE", f"/sessions/{sid}")
    assert r.status_code == 200, r.text
    tab.reload()
    expect(tab.locator("body")).to_contain_text("not RUNNING")
    assert PAGE_TEXT not in tab.content()
    tab.close()
