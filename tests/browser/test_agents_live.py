"""The agents page's heartbeat age is live (static/agents.js) in a real browser against a real
manager: an agent of another host that stops sending heartbeats shows an age that grows while
the page stays open, drops again at its next heartbeat, and once the manager marks it LOST the
page reloads with its LOST badge, its CPU and memory bars then saying its use is unknown (not
full: the API's free of a LOST agent is 0). The manager's own agent shows no heartbeat (it
sends none).
The agent here is only its HTTP calls (register, heartbeat): nothing is placed on it."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Browser, expect

from tests.browser.conftest import Web, signed_in
from tests.conftest import Server, serving

pytestmark = pytest.mark.docker
TIMEOUT = 15  # s: --agent-timeout of this module's manager


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory, docker_engine: None) -> Iterator[Server]:
    with serving(tmp_path_factory.mktemp("agents-live"), "--agent-timeout", str(TIMEOUT)) as s:
        yield s


@pytest.fixture(scope="module")
def web(browser: Browser, quick: Server) -> Iterator[Web]:
    with signed_in(browser, quick) as w:
        yield w


def test_the_heartbeat_age_is_live(web: Web, quick: Server) -> None:
    token = (quick.config_dir / "agent-token").read_text().strip()
    body = {
        "name": "far",
        "group": "far",
        "cpu": 1,
        "mem": 1024**3,
        "address": "http://127.0.0.1:9",
    }
    r = httpx.post(
        f"{quick.url}/v1/agents/register", json=body, headers={"Authorization": f"Bearer {token}"}
    )
    assert r.status_code == 200, r.text
    beat = {"Authorization": f"Bearer {r.json()['credential']}"}

    page = web.go("/agents")
    age = page.locator('[data-heartbeat="far"]')
    expect(age).to_have_text(re.compile(r"^heartbeat [0-3] s ago$"))
    expect(page.locator("[data-heartbeat]")).to_have_count(1)  # none for the manager's own
    # no heartbeat: the age grows on the open page (the page asks every 5 s)
    expect(age).to_have_text(re.compile(r"^heartbeat ([5-9]|1[0-4]) s ago$"), timeout=12_000)
    web.shot("agents-heartbeat-growing")
    r = httpx.post(f"{quick.url}/v1/agents/far/heartbeat", headers=beat)
    assert r.status_code == 204, r.text
    expect(age).to_have_text(re.compile(r"^heartbeat [0-5] s ago$"), timeout=8_000)
    # none again: LOST after the time-out, and the page reloads with the agent's new badge
    far = page.locator("section.agent", has=page.get_by_role("heading", name="far"))
    expect(far.get_by_role("meter", name="CPU allocated")).to_have_attribute("aria-valuenow", "0.0")
    expect(far.locator(".badge")).to_have_text("LOST", timeout=(TIMEOUT + 12) * 1000)
    expect(far.locator('[data-heartbeat="far"]')).to_have_text(re.compile(r"^heartbeat \d+ s ago$"))
    cpu, mem = far.locator(".meter", has_text="CPU"), far.locator(".meter", has_text="Memory")
    expect(cpu).to_contain_text("unknown while lost · 1 core")
    expect(mem).to_contain_text("unknown while lost · 1 GiB")
    expect(far.locator(".meter-unknown")).to_have_count(2)  # hatched, and no value to claim
    expect(far.get_by_role("meter")).to_have_count(1)  # the GPU's: none offered, 0 / 0
    # no sample ever: each chart is its caption alone, no empty axes
    expect(far.locator("figcaption")).to_have_text(
        ["CPU used: no sample yet", "Memory used: no sample yet"]
    )
    expect(far.locator(".plot").first).to_be_hidden()
    expect(far.locator(".plot").last).to_be_hidden()
    web.shot("agents-heartbeat-lost")
    web.audit("agents-live")
