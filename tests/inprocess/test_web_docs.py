"""/docs in-process: Swagger UI is sent with the pages' Content-Security-Policy (finding N10(b),
docs/reliability.md); tests/browser checks that it still works under it."""

from __future__ import annotations

from tests.inprocess.conftest import Harness
from tests.inprocess.helpers import web_client
from troupe.manager.web.pages import CSP


async def test_docs_have_the_pages_csp_and_no_inline_script(manager: Harness) -> None:
    r = await web_client(manager).get("/docs")
    assert r.status_code == 200
    assert r.headers["content-security-policy"] == CSP
    assert "frame-ancestors 'none'" in CSP and "script-src 'self';" in CSP
    assert r.headers["x-content-type-options"] == "nosniff"
    assert '<html lang="en">' in r.text
    # every script comes from a file of this origin (an inline one would be blocked)
    assert r.text.count("<script") == r.text.count('<script src="/static/') == 2
    assert (await web_client(manager).get("/static/docs.js")).status_code == 200
