"""One exception type on every side: the wire shape back into troupe.api.errors classes
(from_wire), and the synchronous SDK raising them against the real app."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.inprocess.conftest import IMAGE, Harness
from tests.inprocess.helpers import running
from troupe.api import edge
from troupe.api import errors as E
from troupe.api.models import SessionCreate
from troupe.api.users import Limits, LimitsUpdate, UserDetail, UserListed
from troupe.client.sdk import Client, UnexpectedAnswer

# -- from_wire ----------------------------------------------------------------------------


def test_from_wire_picks_the_class_of_the_code() -> None:
    e = E.from_wire(404, {"error": {"code": "not_found", "message": "session 'x' not found"}})
    assert type(e) is E.NotFound
    assert (e.message, e.status, e.field, e.kernel) == ("session 'x' not found", 404, None, None)

    e = E.from_wire(422, {"error": {"code": "invalid", "message": "name: bad", "field": "name"}})
    assert type(e) is E.Invalid and e.field == "name" and str(e) == "name: bad"

    e = E.from_wire(422, {"error": {"code": "does_not_fit", "message": "r", "field": "resources"}})
    assert type(e) is E.DoesNotFit and isinstance(e, E.Invalid)

    e = E.from_wire(409, {"error": {"code": "not_running", "message": "m", "field": None}})
    assert type(e) is E.NotRunning and isinstance(e, E.Conflict)


def test_agent_error_body_becomes_agent_failed_with_its_kernel() -> None:
    body = {"error": {"code": "agent_failed", "message": "x", "kernel": "sub1"}}
    e = E.from_wire(502, body)
    assert type(e) is E.AgentFailed
    assert e.kernel == "sub1" and e.message == "x" and e.status == 502 and e.field is None


def test_from_wire_of_unknown_or_broken_bodies() -> None:
    e = E.from_wire(418, {"error": {"code": "teapot", "message": "short and stout"}})
    assert type(e) is E.TroupeError and e.code == "teapot" and e.message == "short and stout"
    assert E.TroupeError.code == "error"  # the class is not changed by it
    bodies: list[object] = [
        None,
        "text",
        [],
        {"detail": "x"},
        {"error": "x"},
        {"error": {"code": "x"}},
    ]
    for body in bodies:
        e = E.from_wire(500, body, fallback="the text")
        assert type(e) is E.TroupeError and e.message == "the text" and e.status == 500
    e = E.from_wire(503, None)
    assert e.message == "HTTP 503"
    # fields of the wrong type are dropped, not trusted
    e = E.from_wire(422, {"error": {"code": "invalid", "message": "m", "field": 3, "kernel": []}})
    assert e.field is None and e.kernel is None


@pytest.mark.parametrize(
    "cls",
    [E.NotFound, E.Invalid, E.DoesNotFit, E.Conflict, E.NotRunning, E.Unauthorized,
     E.Forbidden, E.AgentFailed, E.Internal],
)  # fmt: skip
def test_every_error_round_trips_through_the_edge(cls: type[E.TroupeError]) -> None:
    sent = cls("what happened", field="f", kernel="sub2")
    status = edge.http_status(sent)
    assert 400 <= status < 600
    back = E.from_wire(status, sent.to_wire())
    assert type(back) is cls
    assert (back.message, back.field, back.kernel, back.status) == (
        "what happened",
        "f",
        "sub2",
        status,
    )


def test_http_statuses() -> None:
    expect = {
        E.NotFound: 404,
        E.Invalid: 422,
        E.DoesNotFit: 422,
        E.Conflict: 409,
        E.NotRunning: 409,
        E.Unauthorized: 401,
        E.Forbidden: 403,
        E.AgentFailed: 502,
        E.Internal: 500,
    }
    for cls, status in expect.items():
        assert edge.http_status(cls("m")) == status, cls
    assert edge.http_status(E.TroupeError("m")) == 500
    assert E.NotFound("m").to_wire() == {
        "error": {"code": "not_found", "message": "m", "field": None}
    }


# -- the SDK against the app ----------------------------------------------------------------


class Bridge:
    """The synchronous SDK's requests, run by the app on the test's event loop (the SDK runs
    in a worker thread)."""

    def __init__(self, h: Harness, loop: asyncio.AbstractEventLoop) -> None:
        assert h.app is not None
        self.loop = loop
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=h.app), base_url="http://troupe.test"
        )
        #: each request that reached the app: method and the path as sent
        self.seen: list[tuple[str, str]] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((request.method, request.url.raw_path.decode()))

        async def send() -> httpx.Response:
            r = await self.client.request(
                request.method, str(request.url), headers=request.headers, content=request.read()
            )
            return httpx.Response(r.status_code, headers=r.headers, content=r.content)

        return asyncio.run_coroutine_threadsafe(send(), self.loop).result(30)

    def sdk(self, key: str | None) -> Client:
        c = Client("http://troupe.test", key or "none")
        c._http = httpx.Client(
            base_url="http://troupe.test/v1",
            headers={"Authorization": f"Bearer {key}"} if key else {},
            transport=httpx.MockTransport(self.handle),
        )
        return c


@pytest.fixture
async def bridge(manager: Harness) -> AsyncIterator[Bridge]:
    b = Bridge(manager, asyncio.get_running_loop())
    yield b
    await b.client.aclose()


def admin_key(h: Harness) -> str:
    return str(h.client.headers["authorization"]).removeprefix("Bearer ")


async def test_sdk_raises_domain_errors(manager: Harness, bridge: Bridge) -> None:
    sdk = bridge.sdk(admin_key(manager))

    def expect(cls: type[E.TroupeError], call: Any, *args: Any) -> E.TroupeError:
        with pytest.raises(E.TroupeError) as info:
            call(*args)
        assert type(info.value) is cls, info.value
        return info.value

    def calls() -> dict[str, E.TroupeError]:
        out: dict[str, E.TroupeError] = {}
        out["missing"] = expect(E.NotFound, sdk.get_session, "ghost")
        out["image"] = expect(
            E.Invalid, sdk.create_session, SessionCreate(name="a", image="no/such:1")
        )
        big = SessionCreate.model_validate({"name": "a", "image": IMAGE, "resources": {"cpu": 64}})
        out["big"] = expect(E.DoesNotFit, sdk.create_session, big)
        sdk.create_session(SessionCreate(name="dup", image=IMAGE))
        out["dup"] = expect(E.Conflict, sdk.create_session, SessionCreate(name="dup", image=IMAGE))
        out["logs"] = expect(E.NotFound, lambda: list(sdk.logs("ghost")))
        user = sdk.create_user("dave")
        assert user.api_key
        dave = bridge.sdk(user.api_key)
        out["forbidden"] = expect(E.Forbidden, dave.create_user, "eve")
        out["other"] = expect(E.NotFound, dave.get_session, "dup")
        out["key"] = expect(E.Unauthorized, bridge.sdk("trp_wrong").list_sessions)
        out["nokey"] = expect(E.Unauthorized, bridge.sdk(None).list_sessions)
        return out

    errs = await asyncio.to_thread(calls)
    assert errs["missing"].status == 404 and "ghost" in errs["missing"].message
    assert errs["image"].field == "image" and errs["image"].status == 422
    assert errs["big"].field == "resources"
    assert errs["dup"].field == "name" and errs["dup"].status == 409
    assert errs["forbidden"].status == 403
    assert errs["key"].status == 401


async def test_sdk_exec_and_not_running(manager: Harness, bridge: Bridge) -> None:
    sdk = bridge.sdk(admin_key(manager))
    await running(manager, "x", cluster_size=2)
    assert await asyncio.to_thread(sdk.exec, "x", ["echo", "hello"]) == (0, "hello\n")
    assert await asyncio.to_thread(sdk.exec, "x", ["true"], "sub1") == (0, "hello\n")

    manager.local.failures["exec"] = E.AgentFailed("engine gone", kernel="sub1")

    def failed() -> E.TroupeError:
        with pytest.raises(E.AgentFailed) as info:
            sdk.exec("x", ["true"], "sub1")
        return info.value

    e = await asyncio.to_thread(failed)
    assert e.kernel == "sub1" and e.message == "engine gone"
    del manager.local.failures["exec"]
    await manager.client.delete("/sessions/x")

    def refused() -> E.TroupeError:
        with pytest.raises(E.NotRunning) as info:
            sdk.exec("x", ["true"])
        return info.value

    e = await asyncio.to_thread(refused)
    assert e.status == 409 and e.code == "not_running"


def test_sdk_unreachable_server() -> None:
    with Client("http://127.0.0.1:9", "k", timeout=2) as sdk, pytest.raises(E.Unreachable) as info:
        sdk.health()
    assert info.value.status == 0 and "cannot reach" in info.value.message


# -- session references in URL paths (finding N4, docs/reliability.md) ---------------------

#: References no session can have: each would have left its segment of the URL (another
#: route, a query, a fragment, an escape) or been resolved away by the HTTP client.
BAD_REFS = ["../folders/tmpf", "m?x=1", "a#b", "50%", "%2E%2E", "..", ".", "a/b", "", "a b"]


def ref_calls(sdk: Client) -> dict[str, Any]:
    """Every SDK method that takes a session reference, as a call of that reference."""
    return {
        "get_session": sdk.get_session,
        "session_ssh": sdk.session_ssh,
        "wait_session": lambda ref: sdk.wait_session(ref, timeout=0.1),
        "destroy_session": sdk.destroy_session,
        "logs": lambda ref: list(sdk.logs(ref)),
        "logs_follow": lambda ref: list(sdk.logs(ref, follow=True)),
        "exec_stream": lambda ref: list(sdk.exec_stream(ref, ["true"])),
        "exec": lambda ref: sdk.exec(ref, ["true"]),
    }


async def test_references_that_leave_their_segment_are_refused_before_sending(
    manager: Harness, bridge: Bridge
) -> None:
    """``destroy ../folders/tmpf`` once deleted the folder; now no request is made at all."""
    sdk = bridge.sdk(admin_key(manager))
    assert (await manager.client.post("/folders", json={"name": "tmpf"})).status_code == 201

    def calls() -> list[tuple[str, str, E.TroupeError | None]]:
        out = []
        for method, call in ref_calls(sdk).items():
            for ref in BAD_REFS:
                try:
                    call(ref)
                except E.TroupeError as e:
                    out.append((method, ref, e))
                else:
                    out.append((method, ref, None))
        return out

    for method, ref, err in await asyncio.to_thread(calls):
        assert type(err) is E.Invalid, (method, ref, err)
        assert err.field == "session" and "is not a session name or id" in err.message
    assert bridge.seen == []
    folders = await manager.client.get("/folders")
    assert [f["name"] for f in folders.json()] == ["tmpf"]


async def test_valid_references_reach_their_own_route(manager: Harness, bridge: Bridge) -> None:
    """A name with every character a name may have, and an id, each one escaped segment."""
    sdk = bridge.sdk(admin_key(manager))
    s = await running(manager, "a.b-c_1")

    def calls() -> None:
        assert sdk.get_session("a.b-c_1").id == s["id"]
        assert sdk.get_session(s["id"]).name == "a.b-c_1"
        assert sdk.exec(s["id"], ["echo", "hi"])[0] == 0  # the fake agent says hello
        assert sdk.wait_session("a.b-c_1", timeout=0.1).status == "RUNNING"
        with pytest.raises(E.NotFound):
            sdk.get_session("a..b")  # a valid name: asked for, and not found

    await asyncio.to_thread(calls)
    assert bridge.seen[:3] == [
        ("GET", "/v1/sessions/a.b-c_1"),
        ("GET", f"/v1/sessions/{s['id']}"),
        ("POST", f"/v1/sessions/{s['id']}/exec"),
    ]
    assert bridge.seen[-1] == ("GET", "/v1/sessions/a..b")


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (httpx.Response(200, json={"error": "x"}), "not a SessionInfo"),
        (httpx.Response(200, text="<html>a proxy</html>"), "not JSON"),
        (httpx.Response(200, json={"sessions": []}), "not a list of sessions"),
    ],
)
def test_an_answer_the_sdk_cannot_read_is_a_domain_error(answer: httpx.Response, said: str) -> None:
    """What is at the URL is not troupe (or not this version): one error, not a pydantic or
    JSON traceback (the CLI prints it as one line)."""
    sdk = Client("http://troupe.test", "k")
    sdk._http = httpx.Client(base_url="http://troupe.test/v1", transport=httpx.MockTransport(
        lambda request: answer))  # fmt: skip
    call = sdk.list_sessions if "list" in said else lambda: sdk.get_session("s1")
    with pytest.raises(UnexpectedAnswer) as info:
        call()
    assert said in info.value.message and "\n" not in info.value.message


async def test_user_limits_come_back_typed(manager: Harness, bridge: Bridge) -> None:
    """One ``Limits`` shape, the wire model of troupe.api.models, sent and read by the SDK."""
    sdk = bridge.sdk(admin_key(manager))

    def calls() -> tuple[UserDetail, UserDetail, list[UserListed]]:
        sdk.create_user("carol")
        set_ = sdk.set_user_limits("carol", LimitsUpdate(mem="2g", groups=["default"], gpu=None))
        return set_, sdk.get_user("carol"), sdk.list_users()

    set_, got, listed = await asyncio.to_thread(calls)
    assert isinstance(set_.limits, Limits) and set_ == got
    assert got.limits.mem == 2 * 1024**3 and got.limits.groups == ["default"]
    assert got.overrides == {"mem": 2 * 1024**3, "groups": ["default"]}
    assert got.usage.sessions == 0 and not got.revoked
    assert {u.name for u in listed} == {"admin", "carol"}
