"""Leak and load on the real engine (issue "Hardening"): many create/destroy cycles, failures
among them, leave nothing of their sessions on the engine; many concurrent creates beyond
the capacity never over-commit an agent and all end as asked.

Each test runs its own server (its sessions alone are counted), small and bounded in time.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import random
import shutil
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    BASE_IMAGE,
    Server,
    docker,
    remove_leftovers,
    session_ids,
    start_server,
    stop_server,
)
from troupe.api.models import Mount, Resources, SessionCreate, SessionInfo
from troupe.client.sdk import Client

pytestmark = pytest.mark.docker
ALLOCATED = {"SCHEDULED", "PREPARING", "RUNNING", "TERMINATING"}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def labelled_sessions() -> dict[str, set[str]]:
    """Session ids found on the engine's containers, networks and volumes (by their label)."""
    fmt = '{{.Label "troupe.session"}}'
    out = {}
    for kind, args in (
        ("containers", ["ps", "-a"]),
        ("networks", ["network", "ls"]),
        ("volumes", ["volume", "ls"]),
    ):
        r = docker(*args, "--filter", "label=troupe.session", "--format", fmt)
        out[kind] = set(r.stdout.split())
    return out


def free_pool() -> str:
    """A /20 of 10.91.0.0/16 that no network on the engine uses: a pool for our server alone
    (other test runs' servers share the test pool and may race for its first free subnet)."""
    taken = []
    for net in docker("network", "ls", "-q").stdout.split():
        r = docker(
            "network",
            "inspect",
            "-f",
            "{{range .IPAM.Config}}{{.Subnet}} {{end}}",
            net,
            check=False,
        )
        taken += [ipaddress.IPv4Network(x) for x in r.stdout.split() if "." in x]
    blocks = list(ipaddress.IPv4Network("10.91.0.0/16").subnets(new_prefix=20))
    random.shuffle(blocks)
    return str(next(b for b in blocks if not any(b.overlaps(t) for t in taken)))


def leftovers(session_id: str) -> dict[str, list[str]]:
    label = f"label=troupe.session={session_id}"
    return {
        "containers": docker("ps", "-aq", "--filter", label).stdout.split(),
        "networks": docker("network", "ls", "-q", "--filter", label).stdout.split(),
        "volumes": docker("volume", "ls", "-q", "--filter", label).stdout.split(),
    }


@pytest.fixture
def own_server(tmp_path: Path, docker_engine: None) -> Iterator[Server]:
    srv = start_server(
        tmp_path,
        *("--cpu", "2", "--mem", "4g", "--quota-streams", "64", "--subnet-pool", free_pool()),
    )
    try:
        yield srv
    finally:
        with contextlib.suppress(Exception):
            c = srv.client()
            for info in c.list_sessions():
                c.destroy_session(info.id)
        stop_server(srv)
        remove_leftovers(session_ids(srv))


# -- leaks -------------------------------------------------------------------------------------
CYCLES = 50
SMALL = Resources(cpu=0.25, mem=64 * 1024**2)


def kind_of(i: int) -> str:
    """What cycle ``i`` (1-based) does: failures injected among plain successes."""
    if i % 10 == 0:
        return "bad-mount"  # the folder's directory is a link out of the data root
    if i % 7 == 0:
        return "destroy-preparing"
    if i % 5 == 0:
        return "bad-command"  # batch, startup command not found
    if i % 9 == 0:
        return "kernel-killed"
    return "ok"


def destroy_while_preparing(c: Client, name: str) -> SessionInfo:
    """Destroys the session once its kernels are created, while it waits for readiness.

    (Not earlier: a destroy that cancels an engine call in flight leaves what that call then
    creates, see test_faults.py::test_destroy_during_an_engine_call_leaves_nothing.)"""
    deadline = time.monotonic() + 60
    while True:
        info = c.get_session(name)
        if info.status != "PREPARING" and info.status in ALLOCATED - {"SCHEDULED"}:
            break  # RUNNING already (or TERMINATING): destroyed a moment too late
        if info.status == "PREPARING" and all(k.status == "RUNNING" for k in info.kernels):
            break
        assert not info.status.is_final, info.status_info
        assert time.monotonic() < deadline, f"{name} never began preparing"
        time.sleep(0.02)
    return c.destroy_session(name)


