"""Merging kernel logs into one prefixed stream."""

from __future__ import annotations

from collections.abc import AsyncIterator

from troupe.manager.logs import merged, split_timestamp, strip


async def lines(*items: str) -> AsyncIterator[str]:
    for i in items:
        yield i


def test_split_timestamp() -> None:
    assert split_timestamp("2026-11-26T02:18:43.1Z hello world\n") == (
        "2026-11-26T02:18:43.1Z",
        "hello world\n",
    )
    assert split_timestamp("plain line") == ("", "plain line")
    assert strip("2026-11-26T02:18:43.1Z x") == "x\n"


async def test_merged_orders_by_time_and_prefixes() -> None:
    out = [
        x.prefixed()
        async for x in merged(
            {
                "main1": lines("2026-01-01T00:00:02Z b\n", "2026-01-01T00:00:04Z d\n"),
                "sub1": lines("2026-01-01T00:00:01Z a\n", "2026-01-01T00:00:03Z c\n"),
            },
            follow=False,
        )
    ]
    assert out == ["[sub1] a\n", "[main1] b\n", "[sub1] c\n", "[main1] d\n"]


async def test_merged_follow_ends_when_all_streams_end() -> None:
    streams = {"main1": lines("x\n"), "sub1": lines("y\n")}
    out = [x.prefixed() async for x in merged(streams, follow=True)]
    assert sorted(out) == ["[main1] x\n", "[sub1] y\n"]


def test_start_up_reports_are_not_shown_with_a_kernels_output() -> None:
    from troupe.agent.logs import _shown_text, is_progress
    from troupe.agent.ready import engine_time

    assert is_progress("troupe: ready\n") and is_progress("2026-11-26T00:00:01.5Z troupe: started")
    assert not is_progress("troupe: not ready after 3s: waiting for name:sub1")
    assert not is_progress("2026-11-26T00:00:01Z troupe: warning: no sshd")
    text = "a\n2026-11-26T00:00:01Z troupe: started\nb\ntroupe: ready\n"
    assert _shown_text(text) == "a\nb\n"
    assert engine_time("2026-11-26T09:11:18.413763123Z") == "2026-11-26T09:11:18.413763+00:00"
    assert engine_time("2026-11-26T09:11:18Z") == "2026-11-26T09:11:18+00:00"
