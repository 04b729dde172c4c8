"""A restarted manager recovers its sessions from the database and the engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import (
    BASE_IMAGE,
    docker,
    remove_leftovers,
    session_ids,
    start_server,
    stop_server,
)
from troupe.api.models import Resources, SessionCreate

pytestmark = pytest.mark.docker
SMALL = Resources(cpu=0.25, mem=256 * 1024**2)


def test_restart_keeps_running_sessions_and_fails_lost_ones(
    tmp_path: Path, docker_engine: None
) -> None:
    srv = start_server(tmp_path)
    try:
        c = srv.client()
        for name in ("keep", "lose"):
            c.create_session(
                SessionCreate(name=name, image=BASE_IMAGE, cluster_size=2, resources=SMALL)
            )
        for name in ("keep", "lose"):
            assert c.wait_session(name, timeout=120).status == "RUNNING"
        lose = c.get_session("lose")
        stop_server(srv)
        # while the manager is down, a kernel of "lose" disappears
        sub1 = next(k for k in lose.kernels if k.hostname == "sub1")
        assert sub1.container_id
        docker("rm", "-f", sub1.container_id)

        srv = start_server(tmp_path)
        c = srv.client()
        assert c.get_session("keep").status == "RUNNING"
        code, out = c.exec("keep", ["ssh", "sub1", "hostname"])
        assert (code, out) == (0, "sub1\n")
        lost = c.get_session("lose")
        assert lost.status == "ERROR" and lost.status_info["kernel"] == "sub1"
        left = docker("ps", "-aq", "--filter", f"label=troupe.session={lose.id}").stdout
        assert left.split() == []
        c.destroy_session("keep")
    finally:
        stop_server(srv)
        remove_leftovers(session_ids(srv))
