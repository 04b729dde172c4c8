"""``troupe agent list`` shows free/total; a LOST agent's free is unknown, so it reads ``?``
rather than the API's 0 (nothing can be placed there), which would say the agent is full."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from troupe.api.models import AgentInfo, GpuInfo
from troupe.main import app


def agent(name: str, status: str, free: int) -> AgentInfo:
    return AgentInfo(
        id=name, name=name, group="default", status=status, cpu=8, mem=16 * 1024**3, gpu=1,
        cpu_free=free, mem_free=free * 1024**3, gpu_free=min(free, 1), kernels=0,
        gpus=[GpuInfo(index=0, uuid="GPU-0", model="H100")],
    )  # fmt: skip


def test_a_lost_agents_free_is_unknown(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from troupe.client import sdk

    def agents(*args: Any) -> list[AgentInfo]:
        return [agent("up", "ALIVE", 6), agent("gone", "LOST", 0)]

    monkeypatch.setattr(sdk.Client, "list_agents", agents)
    monkeypatch.setenv("TROUPE_API_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("TROUPE_API_KEY", "k1")
    monkeypatch.setenv("TROUPE_CONFIG_DIR", str(tmp_path))
    r = CliRunner().invoke(app, ["agent", "list"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    rows = {line.split()[0]: line.split() for line in r.output.splitlines()[1:]}
    assert rows["up"][3:7] == ["6/8", "6g/16g", "1/1", "H100"]
    assert rows["gone"][2:7] == ["LOST", "?/8", "?/16g", "?/1", "H100"]
