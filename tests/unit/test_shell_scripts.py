"""The set-up and demo scripts run under ``set -o pipefail``: there, a pipeline whose reader
stops early (``head``, ``grep -q``) fails now and then, when the writer still writing gets
SIGPIPE (status 141), and ``set -e`` ends the script (set-up ended so, in ``bash
scripts/demo.sh``). Readers must read to the end: ``sed -n 1p``, ``grep ... >/dev/null``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
EARLY_READER = re.compile(r"\|\s*(head\b|grep\s+(-\w*[qm]\w*)\b)")


PIPEFAIL = sorted(p for p in SCRIPTS.glob("*.sh") if "pipefail" in p.read_text())


@pytest.mark.parametrize("script", PIPEFAIL, ids=lambda p: p.name)
def test_no_pipeline_into_a_reader_that_stops_early(script: Path) -> None:
    lines = [
        f"{script.name}:{n}: {line.strip()}"
        for n, line in enumerate(script.read_text().splitlines(), 1)
        if not line.lstrip().startswith("#") and EARLY_READER.search(line)
    ]
    assert lines == []
