"""``--time-limit``, ``--stop-grace``, ``--idle-timeout`` of ``troupe session create`` and
``troupe session set`` (docs/policies.md): bad durations fail before any request, naming the
field; ``set`` sends what was typed ('none': null)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests.unit.test_cli_errors import Server, one_error_line, server, troupe

__all__ = ["server"]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--time-limit", "soon"], "error: time_limit: must be a duration such as 90s"),
        (["--stop-grace", "-1"], "error: stop_grace: must be a duration such as 90s"),
        (["--idle-timeout", "5s"], "error: idle_timeout: must be at least 10"),
        (
            ["--type", "batch", "--startup-command", "true", "--idle-timeout", "30m"],
            "error: idle_timeout: only interactive sessions have an idle timeout",
        ),
    ],
)
def test_bad_options_fail_before_any_request(
    server: type[Server], args: list[str], line: str
) -> None:
    code, output = troupe("session", "create", "s", "-i", "troupe/base:0.1.0", *args)
    assert code == 2 and one_error_line(code, output).startswith(line), output
    assert server.seen == []


def _session(**times: Any) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {
        "id": "0c4d1f0e-8a3b-4c52-9e0a-2b1f5d6c7e8f",
        "name": "dev",
        "owner": "admin",
        "status": "RUNNING",
        "type": "interactive",
        "image": "troupe/base:0.1.0",
        "cluster_size": 1,
        "cluster_mode": "single-node",
        "resources": {"cpu": 0.5, "mem": 512 * 1024**2, "gpu": 0},
        "mounts": [],
        "dist_env": "default",
        "group": "default",
        "priority": 0,
        "uid": 1000,
        "gid": 1000,
        "isolated_network": False,
        "created_at": (now - timedelta(hours=1)).isoformat(),
        "started_at": (now - timedelta(hours=1)).isoformat(),
        **times,
    }


def test_set_sends_the_changes(server: type[Server], monkeypatch: pytest.MonkeyPatch) -> None:
    bodies: list[Any] = []

    def patch(self: Server) -> None:
        bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.headers.replace_header("Content-Length", "0")
        self._serve()

    monkeypatch.setattr(Server, "do_PATCH", patch, raising=False)
    now = datetime.now(UTC)
    answer = _session(
        time_limit=10800,
        idle_timeout=1800,
        deadline=(now + timedelta(hours=2, seconds=30)).isoformat(),
        idle_since=(now - timedelta(minutes=12, seconds=5)).isoformat(),
        idle_deadline=(now + timedelta(minutes=17, seconds=55)).isoformat(),
    )
    server.answer = (200, "application/json", json.dumps(answer).encode())
    code, output = troupe("session", "set", "dev", "--time-limit", "3h", "--idle-timeout", "none")
    assert code == 0, output
    assert server.seen == [("PATCH", "/v1/sessions/dev")]
    assert bodies == [{"time_limit": "3h", "idle_timeout": None}]
    assert "time limit: 3 h (stop grace 10 s), reached " in output
    assert "idle reclaim: idle for 12 min, ends in 17 min (after 30 min idle)" in output
    code, output = troupe("session", "info", "dev")
    assert code == 0 and "idle for 12 min, ends in 17 min" in output, output


def test_set_needs_a_change(server: type[Server]) -> None:
    code, output = troupe("session", "set", "dev")
    assert code == 2
    assert one_error_line(code, output) == (
        "error: give --time-limit, --stop-grace or --idle-timeout"
    )
    assert server.seen == []
