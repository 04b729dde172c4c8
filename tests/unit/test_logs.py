"""Kernel logs: merging kernels into one prefixed stream by time (a k-way merge), positions
and event ids that resume exactly (finding N7), and saved logs read as streams."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from troupe.api.errors import Invalid
from troupe.manager.log_positions import MAX_ID, Position, nanos, start
from troupe.manager.logs import (
    MAX_LINE,
    LogLine,
    fair,
    merged,
    read_lines,
    resumed,
    split_timestamp,
    stamped,
    strip,
)

BASE = "2026-01-01T00:00:0"


async def lines(*items: str) -> AsyncIterator[str]:
    for i in items:
        yield i


def kernels(*streams: Sequence[str]) -> list[AsyncIterator[LogLine]]:
    hosts = ["main1"] + [f"sub{i}" for i in range(1, len(streams))]
    return [stamped(i, hosts[i], lines(*s)) for i, s in enumerate(streams)]


async def collect(it: AsyncIterator[LogLine]) -> list[LogLine]:
    return [x async for x in it]


def test_split_timestamp() -> None:
    assert split_timestamp("2026-11-26T02:18:43.1Z hello world\n") == (
        "2026-11-26T02:18:43.1Z",
        "hello world\n",
    )
    assert split_timestamp("plain line") == ("", "plain line")
    assert split_timestamp("10Z looks like one") == ("", "10Z looks like one")
    assert strip("2026-11-26T02:18:43.1Z x") == "x\n"


def test_timestamps_compare_as_times_not_as_strings() -> None:
    # Docker trims trailing zeros: as strings "...:00Z" > "...:00.5Z" and ".1Z" > ".10001Z"
    assert nanos("2026-01-01T00:00:00Z") < nanos("2026-01-01T00:00:00.5Z")  # type: ignore[operator]
    assert nanos("2026-01-01T00:00:00.1Z") < nanos("2026-01-01T00:00:00.10001Z")  # type: ignore[operator]
    assert nanos("2026-01-01T00:00:01.000000001Z") == 1767225601000000001
    assert nanos("2026-13-01T00:00:00Z") is None and nanos("yesterday") is None


async def test_merged_orders_by_time_and_prefixes() -> None:
    out = await collect(
        merged(
            kernels(
                [f"{BASE}2Z b\n", f"{BASE}4Z d\n"],
                [f"{BASE}1Z a\n", f"{BASE}3Z c\n"],
            ),
            follow=False,
        )
    )
    assert [x.prefixed() for x in out] == ["[sub1] a\n", "[main1] b\n", "[sub1] c\n", "[main1] d\n"]


async def test_merge_ties_go_by_kernel_order_and_untimed_lines_stay_with_their_kernel() -> None:
    out = await collect(
        merged(
            kernels(
                ["no stamp yet\n", f"{BASE}2Z a\n", "piece of a\n", f"{BASE}3Z b\n"],
                [f"{BASE}1Z x\n", f"{BASE}2Z y\n", f"{BASE}2Z z\n"],
            ),
            follow=False,
        )
    )
    assert [x.prefixed() for x in out] == [
        "[main1] no stamp yet\n",  # before any timestamp: time 0
        "[sub1] x\n",
        "[main1] a\n",  # a tie at 2s: main1 (kernel 0) first, with its untimed piece
        "[main1] piece of a\n",
        "[sub1] y\n",
        "[sub1] z\n",
        "[main1] b\n",
    ]
    assert [(x.at > 0, x.run) for x in out[2:6]] == [(True, 1), (True, 2), (True, 1), (True, 2)]


async def test_merged_follow_ends_when_all_streams_end() -> None:
    out = await collect(merged(kernels(["x\n"], ["y\n"]), follow=True))
    assert sorted(x.prefixed() for x in out) == ["[main1] x\n", "[sub1] y\n"]


async def test_a_failing_kernel_is_left_out_and_its_failure_said_at_the_end() -> None:
    async def broken() -> AsyncIterator[str]:
        yield f"{BASE}1Z first\n"
        raise RuntimeError("agent went away")

    streams = [stamped(0, "main1", broken()), *kernels([], [f"{BASE}2Z ok\n"])[1:]]
    got: list[str] = []
    with pytest.raises(RuntimeError, match="went away"):
        async for x in merged(streams, follow=False):
            got.append(x.prefixed())
    assert got == ["[main1] first\n", "[sub1] ok\n"]


# -- the merge's order, for any input --------------------------------------------------------

#: a kernel's lines: (seconds, stamped?) in time order, as a kernel's stream is
kernel_lines = st.lists(st.tuples(st.integers(0, 5), st.booleans()), max_size=12).map(sorted)


def raw(kernel: int, spec: list[tuple[int, bool]]) -> list[str]:
    return [
        f"{BASE}{t}Z k{kernel}l{i}\n" if stamped_ else f"k{kernel}l{i}\n"
        for i, (t, stamped_) in enumerate(spec)
    ]


@given(st.lists(kernel_lines, min_size=1, max_size=5))
@settings(max_examples=150, deadline=None)
def test_merge_is_each_kernels_order_interleaved_by_time(
    specs: list[list[tuple[int, bool]]],
) -> None:
    out = asyncio.run(collect(merged(kernels(*[raw(k, s) for k, s in enumerate(specs)]), False)))
    # nothing lost or repeated, each kernel's own order kept
    for k, spec in enumerate(specs):
        assert [x.text for x in out if x.kernel == k] == [r.split(" ", 1)[-1] for r in raw(k, spec)]
    # by (time, kernel): an untimed line takes its kernel's previous time
    assert [(x.at, x.kernel) for x in out] == sorted((x.at, x.kernel) for x in out)


# -- positions: resuming is exact (N7) -----------------------------------------------------


def interleave(per_kernel: list[list[str]], rng: random.Random) -> list[tuple[int, str]]:
    """An arrival order: each kernel's lines in their order, kernels shuffled together."""
    left = [list(x) for x in per_kernel]
    out = []
    while any(left):
        k = rng.choice([i for i, rest in enumerate(left) if rest])
        out.append((k, left[k].pop(0)))
    return out


