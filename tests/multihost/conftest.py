"""One multi-host test bed (scripts/testbed.sh) for all of ``tests/multihost``: brought up by
the first module that needs it, removed after the package's last test (also when a test fails
or the run is interrupted). Each module starts from a clean state: the bed checked and repaired
before it (``up`` is a no-op on a healthy bed and rebuilds a broken one), every agent running
and ALIVE (one a test killed is started again), and every session's containers and networks
gone from every host after it. The modules on the bed with images share one manager and its
agents (none of them changes the manager's settings); the registry module has its own.

Order: the registry module first (its hosts must pull, so it needs a bed without copied
images; the next module's ``up`` loads them), ``test_testbed`` last (its last test kills a
node's dockerd and removes the bed)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import BASE_IMAGE, DOCKER, TORCH_IMAGE
from tests.multihost.bed import (
    NEIGH,
    SHARED,
    Before,
    Cluster,
    clean_hosts,
    ensure_bed,
    host_containers,
    start_cluster,
    stop_shared,
    tb,
)

HERE = Path(__file__).parent
FIRST, LAST = "test_multihost_registry", "test_testbed"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Puts this package's modules in the order the shared bed needs (see above)."""
    at = [i for i, item in enumerate(items) if item.path.parent == HERE]

    def rank(item: pytest.Item) -> int:
        return {FIRST: 0, LAST: 2}.get(item.path.stem, 1)

    for i, item in zip(at, sorted((items[i] for i in at), key=rank), strict=True):
        items[i] = item


@pytest.fixture(scope="package")
def testbed() -> Iterator[Before]:
    """The run's bed: nothing is built here (each module's ``ensure_bed`` does); removed at
    the end whatever state it is in."""
    if os.geteuid() != 0:
        pytest.fail("the multi-host test bed needs root")
    img = subprocess.run([DOCKER, "image", "inspect", BASE_IMAGE], capture_output=True)
    if img.returncode != 0:
        pytest.fail(f"image {BASE_IMAGE} missing on the host engine; run scripts/setup.sh first")
    before = Before(host_containers(), {f: int(Path(f).read_text()) for f in NEIGH})
    try:
        yield before
    finally:
        try:
            stop_shared()
        finally:
            r = tb("down", TB_FAST="1")
        print(f"final TB_FAST=1 down: {r.stdout}{r.stderr}")


@pytest.fixture(scope="module")
def cluster(
    testbed: Before, tmp_path_factory: pytest.TempPathFactory, docker_engine: None
) -> Iterator[Cluster]:
    """The manager and agents on the bed with troupe/base and troupe/pytorch, shared by the
    modules that use them (none changes the manager's settings): started by the first, each
    agent a module's test killed started again (and all ALIVE) before the next."""
    ensure_bed(f"{BASE_IMAGE} {TORCH_IMAGE}")
    cl = SHARED.get("cluster")
    if cl is not None and cl.server.proc.poll() is None:
        cl.revive()
    else:
        stop_shared()
        cl = SHARED["cluster"] = start_cluster(tmp_path_factory.mktemp("multihost"))
    try:
        yield cl
    finally:
        try:
            cl.destroy_sessions()
        finally:
            clean_hosts()
