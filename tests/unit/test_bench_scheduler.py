"""bench/scheduler.py loads another revision's scheduler (``--compare``, ``--baseline``) module
by module: a module it does not name cannot be loaded, and then no revision that has it can be
compared (the report's module went missing so once)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

from troupe.manager.scheduler_backlog import schedule

ROOT = Path(__file__).resolve().parents[2]


def bench() -> ModuleType:
    path = ROOT / "bench" / "scheduler.py"
    spec = importlib.util.spec_from_file_location("bench_scheduler", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_bench_names_every_scheduler_module() -> None:
    here = {p.stem for p in (ROOT / "src" / "troupe" / "manager").glob("scheduler*.py")}
    assert set(bench().MODULES) == here


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout"
)
def test_the_bench_loads_the_committed_scheduler_and_it_places_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    b = bench()
    monkeypatch.chdir(ROOT)
    old = b.old_scheduler("HEAD")
    types_module = sys.modules["old_scheduler"]
    requests, agents = b.world(400, 40, mixed=True)
    old_requests = b.convert(requests, types_module.Request, types_module.Part)
    old_agents = b.convert(agents, types_module.AgentState, types_module.Part)
    got = old.schedule(old_requests, old_agents)
    assert got.placements == schedule(requests, agents).placements
    assert got.placements and got.waiting