@given(
    st.lists(kernel_lines, min_size=1, max_size=4),
    st.integers(0, 2**32),
    st.integers(0, 200),
    st.booleans(),
)
@settings(max_examples=200, deadline=None)
def test_resuming_after_any_event_repeats_nothing_and_loses_nothing(
    specs: list[list[tuple[int, bool]]], seed: int, cut: int, follow: bool
) -> None:
    per_kernel = [raw(k, s) for k, s in enumerate(specs)]
    arrived = interleave(per_kernel, random.Random(seed))
    if not arrived:
        return
    cut %= len(arrived)

    async def first_part() -> str:
        """The id of event ``cut`` as a server streaming ``arrived`` would send it."""
        cursor = start("", "", len(specs))
        counters = [stamped(k, "h", lines(*p)) for k, p in enumerate(per_kernel)]
        ident = ""
        for k, _ in arrived[: cut + 1]:
            line = await anext(counters[k])
            ident = cursor.advance(line.kernel, line.at, line.run)
        return ident

    async def resume(ident: str) -> list[LogLine]:
        cursor = start(ident, "", len(specs))
        streams = [
            resumed(stamped(k, "h", lines(*p)), cursor.positions[k])
            for k, p in enumerate(per_kernel)
        ]
        return await collect(merged(streams, follow=follow))

    ident = asyncio.run(first_part())
    rest = asyncio.run(resume(ident))
    for k, p in enumerate(per_kernel):
        sent = [split_timestamp(r)[1] for j, r in arrived[: cut + 1] if j == k]
        again = [x.text for x in rest if x.kernel == k]
        assert sent + again == [split_timestamp(r)[1] for r in p]


async def test_resume_with_equal_and_out_of_order_timestamps_across_kernels() -> None:
    main1 = [f"{BASE}5Z a\n", f"{BASE}5Z b\n", f"{BASE}6Z c\n"]
    sub1 = [f"{BASE}4Z x\n", f"{BASE}5Z y\n"]
    cursor = start("", "", 2)
    m, s = kernels(main1, sub1)
    # main1's a and b arrived before sub1's earlier x: the old id (a timestamp) lost x and y
    for stream in (m, m):
        line = await anext(stream)
        ident = cursor.advance(line.kernel, line.at, line.run)
    resumed_cursor = start(ident, "", 2)
    m, s = kernels(main1, sub1)
    rest = await collect(
        merged(
            [resumed(m, resumed_cursor.positions[0]), resumed(s, resumed_cursor.positions[1])],
            follow=False,
        )
    )
    assert [x.prefixed() for x in rest] == ["[sub1] x\n", "[sub1] y\n", "[main1] c\n"]


