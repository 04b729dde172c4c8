"""The utilisation charts' pages in-process: the session page carries the charts box and the
vendored uPlot (no script from another origin, none inline), the agents page charts each
agent for admins only, and the vendored files are served."""

from __future__ import annotations

import re

from tests.inprocess.conftest import Harness
from tests.inprocess.helpers import signed_in

UPLOT = "/static/vendor/uplot/uPlot.iife.min.js"


async def test_session_page_has_the_charts_box(manager: Harness) -> None:
    s = await manager.create("charted")
    await manager.wait("charted")
    c = await signed_in(manager)
    r = await c.get(f"/sessions/{s['id']}")
    assert r.status_code == 200
    assert f'data-metrics="/v1/sessions/{s["id"]}/metrics"' in r.text
    assert UPLOT in r.text and "/static/charts.js" in r.text
    assert "/static/vendor/uplot/uPlot.min.css" in r.text
    assert "script-src 'self'" in r.headers["content-security-policy"]
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", r.text), "an inline script"
    for path in (UPLOT, "/static/vendor/uplot/uPlot.min.css", "/static/charts.js"):
        assert (await c.get(path)).status_code == 200, path


async def test_agents_page_charts_for_admins_only(manager: Harness) -> None:
    admin = await signed_in(manager)
    r = await admin.get("/agents")
    assert r.status_code == 200
    assert 'data-agent-metrics="/v1/agents/local/metrics"' in r.text and UPLOT in r.text
    r = await manager.client.post("/users", json={"name": "carol"})
    user = await signed_in(manager, r.json()["api_key"])
    r = await user.get("/agents")
    assert r.status_code == 200 and "local" in r.text
    assert "data-agent-metrics" not in r.text and UPLOT not in r.text