def cycle(srv: Server, i: int, bad_folder: str) -> tuple[str, SessionInfo]:
    kind = kind_of(i)
    name = f"leak{i:02d}-{uuid.uuid4().hex[:4]}"
    extra: dict[str, Any] = {}
    if kind == "bad-mount":
        extra["mounts"] = [Mount(folder=bad_folder)]
    if kind == "bad-command":
        extra.update(type="batch", startup_command="no-such-command-troupe")
    with Client(srv.url, srv.key) as c:
        c.create_session(
            SessionCreate(name=name, image=BASE_IMAGE, cluster_size=2, resources=SMALL, **extra)
        )
        if kind == "destroy-preparing":
            return kind, destroy_while_preparing(c, name)
        if kind in ("bad-mount", "bad-command"):
            return kind, c.wait_session(name, until="final", timeout=120)
        info = c.wait_session(name, timeout=120)
        assert info.status == "RUNNING", (name, info.status_info)
        if kind == "kernel-killed":
            sub1 = next(k for k in info.kernels if k.hostname == "sub1")
            assert sub1.container_id
            docker("kill", sub1.container_id)
            return kind, c.wait_session(name, until="final", timeout=60)
        assert c.exec(name, ["hostname"], kernel="sub1") == (0, "sub1\n")
        return kind, c.destroy_session(name)


def check_ending(kind: str, info: SessionInfo) -> None:
    si = info.status_info
    if kind in ("ok", "destroy-preparing"):
        assert (info.status, si) == ("TERMINATED", {"reason": "destroyed by user"}), si
    elif kind == "bad-command":
        assert (info.status, info.exit_code) == ("TERMINATED", 127), si
        assert si == {"reason": "batch command finished", "exit_code": 127}
    elif kind == "bad-mount":
        assert info.status == "ERROR", si
        assert si["reason"] == "failed while creating kernels", si
        assert "outside the data root" in si["message"], si
    else:
        assert (info.status, si["reason"], si["kernel"]) == ("ERROR", "kernel exited", "sub1")
    assert all(k.status == "TERMINATED" for k in info.kernels), info.kernels


def test_create_destroy_cycles_leave_nothing(own_server: Server) -> None:
    """50 cycles of a 2-kernel session, 4 at a time, failures injected: every session ends
    as its kind says and nothing labelled with any of them remains on the engine."""
    srv = own_server
    c = srv.client()
    assert not (
        json.loads(docker("image", "inspect", "-f", "{{json .Config.Volumes}}", BASE_IMAGE).stdout)
    ), "the image declares volumes: anonymous volumes would carry no session label"
    bad = c.create_folder(unique("bad"))
    folder_dir = srv.data_dir / "folders" / bad.id
    shutil.rmtree(folder_dir, ignore_errors=True)
    folder_dir.symlink_to("/tmp", target_is_directory=True)

    def checked_cycle(i: int) -> tuple[str, SessionInfo]:
        kind, info = cycle(srv, i, bad.name)
        check_ending(kind, info)
        # at once: a final session has nothing left (the orphan sweep, every 60 s, would hide
        # a leak from a check at the end only)
        left = leftovers(info.id)
        assert not any(left.values()), (info.name, kind, left)
        return kind, info

    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(checked_cycle, range(1, CYCLES + 1)))
    elapsed = time.monotonic() - started

    kinds = Counter(kind for kind, _ in results)
    assert kinds == {
        "ok": 30,
        "destroy-preparing": 7,
        "bad-mount": 5,
        "bad-command": 4,
        "kernel-killed": 4,
    }, kinds
    # destroyed while preparing (most, at least): they never reached RUNNING
    caught = [i for k, i in results if k == "destroy-preparing" and "RUNNING" not in i.timeline]
    assert caught, "no session was destroyed while PREPARING"

    ids = {info.id for _, info in results}
    assert ids == session_ids(srv)
    found = labelled_sessions()
    left = {kind: sorted(ids & seen) for kind, seen in found.items()}
    assert left == {"containers": [], "networks": [], "volumes": []}, left
    agent = c.list_agents()[0]
    assert (agent.cpu_free, agent.mem_free, agent.kernels) == (agent.cpu, agent.mem, 0)
    assert c.list_sessions() == []
    print(f"{CYCLES} cycles in {elapsed:.0f} s: {dict(kinds)}, {len(caught)} destroyed PREPARING")
    assert elapsed < 240


# -- load --------------------------------------------------------------------------------------
LOAD = 30
PER_KERNEL = Resources(cpu=0.5, mem=256 * 1024**2)
CAPACITY_CPU = 2.0
MAX_PENDING = 60.0


