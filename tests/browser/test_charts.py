"""The utilisation charts (uPlot) in a real browser against a real manager on Docker: the
session page draws each kernel's CPU, memory and network charts, each captioned with its
newest figures (the busy kernel's CPU above its idle peer's), and they grow as samples come;
once the session is destroyed the page shows what it used; the agents page charts each
agent's used and total for an admin. Every state passes axe-core. The manager's agent samples
every second, so the charts change between two of the page's polls."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Locator, expect

from tests.browser.conftest import Web, signed_in
from tests.conftest import BASE_IMAGE, Server, serving
from troupe.api.models import Resources, SessionCreate

pytestmark = pytest.mark.docker
START = 120_000  # ms


@pytest.fixture(scope="module")
def metered(tmp_path_factory: pytest.TempPathFactory, docker_engine: None) -> Iterator[Server]:
    with serving(tmp_path_factory.mktemp("charts"), "--metrics-interval", "1") as s:
        yield s


@pytest.fixture(scope="module")
def web(browser: Browser, metered: Server) -> Iterator[Web]:
    with signed_in(browser, metered) as w:
        yield w


def points(figure: Locator) -> int:
    return int(figure.get_attribute("data-points") or 0)


def test_session_charts_render_update_and_summarise(web: Web, metered: Server) -> None:
    c = metered.client()
    req = SessionCreate(
        name="charted", image=BASE_IMAGE, cluster_size=2, resources=Resources(cpu=1, mem="256m")
    )
    sid = c.create_session(req).id
    assert c.wait_session(sid, timeout=120).status == "RUNNING"
    code, out = c.exec(sid, ["sh", "-c", "nohup sh -c 'while :; do :; done' >/dev/null 2>&1 &"])
    assert code == 0, out

    page = web.go(f"/sessions/{sid}")
    usage = page.locator("#usage")
    main1 = usage.get_by_role("region", name="main1")
    expect(main1).to_be_visible(timeout=30_000)
    expect(usage.get_by_role("region", name="sub1")).to_be_visible(timeout=30_000)
    cpu = main1.locator("figure", has_text="CPU:")
    for title in ("CPU: ", "Memory: ", "Network: receive"):
        expect(main1.locator("figcaption", has_text=title)).to_have_count(1)
    expect(main1.locator("figure canvas")).to_have_count(3)  # no GPUs: no GPU charts
    expect(cpu.locator("figcaption")).to_contain_text(" of 1 core ")
    expect(main1.locator("figcaption", has_text="Memory: ")).to_contain_text("of 256 MiB")

    # the busy kernel's CPU climbs toward its limit as new samples arrive (the page polls)
    before = points(cpu)
    expect(cpu).not_to_have_attribute("data-points", str(before), timeout=20_000)
    assert points(cpu) > before

    # the busy kernel shows clearly more CPU than its idle peer (how much more is up to the
    # host's load: the test host is shared)
    def cores(kernel: Locator) -> float:
        text = kernel.locator("figcaption", has_text="CPU: ").inner_text()
        m = re.search(r"CPU: ([\d.]+) of 1 core ", text)
        return float(m.group(1)) if m else 0.0

    sub1 = usage.get_by_role("region", name="sub1")
    for _ in range(30):
        if cores(main1) >= 0.05 and cores(main1) > 3 * cores(sub1):
            break
        page.wait_for_timeout(1000)
    web.shot("charts-session", full_page=True)
    assert cores(main1) >= 0.05 and cores(main1) > 3 * cores(sub1), usage.inner_text()
    web.audit("session-charts")

    page2 = web.go("/agents")
    agent = page2.locator("[data-agent-metrics]").first
    expect(agent.locator("figcaption", has_text="CPU used: ")).to_contain_text(
        "cores", timeout=20_000
    )
    expect(agent.locator("figcaption", has_text="CPU used: ")).not_to_contain_text("no sample")
    expect(agent.locator("figcaption", has_text="Memory used: ")).to_contain_text(" of ")
    web.shot("charts-agents", full_page=True)
    web.audit("agents-charts")

    c.destroy_session(sid)
    page3 = web.go(f"/sessions/{sid}")
    expect(page3.locator("#usage")).to_contain_text("Used over", timeout=30_000)
    summary = page3.locator("#usage table")
    expect(summary.locator("tbody tr")).to_have_count(2)
    expect(summary).to_contain_text("main1")
    web.shot("charts-summary", full_page=True)
    web.audit("session-summary")


def test_gpu_charts_of_a_kernel_with_gpus(web: Web, metered: Server) -> None:
    """This host has no GPU: the page gets the metrics answer of a kernel with two GPUs (the
    API's shape, one GPU not reporting its figures) through Playwright's request routing."""
    c = metered.client()
    sid = c.create_session(
        SessionCreate(name="gpuview", image=BASE_IMAGE, resources=Resources(cpu=0.25, mem="128m"))
    ).id
    gib = 1024**3
    now = time.time()

    def sample(i: int) -> dict[str, object]:
        gpus = [
            {"index": 0, "uuid": "GPU-0", "util_pct": 80.0 + i, "mem_bytes": 3 * gib,
             "mem_total": 16 * gib},
            {"index": 1, "uuid": "GPU-1", "util_pct": None, "mem_bytes": None,
             "mem_total": 16 * gib},
        ]  # fmt: skip
        return {"t": now - 10 + i, "cpu_cores": 0.5, "cpu_limit": 0.25, "cpu_pct": 200.0,
                "mem_bytes": 64 * 1024**2, "mem_limit": 128 * 1024**2, "oom_killed": True,
                "net_rx_bps": 2048.0, "net_tx_bps": 1024.0, "blk_read_bps": 0.0,
                "blk_write_bps": 0.0, "pids": 3, "gpus": gpus}  # fmt: skip

    kernel = {"hostname": "main1", "samples": [sample(i) for i in range(5)]}
    answer = {"id": sid, "name": "gpuview", "status": "RUNNING", "kernels": [kernel]}
    web.page.route(f"**/v1/sessions/{sid}/metrics*", lambda route: route.fulfill(json=answer))
    try:
        page = web.go(f"/sessions/{sid}")
        main1 = page.locator("#usage").get_by_role("region", name="main1")
        expect(main1.locator("figure canvas")).to_have_count(5)
        expect(main1.locator("figcaption", has_text="GPU utilisation: ")).to_have_text(
            "GPU utilisation: GPU 0 84 %, GPU 1 —"
        )
        expect(main1.locator("figcaption", has_text="GPU memory: ")).to_have_text(
            "GPU memory: GPU 0 3.0 GiB of 16.0 GiB, GPU 1 — of 16.0 GiB"
        )
        memory = main1.locator("figcaption", has_text=re.compile("^Memory: "))
        expect(memory).to_have_text("Memory: 64.0 MiB of 128 MiB, OOM-killed")
        web.shot("charts-gpus", full_page=True)
        web.audit("session-gpu-charts")
    finally:
        web.page.unroute(f"**/v1/sessions/{sid}/metrics*")
        c.destroy_session(sid)
