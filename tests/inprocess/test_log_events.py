"""Followed logs as server-sent events: keep-alives while quiet (finding L11), ids that let a
client resume exactly, without repeats or losses, whatever order lines arrived in (finding N7),
and the SDK reading them."""

from __future__ import annotations

import asyncio
import json

from tests.inprocess.asgi import AsgiHttp, key_of
from tests.inprocess.conftest import Harness, MakeManager, eventually
from tests.inprocess.helpers import running
from troupe.api.aio import heartbeat


def events(body: bytes) -> list[tuple[str, str, str]]:
    """(event, id, data) of each event; comments as ("comment", "", text)."""
    out = []
    for block in body.decode().split("\n\n"):
        if not block:
            continue
        event, ident, data = "message", "", ""
        for line in block.split("\n"):
            if line.startswith(":"):
                event, data = "comment", line[1:].strip()
            elif line.startswith("event: "):
                event = line[7:]
            elif line.startswith("id: "):
                ident = line[4:]
            elif line.startswith("data: "):
                data = line[6:]
        out.append((event, ident, data))
    return out


async def test_heartbeat_fills_quiet_gaps_and_ends_with_its_source() -> None:
    async def slow() -> object:
        yield 1
        await asyncio.sleep(0.25)
        yield 2

    out = [x async for x in heartbeat(slow(), 0.1)]
    assert out[0] == 1 and out[-1] == 2 and 1 <= out.count(None) <= 3


async def test_quiet_follow_sends_keepalives(make_manager: MakeManager) -> None:
    manager = await make_manager(keepalive_seconds=0.1)
    s = await running(manager, "quiet", cluster_size=2)
    for c in manager.local.containers.values():
        c.logs.clear()
    manager.local.follow_gate = asyncio.Event()
    call = AsgiHttp(
        manager,
        "GET",
        f"/v1/sessions/{s['id']}/logs",
        "follow=true",
        key_of(manager.client),
        accept="text/event-stream",
    ).start()
    await eventually(lambda: events(call.body()).count(("comment", "", "keep-alive")) >= 2)
    assert call.started is not None and call.started["status"] == 200
    headers = dict(call.started["headers"])
    assert headers[b"content-type"].startswith(b"text/event-stream")
    call.leave()
    assert call.task is not None
    await asyncio.wait_for(call.task, 5)


async def test_events_carry_kernel_and_timestamp_and_resume_without_repeats(
    manager: Harness,
) -> None:
    await running(manager, "ev", cluster_size=2)
    r = await manager.client.get(
        "/sessions/ev/logs", params={"follow": True}, headers={"Accept": "text/event-stream"}
    )
    assert r.status_code == 200, r.text
    got = [e for e in events(r.content) if e[0] != "comment"]
    lines = [(ident, json.loads(data)) for ev, ident, data in got if ev == "message"]
    assert {d["kernel"] for _, d in lines} == {"main1", "sub1"}
    assert all(ident.startswith("k:") and d["text"].endswith("started") for ident, d in lines)
    assert got[-1][0] == "end"
    # resuming after the first event gives the rest, by its id; after the earliest line, by its
    # time (?since). A follow sends lines as they come, so the two differ when the fake agent's
    # timestamps (a counter modulo 60) wrap between the kernels.
    earliest = min(lines, key=lambda x: x[1]["ts"])
    for kw in (
        {"params": {"since": earliest[1]["ts"]}},
        {"headers": {"Last-Event-ID": lines[0][0]}},
    ):
        r = await manager.client.get("/sessions/ev/logs", **kw)  # type: ignore[arg-type]
        assert r.status_code == 200
        assert len(r.text.splitlines()) == len(lines) - 1


def stamp(second: int) -> str:
    return f"2026-11-27T10:00:{second:02d}Z"


#: Lines that arrive out of time order across kernels (a follow sends main1's first) and
#: share timestamps within and across kernels: resuming by one time lost some (finding N7).
KERNEL_LOGS = {
    "main1": [(5, "a"), (5, "b"), (7, "c"), (7, "d")],
    "sub1": [(5, "x"), (6, "y"), (7, "z")],
}


def message_events(body: bytes) -> list[tuple[str, dict[str, str]]]:
    return [(i, json.loads(d)) for e, i, d in events(body) if e == "message"]


async def test_resuming_after_any_event_is_exact(manager: Harness) -> None:
    s = await running(manager, "n7", cluster_size=2)
    for c in manager.local.containers.values():
        if c.spec.session_id == s["id"]:
            c.logs[:] = [f"{stamp(t)} {x}\n" for t, x in KERNEL_LOGS[c.spec.hostname]]
    sse = {"Accept": "text/event-stream"}
    for follow in (True, False):
        r = await manager.client.get("/sessions/n7/logs", params={"follow": follow}, headers=sse)
        first = message_events(r.content)
        assert sorted(d["text"] for _, d in first) == sorted("abcdxyz")
        for cut, (ident, _) in enumerate(first):
            r = await manager.client.get(
                "/sessions/n7/logs",
                params={"follow": follow},
                headers={**sse, "Last-Event-ID": ident},
            )
            assert r.status_code == 200, r.text
            rest = message_events(r.content)
            for host, want in KERNEL_LOGS.items():
                seen = [d["text"] for _, d in first[: cut + 1] if d["kernel"] == host]
                again = [d["text"] for _, d in rest if d["kernel"] == host]
                assert seen + again == [x for _, x in want], (follow, cut, host)
            # and the ids of a resumed stream resume exactly too
            if rest:
                r = await manager.client.get(
                    "/sessions/n7/logs", headers={**sse, "Last-Event-ID": rest[0][0]}
                )
                assert len(message_events(r.content)) == len(rest) - 1


async def test_malformed_positions_are_422(manager: Harness) -> None:
    await running(manager, "bad", cluster_size=2)
    for headers, params, field in [
        ({"Last-Event-ID": "k:1:0"}, {}, "Last-Event-ID"),  # one kernel, the view has two
        ({"Last-Event-ID": "k:1:" + "0," * 3000 + "0"}, {}, "Last-Event-ID"),
        ({"Last-Event-ID": "not an id"}, {}, "Last-Event-ID"),
        ({}, {"since": "yesterday"}, "since"),
    ]:
        r = await manager.client.get("/sessions/bad/logs", headers=headers, params=params)
        assert r.status_code == 422, r.text
        assert r.json()["error"]["field"] == field


async def test_one_kernels_events_and_plain_text_agree(manager: Harness) -> None:
    await running(manager, "one", cluster_size=2)
    plain = await manager.client.get("/sessions/one/logs", params={"container": "sub1"})
    ev = await manager.client.get(
        "/sessions/one/logs",
        params={"container": "sub1"},
        headers={"Accept": "text/event-stream"},
    )
    texts = [json.loads(d)["text"] for e, _, d in events(ev.content) if e == "message"]
    assert plain.text.splitlines() == texts == ["sub1 started"]
