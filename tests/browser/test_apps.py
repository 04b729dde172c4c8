"""Apps from the web session page (issue 22) in a real browser against a real manager on
Docker: "Open port…" reaches an ``http.server`` started in main1 in a new tab, on an origin
of its own (``<port>-<session id>.apps.localhost``: Chromium resolves ``*.localhost`` to this
machine), through the manager, the agent and the kernel's tunnel; the page and its dialog pass
axe-core; after the session is destroyed the app's tab gets a refusal, never the app."""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, expect

from tests.browser.conftest import ARTIFACTS, Web
from tests.conftest import BASE_IMAGE, Server

pytestmark = pytest.mark.docker
APP_PORT = 8123
PAGE_TEXT = "hello-from-main1"


class AppsWeb(Web):
    """The app's tab talks to the app's origin (that is the point): not a foreign request."""

    def _check(self, url: str) -> None:
        if not (urlsplit(url).hostname or "").endswith(".apps.localhost"):
            super()._check(url)


@pytest.fixture(scope="module")
def web(browser: Browser, server: Server) -> Iterator[Web]:
    w = AppsWeb(browser, server)
    try:
        yield w
    finally:
        w.close()


def api(server: Server, method: str, path: str, **kw: object) -> httpx.Response:
    return httpx.request(
        method,
        f"{server.url}/v1{path}",
        headers={"Authorization": f"Bearer {server.key}"},
        timeout=120,
        **kw,  # type: ignore[arg-type]
    )


def signed_in(web: Web) -> None:
    if not any(c["name"] == "troupe_web" for c in web.context.cookies()):
        web.sign_in(web.server.key)


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

    signed_in(web)
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
    page.locator("#apps").screenshot(path=str(ARTIFACTS / "apps-card.png"))

    r = api(server, "DELETE", f"/sessions/{sid}")
    assert r.status_code == 200, r.text
    tab.reload()
    expect(tab.locator("body")).to_contain_text("not RUNNING")
    assert PAGE_TEXT not in tab.content()
    tab.close()


#: Runs ``code`` in a new kernel of the JupyterLab open in the page, over the kernel's
#: WebSocket (through the proxy); returns what it printed.
RUN_IN_KERNEL = """async (code) => {
  const id = () => Math.random().toString(16).slice(2) + Date.now().toString(16);
  const xsrf = decodeURIComponent((document.cookie.match(/_xsrf=([^;]+)/) || [])[1] || "");
  const r = await fetch("/api/kernels", {method: "POST", body: "{}",
    headers: {"Content-Type": "application/json", "X-XSRFToken": xsrf}});
  if (!r.ok) throw new Error("kernel: " + r.status + " " + await r.text());
  const kernel = await r.json();
  const ws = new WebSocket(`ws://${location.host}/api/kernels/${kernel.id}/channels`);
  await new Promise((ok, bad) => { ws.onopen = ok; ws.onerror = () => bad(new Error("ws")); });
  const msgId = id(), out = [];
  const done = new Promise((ok) => { ws.onmessage = (ev) => {
    const m = JSON.parse(ev.data);
    if (!m.parent_header || m.parent_header.msg_id !== msgId) return;
    if (m.msg_type === "stream") out.push(m.content.text);
    if (m.msg_type === "error") out.push(m.content.evalue);
    if (m.msg_type === "execute_reply") ok();
  }; });
  ws.send(JSON.stringify({header: {msg_id: msgId, msg_type: "execute_request", username: "",
    session: id(), version: "5.3", date: new Date().toISOString()}, parent_header: {},
    metadata: {}, channel: "shell", buffers: [], content: {code, silent: false,
    store_history: false, user_expressions: {}, allow_stdin: false, stop_on_error: true}}));
  await done;
  ws.close();
  return out.join("");
}"""
CELL = (
    "import os, subprocess\n"
    "print(os.environ['BACKENDAI_CLUSTER_HOSTS'])\n"
    "print(subprocess.run(['ssh', 'sub1', 'hostname'], capture_output=True, text=True).stdout)"
)
#: How the test starts JupyterLab in main1 (the image's own command line is apps-image's and
#: apps-core's; the proxy needs its auth off, ``allow_remote_access`` on, the base URL /).
JUPYTER = (
    "cd /home/work && setsid nohup jupyter lab --no-browser --ip=127.0.0.1 --port=8888"
    " --ServerApp.token= --ServerApp.password= --ServerApp.allow_remote_access=True"
    " > /tmp/jupyter.log 2>&1 < /dev/null &"
)
WAIT_JUPYTER = (
    'for i in $(seq 120); do python3 -c "import urllib.request as u;'
    " u.urlopen('http://127.0.0.1:8888/api')\" 2>/dev/null && exit 0; sleep 0.5; done;"
    " cat /tmp/jupyter.log; exit 1"
)


