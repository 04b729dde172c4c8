"""Per-user limits: effective limits and the arithmetic of admission (troupe.manager.quotas)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from troupe.api.users import Usage
from troupe.manager.config import ServerConfig
from troupe.manager.logs import tail
from troupe.manager.quotas import (
    UNLIMITED,
    Ask,
    Limits,
    check,
    effective,
    server_defaults,
)

G = 1024**3


def ask(
    size: int = 1,
    cpu: float = 1.0,
    mem: int = G,
    gpu: int = 0,
    group: str = "default",
    priority: int = 0,
) -> Ask:
    return Ask(group=group, priority=priority, size=size, cpu=cpu, mem=mem, gpu=gpu)


def test_defaults_come_from_the_server_config() -> None:
    config = ServerConfig(quota_sessions=3, quota_kernels=7, quota_cpu=2.5, quota_mem=4 * G)
    base = server_defaults(config)
    assert base == Limits(
        sessions=3,
        kernels=7,
        cpu=2.5,
        mem=4 * G,
        gpu=None,
        streams=config.quota_streams,
        max_priority=0,
        groups=("default",),
    )


def test_user_values_override_defaults_and_null_keeps_the_default() -> None:
    base = server_defaults(ServerConfig(quota_sessions=3))
    mine = effective(base, {"sessions": 10, "cpu": None, "groups": ["a", "b"], "junk": 1}, False)
    assert mine.sessions == 10
    assert mine.cpu is None and mine.kernels == base.kernels
    assert mine.groups == ["a", "b"]
    assert effective(base, {}, False) == base
    # admins: no limits but on streams (which count theirs too)
    assert effective(base, {"sessions": 0}, True) == Limits(streams=base.streams)
    assert effective(base, {"streams": 3}, True) == Limits(streams=3)


def test_each_limit_names_its_field_and_value() -> None:
    limits = Limits(sessions=2, kernels=4, cpu=2, mem=4 * G, gpu=1, max_priority=0)
    assert check(limits, Usage(), ask()) is None
    r = check(limits, Usage.of([(1, 1, G, 0), (1, 1, G, 0)]), ask())
    assert r is not None and r.field is None and "limit is 2 (sessions)" in r.message
    r = check(limits, Usage(), ask(size=5, cpu=0.1, mem=16 * 1024**2))
    assert r is not None and r.field == "cluster_size" and "limit of 4 (kernels)" in r.message
    r = check(limits, Usage.of([(1, 1.5, G, 0)]), ask(cpu=1))
    assert r is not None and r.field == "resources" and "limit of 2 (cpu)" in r.message
    r = check(limits, Usage(), ask(size=2, mem=3 * G))
    assert r is not None and r.field == "resources" and "limit of 4g (mem)" in r.message
    r = check(limits, Usage(), ask(size=2, cpu=0.5, gpu=1))
    assert r is not None and r.field == "resources" and "limit of 1 (gpu)" in r.message
    r = check(limits, Usage(), ask(priority=1))
    assert r is not None and r.field == "priority" and "limit of 0" in r.message
    r = check(Limits(groups=("default",)), Usage(), ask(group="gpu"))
    assert r is not None and r.field == "group" and "'gpu'" in r.message


def test_fractional_cores_fit_exactly() -> None:
    used = Usage.of([(1, 0.1, G, 0), (1, 0.2, G, 0)])
    assert check(Limits(cpu=0.6), used, ask(cpu=0.3)) is None


def test_admins_and_unset_limits_have_none() -> None:
    huge = ask(size=64, cpu=1024, mem=1024 * G, gpu=64, priority=100, group="any")
    assert check(UNLIMITED, Usage.of([(64, 1024, 1024 * G, 64)] * 100), huge) is None


sizes = st.integers(min_value=1, max_value=8)
cores = st.sampled_from([0.1, 0.25, 0.5, 1.0, 2.0])
mems = st.sampled_from([16 * 1024**2, 256 * 1024**2, G])
gpus = st.integers(min_value=0, max_value=2)
sessions = st.lists(st.tuples(sizes, cores, mems, gpus), max_size=6)
maybe = st.none() | st.integers(min_value=0, max_value=40)


@given(
    held=sessions,
    new=st.tuples(sizes, cores, mems, gpus),
    n=maybe,
    k=maybe,
    c=st.none() | st.sampled_from([0.0, 0.5, 1.0, 2.5, 8.0, 20.0]),
    m=st.none() | st.integers(min_value=0, max_value=16).map(lambda x: x * G),
    g=maybe,
)
def test_admission_refuses_exactly_what_goes_over_a_limit(
    held: list[tuple[int, float, int, int]],
    new: tuple[int, float, int, int],
    n: int | None,
    k: int | None,
    c: float | None,
    m: int | None,
    g: int | None,
) -> None:
    limits = Limits(sessions=n, kernels=k, cpu=c, mem=m, gpu=g)
    used = Usage.of(held)
    size, cpu, mem, gpu = new
    after = Usage.of([*held, new])
    over = (
        (n is not None and len(held) + 1 > n)
        or (k is not None and after.kernels > k)
        or (c is not None and round(after.cpu, 6) > c)
        or (m is not None and after.mem > m)
        or (g is not None and after.gpu > g)
    )
    refusal = check(limits, used, ask(size, cpu, mem, gpu))
    assert (refusal is not None) == over
    if refusal is not None:
        assert refusal.field in (None, "cluster_size", "resources")


@given(held=sessions)
def test_usage_sums_kernels_times_size(held: list[tuple[int, float, int, int]]) -> None:
    u = Usage.of(held)
    assert u.sessions == len(held)
    assert u.kernels == sum(s for s, *_ in held)
    assert u.mem == sum(s * m for s, _, m, _ in held)
    assert u.gpu == sum(s * g for s, _, _, g in held)
    assert u.cpu == pytest.approx(sum(s * c for s, c, _, _ in held))


# -- saved logs are capped to their last bytes (troupe.manager.logs.tail) -----------------
def test_tail_keeps_the_last_whole_lines() -> None:
    text = "".join(f"line {i}\n" for i in range(100))
    assert tail(text, 10**6) == text
    assert tail(text, 0) == ""
    cut = tail(text, 20)
    assert cut == "line 98\nline 99\n"
    assert tail("x" * 100, 10) == "x" * 10  # one long line: its end


@given(st.text(max_size=300), st.integers(min_value=0, max_value=400))
def test_tail_is_a_suffix_within_the_limit(text: str, limit: int) -> None:
    cut = tail(text, limit)
    assert len(cut.encode()) <= limit
    assert text.endswith(cut)
