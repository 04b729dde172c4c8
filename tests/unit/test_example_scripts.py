"""Launch scripts embed their Python program (kernels do not see the repository): the embedded
copy must be the file next to it, word for word, and the scripts must be valid POSIX sh."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCRIPTS = sorted(EXAMPLES.glob("*/launch*.sh"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_embedded_program_matches_file(script: Path) -> None:
    text = script.read_text()
    embedded = text.split("<<'PY'\n", 1)[1].split("\nPY\n", 1)[0] + "\n"
    programs = {p.read_text() for p in script.parent.glob("*.py")}
    assert embedded in programs


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_posix_sh_syntax(script: Path) -> None:
    assert subprocess.run(["dash", "-n", str(script)]).returncode == 0
