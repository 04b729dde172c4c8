"""Pure parts of a session's clocks (docs/policies.md): durations in and out, what a new
session gets against the server's defaults and the owner's maxima, busy samples (CPU and GPU),
who is connected, and the lines people read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from troupe.api.durations import format_duration, parse_duration
from troupe.api.errors import QuotaExceeded
from troupe.api.metrics import GpuSample, KernelSample
from troupe.api.models import SessionType
from troupe.api.session_times import TimesInfo, describe
from troupe.api.users import Limits
from troupe.manager.config import ServerConfig
from troupe.manager.life import times
from troupe.manager.metrics import History
from troupe.manager.presence import Presence
from troupe.manager.reaper import last_busy


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (90, 90),
        ("90", 90),
        ("90s", 90),
        ("30m", 1800),
        ("2h", 7200),
        ("1d", 86400),
        ("1h30m", 5400),
        (" 1H 30M ", 5400),
        (120.0, 120),
    ],
)
def test_durations_parse(text: object, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "soon", "-5m", "1.5h", "2w", "h", True, 1.5, None, [1]])
def test_bad_durations_say_the_rule(bad: object) -> None:
    with pytest.raises(ValueError, match="must be a duration such as 90s"):
        parse_duration(bad)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 s"),
        (45, "45 s"),
        (60, "1 min"),
        (1800, "30 min"),
        (1799, "29 min"),
        (7200, "2 h"),
        (5400, "1 h 30 min"),
        (86400, "1 d"),
        (90000, "1 d 1 h"),
        (-3, "0 s"),
    ],
)
def test_durations_in_words(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_a_new_session_gets_defaults_within_the_maxima() -> None:
    config = ServerConfig(default_time_limit=86400, default_idle_timeout=7200)
    none, tight = Limits(), Limits(max_time_limit=3600, max_idle_timeout=600)
    i, b = SessionType.INTERACTIVE, SessionType.BATCH
    assert times.for_new(config, none, i, None, None, None) == times.Times(86400, 10, 7200)
    assert times.for_new(config, none, b, 60, 0, None) == times.Times(60, 0, None)
    assert times.for_new(config, tight, i, None, None, None) == times.Times(3600, 10, 600)
    assert times.for_new(config, tight, i, 3600, 5, 600) == times.Times(3600, 5, 600)
    assert times.for_new(ServerConfig(), none, i, None, None, None) == times.Times(None, 10, None)
    with pytest.raises(QuotaExceeded) as e:
        times.for_new(config, tight, i, 3601, None, None)
    assert e.value.field == "time_limit"
    assert str(e.value.message) == "time_limit: 1 h is over your limit of 1 h (max_time_limit)"
    with pytest.raises(QuotaExceeded):
        times.for_new(config, tight, i, None, None, 601)
    # a batch session asks for no idle timeout and gets none, whatever the maximum
    assert times.for_new(config, tight, b, None, None, None).idle_timeout is None


def test_changes_are_bounded_by_the_maxima() -> None:
    tight = Limits(max_time_limit=3600)
    times.check_change(tight, "time_limit", 3600)
    times.check_change(tight, "idle_timeout", None)  # no maximum: none is fine
    times.check_change(tight, "stop_grace", 3000)
    for value in (3601, None):
        with pytest.raises(QuotaExceeded):
            times.check_change(tight, "time_limit", value)


def _history(t0: float, cpu: list[float], gpu: list[float | None]) -> History:
    h = History()
    for i, (c, g) in enumerate(zip(cpu, gpu, strict=True)):
        gpus = [GpuSample(index=0, uuid="GPU-0", util_pct=g)] if g is not None or i == 0 else []
        h.add_kernel(
            "s", "main1", 5.0, KernelSample(t=t0 + 5 * i, cpu_cores=c, mem_bytes=0, gpus=gpus)
        )
    return h


def test_busy_samples_by_cpu_or_gpu() -> None:
    t0 = 1_700_000_000.0
    h = _history(t0, [0.5, 0.01, 0.02, 0.01], [0.0, 0.0, 0.0, 0.0])
    assert last_busy(h.kernels.values(), t0 - 1, 0.05, 5.0) == t0
    assert last_busy(h.kernels.values(), t0, 0.05, 5.0) is None  # only after since
    h = _history(t0, [0.01, 0.01, 0.01, 0.01], [0.0, 80.0, 3.0, None])
    assert last_busy(h.kernels.values(), t0 - 1, 0.05, 5.0) == t0 + 5
    assert last_busy(h.kernels.values(), t0 - 1, 0.05, 90.0) is None


def test_presence_counts_connections() -> None:
    now = [100.0]
    p = Presence(clock=lambda: now[0])
    assert not p.connected("a") and p.last_seen("a") is None
    one, two = p.hold("a"), p.hold("a")
    now[0] = 150.0
    one.close()
    one.close()  # idempotent
    assert p.connected("a") and p.last_seen("a") == 150.0
    now[0] = 160.0
    with two:
        pass
    assert not p.connected("a") and p.last_seen("a") == 160.0
    p.forget(keep=set())
    assert p.last_seen("a") is None


def test_lines_people_read() -> None:
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    t = TimesInfo(
        time_limit=10800,
        stop_grace=10,
        idle_timeout=1800,
        deadline=now + timedelta(hours=1),
        idle_since=now - timedelta(minutes=12),
        idle_deadline=now + timedelta(minutes=18),
    )
    lines = dict(describe(t, True, now, lambda at: at.strftime("%H:%M")))
    assert lines["time limit"] == "3 h (stop grace 10 s), reached 13:00, in 1 h"
    assert lines["idle reclaim"] == "idle for 12 min, ends in 18 min (after 30 min idle)"
    busy = t.model_copy(update={"idle_since": None, "idle_deadline": None})
    assert dict(describe(busy, True, now, str))["idle reclaim"] == "in use (after 30 min idle)"
    assert dict(describe(t, False, now, str)) == {
        "time limit": "3 h (stop grace 10 s)",
        "idle reclaim": "after 30 min idle",
    }
    assert describe(TimesInfo(), True, now, str) == []
