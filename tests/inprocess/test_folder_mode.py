"""Finding N10 (docs/reliability.md): a data folder's directory is mode 0700 whatever the umask
(it was 0755); the agent makes the folders it mounts the same way."""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path

from tests.inprocess.conftest import Harness
from troupe.agent.kernel import new_folder


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


async def test_a_new_folder_is_private_whatever_the_umask(manager: Harness, tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        r = await manager.client.post("/folders", json={"name": "d1"})
        assert r.status_code == 201, r.text
        made_by_agent = tmp_path / "agent-folders" / str(uuid.uuid4())
        new_folder(made_by_agent)
    finally:
        os.umask(old)
    assert mode(manager.config.folders_dir / r.json()["id"]) == 0o700
    assert mode(made_by_agent) == 0o700
    made_by_agent.chmod(0o750)  # one that exists (a kernel's work may own it) is left alone
    new_folder(made_by_agent)
    assert mode(made_by_agent) == 0o750
