"""Every command's and group's ``--help`` renders (``troupe session cp --help`` once crashed
with a Rich ``MarkupError`` on ``[/KERNEL]`` in its help text)."""

from __future__ import annotations

from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from troupe.main import app


def command_paths() -> list[list[str]]:
    """The words of every command and group of ``troupe``, the root's ``[]`` first."""
    paths: list[list[str]] = []

    def walk(command: Any, path: list[str]) -> None:
        paths.append(path)
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            walk(sub, [*path, name])

    walk(get_command(app), [])
    return paths


PATHS = command_paths()


def test_the_walk_finds_the_commands() -> None:
    assert ["session", "cp"] in PATHS and ["user", "limits"] in PATHS and ["agent", "list"] in PATHS


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "troupe")
def test_help_renders(path: list[str]) -> None:
    r = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "100"})
    assert r.exit_code == 0 and r.exception is None, (r.exception, r.output)
    assert "Traceback" not in r.output and "Usage:" in r.output, r.output
