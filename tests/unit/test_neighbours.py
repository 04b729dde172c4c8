"""The neighbour table's checks: the warning before a session that may not fit it, and the
cause added to a readiness failure when it overflowed meanwhile."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from troupe.agent import neighbours, ready
from troupe.api.errors import AgentFailed

HEAD = "entries  allocs   destroys table_fulls\n"


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A host whose limit is 1024 and whose table was full 0x10 + 0x2 times so far."""
    monkeypatch.setattr(neighbours, "LIMIT", tmp_path / "gc_thresh3")
    monkeypatch.setattr(neighbours, "STATS", tmp_path / "arp_cache")
    (tmp_path / "gc_thresh3").write_text("1024\n")
    fulls(tmp_path, 0x10, 0x2)
    return tmp_path


def fulls(host: Path, *per_cpu: int) -> None:
    rows = "".join(f"00000022 00003bd6 00003260 {n:08x}\n" for n in per_cpu)
    (host / "arp_cache").write_text(HEAD + rows)


def test_reads_the_limit_and_sums_the_per_cpu_overflows(host: Path) -> None:
    assert neighbours.limit() == 1024
    assert neighbours.overflows() == 0x12


def test_nothing_visible_means_no_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # an agent in a network namespace of its own sees neither file
    monkeypatch.setattr(neighbours, "LIMIT", tmp_path / "missing")
    monkeypatch.setattr(neighbours, "STATS", tmp_path / "missing-too")
    assert neighbours.limit() is None and neighbours.overflows() is None
    assert neighbours.check(22, 64) is None
    assert neighbours.overflow_note(None) == ""


def test_warns_when_the_kernels_here_need_more_entries_than_the_limit(
    host: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert neighbours.entries_needed(22, 64) == 22 * 63
    assert neighbours.check(16, 64) is None  # 1008 entries fit
    with caplog.at_level(logging.WARNING, logger=neighbours.__name__):
        msg = neighbours.check(22, 64)
    assert msg is not None and "1386" in msg and "gc_thresh3 = 1024" in msg
    assert msg in caplog.text
    assert neighbours.check(1, 0) is None  # (a caller that does not know the size)


def test_overflow_note_only_when_the_table_overflowed_since(host: Path) -> None:
    before = neighbours.overflows()
    assert neighbours.overflow_note(before) == ""
    fulls(host, 0x10, 0x3)
    note = neighbours.overflow_note(before)
    assert "overflowed" in note and "gc_thresh3 = 1024" in note


async def test_a_readiness_failure_names_the_overflow(
    host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def stalls(_docker: Any, h: str, _cid: str, timeout: float, _since: int) -> None:
        fulls(host, 0x10, 0x9)  # while the kernels probed their peers
        raise AgentFailed(f"set up, but no readiness report after {timeout:g}s", kernel=h)

    monkeypatch.setattr(ready, "kernel_ready", stalls)
    with pytest.raises(AgentFailed) as e:
        await ready.wait_ready(None, {"main1": "c1"}, 5, cluster_size=64)  # type: ignore[arg-type]
    assert e.value.kernel == "main1"
    assert e.value.message.startswith("set up, but no readiness report after 5s (")
    assert "neighbour table overflowed" in e.value.message


async def test_a_failure_without_overflow_is_unchanged(
    host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def fails(_docker: Any, h: str, _cid: str, _timeout: float, _since: int) -> None:
        raise AgentFailed("not ready after 5s: waiting for net:sub1", kernel=h)

    monkeypatch.setattr(ready, "kernel_ready", fails)
    with pytest.raises(AgentFailed) as e:
        await ready.wait_ready(None, {"main1": "c1"}, 5, cluster_size=2)  # type: ignore[arg-type]
    assert e.value.message == "not ready after 5s: waiting for net:sub1"
