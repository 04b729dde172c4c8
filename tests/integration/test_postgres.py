"""The same manager code on PostgreSQL (asyncpg) instead of the embedded SQLite.

Starts a throw-away PostgreSQL cluster (Debian's postgresql package, installed by
scripts/setup.sh) on 127.0.0.1 as user postgres, runs a session through it, removes it all.
"""

from __future__ import annotations

import glob
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import (
    BASE_IMAGE,
    free_port,
    remove_leftovers,
    start_server,
    stop_server,
)
from troupe.api.models import Resources, SessionCreate

pytestmark = pytest.mark.docker


def pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        pytest.fail("PostgreSQL server binaries missing; run scripts/setup.sh")
    return found[-1]


def as_postgres(*cmd: str) -> None:
    subprocess.run(
        ["runuser", "-u", "postgres", "--", *cmd], check=True, capture_output=True, timeout=120
    )


@pytest.fixture
def postgres_url() -> Iterator[str]:
    root = Path(tempfile.mkdtemp(prefix="troupe-test-pg-"))
    shutil.chown(root, "postgres", "postgres")
    data, port = root / "data", free_port()
    try:
        as_postgres(pg_bin("initdb"), "-D", str(data), "-A", "trust", "-U", "troupe")
        as_postgres(
            pg_bin("pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(root / "log"),
            "-w",
            "-o",
            f"-k {root} -p {port} -c listen_addresses=127.0.0.1",
            "start",
        )
        as_postgres(
            pg_bin("createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "troupe", "troupe"
        )
        yield f"postgresql+asyncpg://troupe@127.0.0.1:{port}/troupe"
    finally:
        if (data / "postmaster.pid").exists():
            as_postgres(pg_bin("pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


def test_sessions_on_postgresql(tmp_path: Path, postgres_url: str, docker_engine: None) -> None:
    srv = start_server(tmp_path, "--db-url", postgres_url)
    ids: set[str] = set()
    try:
        c = srv.client()
        c.create_folder("pgdata")
        c.create_session(
            SessionCreate(
                name="pg",
                image=BASE_IMAGE,
                cluster_size=2,
                resources=Resources(cpu=0.25, mem=256 * 1024**2),
            )
        )
        info = c.wait_session("pg", timeout=120)
        ids.add(info.id)
        assert info.status == "RUNNING", info.status_info
        assert info.created_at.tzinfo is not None
        assert c.exec("pg", ["ssh", "sub1", "hostname"]) == (0, "sub1\n")
        assert c.destroy_session("pg").status == "TERMINATED"
        assert [s.name for s in c.list_sessions(all=True)] == ["pg"]
        # the manager restarts on the same database and finds everything again
        stop_server(srv)
        srv = start_server(tmp_path, "--db-url", postgres_url)
        c = srv.client()
        assert c.get_session("pg").status == "TERMINATED"
        # its event list (written, and trimmed, in the status changes' transactions)
        statuses = [e.status for e in c.session_events("pg") if e.kind == "status"]
        assert statuses[0] == "PENDING" and statuses[-1] == "TERMINATED", statuses
        assert [f.name for f in c.list_folders()] == ["pgdata"]
    finally:
        stop_server(srv)
        remove_leftovers(ids)