class Watch:
    """Samples, in two threads until stopped, what the API and the engine say is used."""

    def __init__(self, srv: Server, ours: set[str]) -> None:
        self.srv, self.ours = srv, ours
        self.stop = threading.Event()
        self.violations: list[str] = []
        self.samples: Counter[str] = Counter()
        self.peak_cpu = 0.0
        self.peak_containers = 0
        self._threads = [
            threading.Thread(target=self._api, daemon=True),
            threading.Thread(target=self._engine, daemon=True),
        ]

    def __enter__(self) -> Watch:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self._threads:
            t.join(30)

    def _api(self) -> None:
        with Client(self.srv.url, self.srv.key) as c:
            while not self.stop.is_set():
                for a in c.list_agents():
                    if a.cpu_free < -1e-9 or a.mem_free < 0:
                        self.violations.append(
                            f"agent {a.name}: {a.cpu_free} cpu, {a.mem_free} mem"
                        )
                used = sum(
                    s.resources.cpu * s.cluster_size
                    for s in c.list_sessions(all=True)
                    if s.status in ALLOCATED
                )
                if used > CAPACITY_CPU + 1e-9:
                    self.violations.append(f"sessions hold {used} cpu")
                self.peak_cpu = max(self.peak_cpu, used)
                self.samples["api"] += 1
                time.sleep(0.1)

    def _engine(self) -> None:
        fmt = (
            '{{index .Config.Labels "troupe.session"}} {{.State.Running}} {{.HostConfig.NanoCpus}}'
            " {{.HostConfig.Memory}} {{.HostConfig.MemorySwap}}"
        )
        while not self.stop.is_set():
            ids = docker("ps", "-q", "--filter", "label=troupe.session").stdout.split()
            rows = []
            if ids:  # (a container may go between the two calls: it is then not listed)
                out = docker("inspect", "-f", fmt, *ids, check=False).stdout
                rows = [line.split() for line in out.splitlines() if line.strip()]
            running = [r for r in rows if r[0] in self.ours and r[1] == "true"]
            for sid, _, cpus, mem, swap in running:
                if (int(cpus), int(mem), int(swap)) != (5 * 10**8, PER_KERNEL.mem, PER_KERNEL.mem):
                    self.violations.append(f"container of {sid}: {cpus} cpus, {mem}/{swap} mem")
            total = sum(int(r[2]) for r in running)
            if total > CAPACITY_CPU * 1e9:
                self.violations.append(f"running kernels take {total / 1e9} cpu")
            self.peak_containers = max(self.peak_containers, len(running))
            self.samples["engine"] += 1
            time.sleep(0.2)


def test_concurrent_creates_beyond_capacity_never_overcommit(own_server: Server) -> None:
    """30 sessions of 2 x 0.5 cpu at once on an agent of 2 cpu (room for 2 sessions), each
    destroyed once RUNNING: the agent is never over-committed (the API's free resources, the
    sessions holding resources, the running containers' limits), and every session ends
    TERMINATED, or CANCELLED if it waited longer than its max_pending_seconds."""
    srv = own_server
    ours: set[str] = set()

    def one(i: int) -> tuple[SessionInfo, bool]:
        name = f"load{i:02d}-{uuid.uuid4().hex[:4]}"
        with Client(srv.url, srv.key) as c:
            info = c.create_session(
                SessionCreate(
                    name=name,
                    image=BASE_IMAGE,
                    cluster_size=2,
                    resources=PER_KERNEL,
                    max_pending_seconds=MAX_PENDING,
                )
            )
            ours.add(info.id)
            info = c.wait_session(name, timeout=MAX_PENDING + 90)
            ran = info.status == "RUNNING"
            if ran:
                info = c.destroy_session(name)
            return info, ran

    started = time.monotonic()
    with Watch(srv, ours) as watch, ThreadPoolExecutor(LOAD) as pool:
        results = list(pool.map(one, range(LOAD)))
    elapsed = time.monotonic() - started

    assert watch.violations == [], watch.violations[:10]
    assert watch.samples["api"] > 20 and watch.samples["engine"] > 10, watch.samples
    assert watch.peak_cpu == CAPACITY_CPU and watch.peak_containers <= 4
    ended: Counter[str] = Counter()
    for info, ran in results:
        ended[info.status] += 1
        if ran:
            assert info.status == "TERMINATED", info.status_info
            assert info.status_info == {"reason": "destroyed by user"}
            kernels = {k.hostname: k for k in info.kernels}
            assert set(kernels) == {"main1", "sub1"}
        else:
            assert info.status == "CANCELLED", info.status_info
            assert info.status_info["reason"] == (
                f"pending longer than max_pending_seconds ({MAX_PENDING:g} s)"
            ), info.status_info
            assert "SCHEDULED" not in info.timeline
    assert ended["TERMINATED"] >= 2, ended
    left = {kind: sorted(ours & seen) for kind, seen in labelled_sessions().items()}
    assert left == {"containers": [], "networks": [], "volumes": []}, left
    agent = srv.client().list_agents()[0]
    assert (agent.cpu_free, agent.mem_free, agent.kernels) == (agent.cpu, agent.mem, 0)
    print(
        f"{LOAD} sessions in {elapsed:.0f} s: {dict(ended)}; peak {watch.peak_cpu} cpu held,"
        f" {watch.peak_containers} kernels running; samples {dict(watch.samples)}"
    )
    assert elapsed < 240
