"""Small helpers shared by the in-process tests (no fixtures here: see conftest.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx

from tests.inprocess.asgi import key_of
from tests.inprocess.conftest import Harness, eventually


@contextlib.asynccontextmanager
async def heartbeats(c: httpx.AsyncClient, name: str, every: float = 0.1) -> AsyncIterator[None]:
    """Keeps agent ``name`` alive (posts heartbeats) while the block runs; the first one is
    sent before the block starts."""

    async def one() -> None:
        r = await c.post(f"/agents/{name}/heartbeat")
        assert r.status_code == 204, r.text

    async def beat() -> None:
        while True:
            await asyncio.sleep(every)
            await one()

    await one()
    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def running(h: Harness, name: str, **body: Any) -> dict[str, Any]:
    """Creates session ``name`` and waits until it is RUNNING."""
    await h.create(name, **body)
    s = await h.wait(name)
    assert s["status"] == "RUNNING", s
    return s


async def preparing(h: Harness, name: str, **body: Any) -> dict[str, Any]:
    """Creates session ``name`` with the local agent's readiness gate closed and waits until
    it is PREPARING with every kernel's container created on the fake."""
    h.local.ready_gate.clear()
    await h.create(name, **body)
    s = await h.wait_status(name, "PREPARING")
    sid: str = s["id"]
    size = len(s["kernels"])
    await eventually(
        lambda: sum(c.spec.session_id == sid for c in h.local.containers.values()) == size
    )
    s = await h.get(name)
    assert s["status"] == "PREPARING", s
    return s


def error_of(r: httpx.Response) -> dict[str, Any]:
    """The ``error`` object of an error answer, checking the shared shape."""
    body = r.json()
    assert set(body) == {"error"}, body
    err = dict(body["error"])
    assert {"code", "message", "field"} <= set(err), err
    assert isinstance(err["message"], str) and err["message"], err
    return err


async def get_when(
    h: Harness, ref: str, check: Callable[[dict[str, Any]], bool], timeout: float = 5
) -> dict[str, Any]:
    """The session once ``check`` holds for it (polling GET)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        s = await h.get(ref)
        if check(s):
            return s
        assert loop.time() < deadline, f"condition not reached in time: {s}"
        await asyncio.sleep(0.02)


def anon_client(h: Harness, raise_app_exceptions: bool = True) -> httpx.AsyncClient:
    """A client of the app that sends no credentials."""
    assert h.app is not None
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=h.app, raise_app_exceptions=raise_app_exceptions),
        base_url="http://troupe.test/v1",
    )


# -- the web UI ---------------------------------------------------------------------------

ORIGIN = "http://troupe.test"


def web_client(h: Harness) -> httpx.AsyncClient:
    assert h.app is not None
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=h.app), base_url=ORIGIN, follow_redirects=False
    )


async def signed_in(h: Harness, key: str | None = None) -> httpx.AsyncClient:
    c = web_client(h)
    r = await c.post(
        "/signin",
        content=f"api_key={key or key_of(h.client)}&next=/",
        headers={"Origin": ORIGIN, "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 303, r.text
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    return c
