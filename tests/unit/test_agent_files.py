"""The agent's side of a kernel's files: the archive and the readiness FIFO it mounts, and the
"peers" line it writes once every kernel of the session started (agent/files.py)."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest
from tests.unit.test_kernel_specs import specs

from troupe.agent import files
from troupe.agent.kernel import EVENTS_MOUNT, REPORTS_MOUNT, KernelFiles, container_config


@pytest.fixture
def files_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "agent"
    monkeypatch.setattr(files, "FILES_DIR", d)
    return d


def test_the_fifo_takes_the_place_of_the_kernels_own(files_dir: Path) -> None:
    spec = specs()[0]
    made = files.kernel_files(spec)
    assert made is not None and made.events is not None
    assert made.tar == files_dir / f"{spec.container_name}.tar"
    assert stat.S_ISFIFO(made.events.stat().st_mode)
    assert stat.S_IMODE(made.events.stat().st_mode) == 0o600
    with tarfile.open(fileobj=io.BytesIO(made.tar.read_bytes())) as tar:
        names = tar.getnames()
    assert "run/troupe/events" not in names  # (mounted there instead)
    assert "run/troupe/agent-signals" in names  # ready.sh: wait for "peers"
    files.remove_files(spec.session_id)
    assert list(files_dir.iterdir()) == []


def test_without_a_fifo_the_kernel_makes_its_own(
    files_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(path: object, mode: int = 0o666) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "mkfifo", refuse)
    made = files.kernel_files(specs()[0])
    assert made is not None and made.events is None
    with tarfile.open(fileobj=io.BytesIO(made.tar.read_bytes())) as tar:
        names = tar.getnames()
    assert "run/troupe/events" in names and "run/troupe/agent-signals" not in names


def test_peers_started_leaves_the_line_until_the_end(files_dir: Path) -> None:
    """The kernel may open its FIFO only later: the line waits in it while the agent holds it
    open; a FIFO that is gone is skipped."""
    spec = specs()[0]
    made = files.kernel_files(spec)
    assert made is not None and made.events is not None
    with files.peers_started([made.events, files_dir / "gone.events"]):
        fd = os.open(made.events, os.O_RDONLY | os.O_NONBLOCK)
        try:
            assert os.read(fd, 100) == b"peers\n"
        finally:
            os.close(fd)


def test_the_fifos_are_mounted_where_ready_sh_waits_and_the_supervisor_reports() -> None:
    x = Path("/run/x")
    made = KernelFiles(x / "k.tar", x / "k.events", x / "k.exits")
    binds = container_config(specs()[1], "/runner", "/srv", files=made)["HostConfig"]["Binds"]
    assert f"/run/x/k.events:{EVENTS_MOUNT}:ro" in binds
    assert f"/run/x/k.exits:{REPORTS_MOUNT}:ro" in binds
    assert (EVENTS_MOUNT, REPORTS_MOUNT) == ("/run/troupe/events", "/run/troupe/exits")
    plain = container_config(specs()[1], "/runner", "/srv", files=KernelFiles(x / "k.tar", None))
    mounts = (EVENTS_MOUNT, REPORTS_MOUNT)
    assert not any(m in b for b in plain["HostConfig"]["Binds"] for m in mounts)


def test_a_restart_in_place_rewrites_the_same_file_and_keeps_the_fifo(files_dir: Path) -> None:
    """The running container's bind mounts hold the archive's and the FIFO's inodes: the new
    files (the next attempt's kernel.conf) must be seen through them."""
    spec = specs()[0]
    made = files.kernel_files(spec)
    assert made is not None and made.events is not None
    tar_inode, fifo_inode = made.tar.stat().st_ino, made.events.stat().st_ino
    conf = next(f for f in spec.files if f.path.endswith("/kernel.conf"))
    again = spec.model_copy(
        update={
            "files": [
                f.model_copy(update={"content": "export TROUPE_RESTART_COUNT=1\n"})
                if f is conf
                else f
                for f in spec.files
            ]
        }
    )
    rewritten = files.rewrite_files(again)
    assert rewritten == made
    assert (made.tar.stat().st_ino, made.events.stat().st_ino) == (tar_inode, fifo_inode)
    with tarfile.open(fileobj=io.BytesIO(made.tar.read_bytes())) as tar:
        data = tar.extractfile(conf.path.lstrip("/"))
        assert data is not None and data.read() == b"export TROUPE_RESTART_COUNT=1\n"
        names = tar.getnames()
    assert "run/troupe/events" not in names and "run/troupe/agent-signals" in names
    # no archive of it here: the engine's upload is used instead
    made.tar.unlink()
    assert files.rewrite_files(again) is None