def test_event_ids_are_bounded_and_checked() -> None:
    cursor = start("", "", 64)
    t = nanos("2026-11-27T10:00:00.123456789Z")
    assert t is not None
    ident = ""
    for k in range(64):  # every kernel a second apart, some lines in a run
        ident = cursor.advance(k, t + k * 10**9, 1 + k % 3)
    assert len(ident) < 1000
    again = start(ident, "", 64)
    assert again.positions == cursor.positions and again.base == cursor.base
    for bad in ("k:zz", "k:1:1,2", "k:1:" + ",".join(["x!"] * 64), "k:" + "1" * MAX_ID, "soon"):
        with pytest.raises(Invalid) as e:
            start(bad, "", 64)
        assert e.value.field == "Last-Event-ID"
    with pytest.raises(Invalid) as e:
        start("", "not a time", 2)
    assert e.value.field == "since"
    # a bare timestamp (the ids of earlier servers) and ?since= mean "later than that time"
    assert start("2026-11-27T10:00:00.123456789Z", "", 2).positions == [Position(t, 0)] * 2
    assert start("", "2026-11-27T10:00:00.123456789Z", 2).positions == [Position(t, 0)] * 2
    assert start("", "", 2).positions == [None, None]


async def test_since_keeps_the_lines_later_than_it_in_every_kernel() -> None:
    cursor = start("", f"{BASE}2Z", 2)
    m, s = kernels([f"{BASE}1Z a\n", f"{BASE}2Z b\n", f"{BASE}3Z c\n"], [f"{BASE}2.5Z x\n"])
    rest = await collect(
        merged([resumed(m, cursor.positions[0]), resumed(s, cursor.positions[1])], False)
    )
    assert [x.prefixed() for x in rest] == ["[sub1] x\n", "[main1] c\n"]


# -- saved logs: streamed ------------------------------------------------------------------


async def test_saved_logs_are_read_as_a_stream_in_pieces(tmp_path: Path) -> None:
    p = tmp_path / "main1.log"
    long = "y" * (MAX_LINE * 2 + 10)
    p.write_text("a\n" + long + "\nb")
    got = [x async for x in read_lines(p)]
    assert got[0] == "a\n" and got[-1] == "b"
    assert "".join(got[1:-1]) == long + "\n" and max(map(len, got)) <= MAX_LINE
    assert [x async for x in read_lines(tmp_path / "none.log")] == []


async def test_fair_lets_other_tasks_run() -> None:
    ran = []

    async def other() -> None:
        ran.append(True)

    async def many() -> AsyncIterator[LogLine]:
        for i in range(1000):
            yield LogLine("h", "", f"{i}\n")

    task = asyncio.ensure_future(other())
    n = 0
    async for _ in fair(many(), every=100):
        n += 1
        if n == 150:
            assert ran  # the other task ran while the stream went on
    await task


@given(
    st.lists(st.tuples(st.integers(0, 4), st.booleans()), max_size=12),
    st.integers(0, 20),
)
@settings(max_examples=200, deadline=None)
def test_a_kernel_whose_times_go_backwards_may_repeat_but_never_loses(
    spec: list[tuple[int, bool]], cut: int
) -> None:
    """Not sorted: resuming after line ``cut`` sends a suffix of the kernel's lines that
    starts at or before the first line not sent."""
    full = raw(0, spec)
    if not full:
        return
    cut %= len(full)

    async def run() -> list[str]:
        cursor = start("", "", 1)
        it = stamped(0, "h", lines(*full))
        ident = ""
        for _ in range(cut + 1):
            line = await anext(it)
            ident = cursor.advance(0, line.at, line.run)
        again = start(ident, "", 1)
        rest = resumed(stamped(0, "h", lines(*full)), again.positions[0])
        return [x.text async for x in rest]

    texts = [split_timestamp(r)[1] for r in full]
    rest = asyncio.run(run())
    assert rest == texts[len(texts) - len(rest) :] and len(texts) - len(rest) <= cut + 1
