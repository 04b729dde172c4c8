"""Counts in words (api/counted.py): ``1 core``, ``0.5 cores``, ``1 GPU``, wherever a count is
printed: the why-pending report, a quota's refusal, the web UI's agents and session pages."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from troupe.api.counted import counted
from troupe.api.users import Usage
from troupe.manager.quotas import Ask, Limits, check
from troupe.manager.scheduler import AgentState, Request
from troupe.manager.scheduler_backlog import schedule
from troupe.manager.web import views


@pytest.mark.parametrize(
    ("n", "unit", "text"),
    [
        (1, "core", "1 core"),
        (1.0, "core", "1 core"),
        (0.9999999999, "core", "1 core"),
        (0.5, "core", "0.5 cores"),
        (2.0, "core", "2 cores"),
        (0, "GPU", "0 GPUs"),
        (1, "GPU", "1 GPU"),
        (2147483648, "byte", "2147483648 bytes"),
    ],
)
def test_counted(n: float, unit: str, text: str) -> None:
    assert counted(n, unit) == text


def test_why_pending_says_one_core() -> None:
    agent = AgentState(id="a", group="g", cpu=1, mem=8 * 1024**3, gpu=0, cpu_used=0.5)
    req = Request(session_id="s", group="g", mode="single-node", size=1, cpu=1, mem=1024**2)
    [line] = schedule([req], [agent]).waiting["s"]
    assert line == "agent a: cpu: needs 1 core, 0.5 cores free"


def test_a_quota_refusal_says_one_core_and_one_gpu() -> None:
    ask = Ask(group="default", priority=0, size=2, cpu=1.0, mem=1024**3, gpu=1)
    r = check(Limits(cpu=1), Usage(), ask)
    assert r is not None and "resources: 2 x 1 core would make 2 in use" in r.message
    r = check(Limits(gpu=1), Usage(), ask)
    assert r is not None and "resources: 2 x 1 GPU would make 2 in use" in r.message


def test_a_one_kernel_session_on_its_way_up() -> None:
    s: Any = SimpleNamespace(status="PREPARING", kernels=[SimpleNamespace(status="PENDING")])
    assert views.kernels_running(s) == "0/1 kernel running"
