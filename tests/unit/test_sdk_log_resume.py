"""The SDK's followed logs resume with the last event's id (``Last-Event-ID``), which holds
every kernel's position: a timestamp alone lost lines that arrived out of order (finding N7,
docs/reliability.md)."""

from __future__ import annotations

import json

import httpx

from troupe.client.sdk import Client


def _event(event_id: str, kernel: str, text: str) -> str:
    data = json.dumps({"kernel": kernel, "ts": "2026-11-27T10:00:00Z", "text": text})
    return f"id: {event_id}\ndata: {data}\n\n"


class _DropsOnce(httpx.SyncByteStream):
    """Two events, then the connection breaks."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        yield _event("k:1:a", "main1", "one").encode()
        yield _event("k:1:b", "sub1", "two").encode()
        raise httpx.ReadError("dropped")


def test_a_dropped_follow_resumes_from_the_last_event_id(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        headers = {"content-type": "text/event-stream"}
        if len(seen) == 1:
            return httpx.Response(200, headers=headers, stream=_DropsOnce())
        body = _event("k:1:c", "main1", "three") + "event: end\ndata: {}\n\n"
        return httpx.Response(200, headers=headers, content=body.encode())

    monkeypatch.setattr("time.sleep", lambda s: None)
    c = Client("http://troupe.invalid", "trp_x")
    c._http = httpx.Client(
        base_url="http://troupe.invalid/v1", transport=httpx.MockTransport(handler)
    )
    lines = list(c.logs("s1", follow=True))
    assert lines == ["[main1] one", "[sub1] two", "[main1] three"]
    assert len(seen) == 2
    assert seen[0].headers.get("last-event-id", "") == ""
    assert seen[1].headers["last-event-id"] == "k:1:b"
    assert "since" not in seen[1].url.params
