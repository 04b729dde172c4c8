"""The agent's side of a restart in place (agent/restart.py): which containers get the word, the
attempt's start as the manager reads it, and the failed attempt's lines."""

from __future__ import annotations

from datetime import datetime

from troupe.agent import ready, restart
from troupe.api.policies import SUPERVISED_VAR


def test_only_containers_made_supervised_get_the_word() -> None:
    assert restart.supervised({"Config": {"Env": ["A=1", f"{SUPERVISED_VAR}=1"]}})
    assert not restart.supervised({"Config": {"Env": ["A=1"]}})
    assert not restart.supervised({"Config": {"Env": None}})
    assert not restart.supervised({})


def test_the_word_time_reads_back_as_the_manager_reads_a_start() -> None:
    ns = ready.engine_nanos("2026-11-28T02:10:00.123456789Z")
    iso = restart.iso_nanos(ns)
    assert iso == "2026-11-28T02:10:00.123456+00:00"
    assert iso == ready.engine_time("2026-11-28T02:10:00.123456789Z")
    t = datetime.fromisoformat(iso)  # (kernel_io's split: lines at or after this)
    assert int(t.timestamp()) * 1_000_000_000 + t.microsecond * 1000 <= ns


def test_the_failed_attempts_log_ends_before_the_word() -> None:
    word = ready.engine_nanos("2026-11-28T02:10:00.5Z")
    text = (
        "[troupe: earlier output cut, 10 bytes kept]\n"
        "2026-11-28T02:09:59.000000001Z step 1\n"
        "2026-11-28T02:10:00.499999999Z step 2\n"
        "2026-11-28T02:10:00.500000000Z troupe: warning: next attempt\n"
        "2026-11-28T02:10:01Z later\n"
    )
    assert restart.before(text, word) == "".join(text.splitlines(keepends=True)[:3])
    assert restart.before("", word) == ""
    assert restart.before("2026-11-28T02:09:00Z a\n", word) == "2026-11-28T02:09:00Z a\n"