def test_jupyter_kernel_runs_over_the_proxy_in_a_two_kernel_session(web: Web) -> None:
    server = web.server
    body = {
        "name": "apps-jupyter",
        "image": "troupe/pytorch:0.1.0",
        "cluster_size": 2,
        "resources": {"cpu": 0.5, "mem": "1g"},
    }
    r = api(server, "POST", "/sessions", json=body)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    r = api(server, "GET", f"/sessions/{sid}/wait", params={"until": "running", "timeout": 110})
    assert r.status_code == 200 and r.json()["status"] == "RUNNING", r.text
    for command in (JUPYTER, WAIT_JUPYTER):
        r = api(server, "POST", f"/sessions/{sid}/exec", json={"command": ["sh", "-c", command]})
        assert r.status_code == 200 and '"exit_code": 0' in r.text, r.text
    signed_in(web)
    page = web.go(f"/sessions/{sid}")
    with web.context.expect_page() as opened:
        page.get_by_role("button", name="Jupyter").click()
    tab = opened.value
    tab.wait_for_url(re.compile(rf"http://8888-{sid}\.apps\.localhost:[0-9]+/.*"), timeout=60_000)
    expect(tab).to_have_title(re.compile("JupyterLab"), timeout=60_000)
    expect(tab.locator(".jp-LabShell")).to_be_visible(timeout=60_000)
    expect(tab.locator(".jp-Launcher").first).to_be_visible(timeout=30_000)
    # the image's JupyterLab settings: no prompt to fetch Jupyter news (it needs the internet)
    tab.wait_for_timeout(3000)
    assert tab.get_by_text("Would you like to get notified").count() == 0
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / "apps-jupyterlab.png"))
    printed = tab.evaluate(RUN_IN_KERNEL, CELL)
    assert printed.split() == ["main1,sub1", "sub1"], printed
    api(server, "DELETE", f"/sessions/{sid}")
    tab.close()


#: Writes a scalar the way a training script in main1 does (torch's SummaryWriter), into the
#: log directory the image's TensorBoard reads (/home/work/runs: torch's default is ./runs).
SCALARS = (
    "from torch.utils.tensorboard import SummaryWriter\n"
    "w = SummaryWriter('/home/work/runs/demo')\n"
    "for step in range(20):\n"
    "    w.add_scalar('loss/train', 1.0 / (step + 1), step)\n"
    "w.close()\n"
)


def test_tensorboard_shows_a_scalar_written_in_main1(web: Web) -> None:
    server = web.server
    body = {
        "name": "apps-tensorboard",
        "image": "troupe/pytorch:0.1.0",
        "resources": {"cpu": 0.5, "mem": "1g"},
    }
    r = api(server, "POST", "/sessions", json=body)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    try:
        r = api(server, "GET", f"/sessions/{sid}/wait", params={"until": "running", "timeout": 110})
        assert r.status_code == 200 and r.json()["status"] == "RUNNING", r.text
        command = {"command": ["python3", "-c", SCALARS], "user": "work"}
        r = api(server, "POST", f"/sessions/{sid}/exec", json=command)
        assert r.status_code == 200 and '"exit_code": 0' in r.text, r.text
        signed_in(web)
        page = web.go(f"/sessions/{sid}")
        button = page.get_by_role("button", name="TensorBoard", exact=True)
        with web.context.expect_page(timeout=90_000) as opened:
            button.click()
        tab = opened.value
        tab.wait_for_url(
            re.compile(rf"http://6006-{sid}\.apps\.localhost:[0-9]+/.*"), timeout=90_000
        )
        expect(tab).to_have_title(re.compile("TensorBoard"), timeout=60_000)
        # the scalars dashboard: the run written in main1 and its tag's chart card
        expect(tab.get_by_text("loss/train").first).to_be_visible(timeout=60_000)
        expect(tab.get_by_text("demo").first).to_be_visible(timeout=30_000)
        card = tab.locator("card-view, scalar-card").first
        expect(card).to_be_visible(timeout=30_000)
        # its data table: run "demo", the last value written (1 / 20) at step 19
        expect(card).to_contain_text(re.compile(r"demo\s*[0-9.]+\s*0\.05\s*19"), timeout=30_000)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=str(ARTIFACTS / "apps-tensorboard.png"))
        expect(page.locator("#apps")).to_contain_text("running")
        tab.close()
    finally:
        api(server, "DELETE", f"/sessions/{sid}")
