"""The multi-host test bed (scripts/testbed.sh): 3 simulated hosts, one dockerd each, one swarm.

Needs root and the host engine with troupe/base (scripts/setup.sh). The module uses the bed of
all multi-host tests (conftest: removed at the end with ``TB_FAST=1 down``, also when a test
fails) and runs after the other modules: its last test kills a node's dockerd and checks that a
graceful ``down`` still leaves nothing behind.
"""

from __future__ import annotations

import glob
import itertools
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import BASE_IMAGE, DOCKER, ROOT
from tests.multihost.bed import NEIGH, Before, ensure_bed, host_containers, stop_shared

pytestmark = pytest.mark.docker

SCRIPT = ROOT / "scripts" / "testbed.sh"
N = 3
HOST_IP = "10.123.0.1"
NET = "tt-test-net"
#: container name suffix -> node index
KERNELS = {"main1": 1, "sub1": 2, "sub2": 3}
NUL = bytes(1)
NEIGH_SAVED = Path("/run/troupe-tb.neigh")


def node_ip(i: int) -> str:
    return f"10.123.0.{10 + i}"


def sock(i: int) -> str:
    return f"unix:///run/troupe-tb/tt{i}/docker.sock"


def tb(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def nd(i: int, *args: str, check: bool = True, timeout: float = 120) -> str:
    """docker against node i; returns stdout."""
    r = subprocess.run(
        [DOCKER, "-H", sock(i), *args], capture_output=True, text=True, timeout=timeout
    )
    if check and r.returncode != 0:
        raise AssertionError(f"docker -H tt{i} {' '.join(args)}: rc={r.returncode}\n{r.stderr}")
    return r.stdout


def host_docker(*args: str) -> str:
    return subprocess.run(
        [DOCKER, *args], capture_output=True, text=True, check=True, timeout=60
    ).stdout


def pidfile(i: int) -> int:
    return int(Path(f"/run/troupe-tb/tt{i}/docker.pid").read_text().strip())


def leftovers() -> list[str]:
    """Everything the bed may leave behind; empty when it is gone."""
    found: list[str] = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [f"netns {n}" for n in re.findall(r"^(tt\d+)\b", netns, re.M)]
    found += [f"link {n}" for n in os.listdir("/sys/class/net") if n.startswith("tt")]
    me = os.getpid()
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        pid = int(cmdline.split("/")[2])
        try:
            argv = Path(cmdline).read_bytes()
        except OSError:
            continue
        if pid != me and b"/run/troupe-tb/" in argv:
            found.append(f"process {pid}: {argv.replace(NUL, b' ').decode(errors='replace')}")
    found += [f"dir {d}" for d in ("/run/troupe-tb", "/var/lib/troupe-tb") if os.path.exists(d)]
    found += [f"file {NEIGH_SAVED}"] if NEIGH_SAVED.exists() else []
    rules = subprocess.run(["iptables", "-w", "-S"], capture_output=True, text=True).stdout
    found += [f"iptables {r}" for r in rules.splitlines() if "troupe-testbed" in r]
    found += [f"cgroup {d}" for d in glob.glob("/sys/fs/cgroup/*/tt[0-9]*")]
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split()[4] for line in f]
    found += [
        f"mount {m}" for m in mounts if m.startswith(("/run/troupe-tb", "/var/lib/troupe-tb"))
    ]
    return found


@pytest.fixture(scope="module")
def bed(testbed: Before) -> Before:
    """The shared bed with its default images, no agent on it; the host as it was before."""
    stop_shared()
    ensure_bed("troupe/base:0.1.0")  # (the script's default TB_IMAGES)
    return testbed


def test_three_nodes_ready_in_one_swarm(bed: object) -> None:
    lines = nd(1, "node", "ls", "--format", "{{.Hostname}} {{.Status}} {{.ManagerStatus}}")
    rows = sorted(line.split() for line in lines.splitlines())
    assert rows == [["tt1", "Ready", "Leader"], ["tt2", "Ready"], ["tt3", "Ready"]]
    fmt = "{{.Name}} {{.Swarm.LocalNodeState}} {{.Swarm.ControlAvailable}}"
    states = [nd(i, "info", "--format", fmt).split() for i in range(1, N + 1)]
    assert states == [
        ["tt1", "active", "true"],
        ["tt2", "active", "false"],
        ["tt3", "active", "false"],
    ]
    # P4: every engine has its own identity, also apart from the host's
    ids = [nd(i, "info", "--format", "{{.ID}}").strip() for i in range(1, N + 1)]
    ids.append(host_docker("info", "--format", "{{.ID}}").strip())
    assert len(set(ids)) == N + 1
    # P9: image IDs identical to the host's
    host_id = host_docker("image", "inspect", "-f", "{{.Id}}", BASE_IMAGE).strip()
    for i in range(1, N + 1):
        assert nd(i, "image", "inspect", "-f", "{{.Id}}", BASE_IMAGE).strip() == host_id


def test_neighbour_table_limits_raised_while_up(bed: Before) -> None:
    # P15: the nodes share the host's one neighbour table (a 64-kernel session needs 4032)
    for f, least in NEIGH.items():
        assert int(Path(f).read_text()) == max(least, bed.neigh[f])


def test_status_env_and_exec(bed: object) -> None:
    r = tb("status")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "healthy: 3 node(s)" in r.stdout
    assert tb("env", "2").stdout.strip() == "DOCKER_HOST=unix:///run/troupe-tb/tt2/docker.sock"
    assert tb("env").stdout.strip() == "DOCKER_HOST=unix:///run/troupe-tb/tt1/docker.sock"
    # node 2's namespace: its own address, no default route
    r = tb("exec", "2", "ip", "-4", "-o", "addr", "show", "dev", "eth0")
    assert r.returncode == 0 and f" {node_ip(2)}/24 " in r.stdout, r.stdout + r.stderr
    r = tb("exec", "2", "ip", "route", "show", "default")
    assert r.returncode == 0 and r.stdout.strip() == ""
    # a process "on" node 2 reaches a listener of the host (the manager) on 10.123.0.1 ...
    with socket.create_server((HOST_IP, 0)) as srv:
        port = srv.getsockname()[1]
        code = f"import socket; socket.create_connection(('{HOST_IP}', {port}), 3).close()"
        r = tb("exec", "2", sys.executable, "-c", code)
        assert r.returncode == 0, r.stderr
        conn, peer = srv.accept()
        conn.close()
        assert peer[0] == node_ip(2)
    # ... and node 3 over the bridge (P2): swarm's gossip port of node 2
    code = f"import socket; socket.create_connection(('{node_ip(2)}', 7946), 3).close()"
    r = tb("exec", "3", sys.executable, "-c", code)
    assert r.returncode == 0, r.stderr


def test_overlay_spans_nodes_by_name(bed: object) -> None:
    names = {k: f"tt-test-{k}" for k in KERNELS}
    try:
        net_opts = "-d overlay --attachable --subnet 10.220.0.0/24 --label troupe.test=1"
        nd(1, "network", "create", *net_opts.split(), NET)
        for alias, i in KERNELS.items():
            opts = f"--hostname {alias} --network {NET} --network-alias {alias} --init"
            run = ["run", "-d", "--name", names[alias], "--label", "troupe.test=1", *opts.split()]
            nd(i, *run, BASE_IMAGE, "sleep", "300")
        for alias, i in KERNELS.items():
            nd(i, "exec", "-d", names[alias], "python3", "-m", "http.server", "2200")
        ips: dict[str, str] = {}
        for src, dst in itertools.permutations(KERNELS, 2):
            out = nd(KERNELS[src], "exec", names[src], "getent", "hosts", dst)
            ip = out.split()[0]
            assert ip.startswith("10.220.0."), out
            assert ips.setdefault(dst, ip) == ip
        probe = (
            'exec 3<>"/dev/tcp/$0/2200" && printf "GET / HTTP/1.0\\r\\n\\r\\n" >&3 && head -n1 <&3'
        )
        for src, dst in itertools.permutations(KERNELS, 2):
            deadline = time.monotonic() + 20  # the listener may still be starting
            while True:
                cmd = ["exec", names[src], "bash", "-c", probe, dst]
                r = subprocess.run(
                    [DOCKER, "-H", sock(KERNELS[src]), *cmd],
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                if r.returncode == 0 and r.stdout.startswith("HTTP/1.0 200"):
                    break
                assert time.monotonic() < deadline, f"{src} -> {dst}:2200: {r.stdout}{r.stderr}"
                time.sleep(0.2)
    finally:
        for alias, i in KERNELS.items():
            nd(i, "rm", "-f", names[alias], check=False)
        deadline = time.monotonic() + 20
        while NET in nd(1, "network", "ls", "--format", "{{.Name}}", check=False).split():
            nd(1, "network", "rm", NET, check=False)
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)


def test_up_again_is_a_fast_no_op(bed: object) -> None:
    pids = [pidfile(i) for i in range(1, N + 1)]
    t = time.monotonic()
    r = tb("up", str(N))
    took = time.monotonic() - t
    print(f"testbed up {N} (healthy): {took:.2f} s")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "up: already healthy" in r.stdout
    assert took < 5
    assert [pidfile(i) for i in range(1, N + 1)] == pids


def test_down_after_crash_leaves_nothing(bed: Before) -> None:
    # a container without --init on node 2, then node 2's dockerd dies: its shim and the
    # container's processes stay behind (P5, P6)
    nd(2, "run", "-d", "--name", "tt-test-crash", BASE_IMAGE, "sleep", "300")
    os.kill(pidfile(2), 9)
    t = time.monotonic()
    r = tb("down")
    print(f"testbed down (graceful, one dockerd killed): {time.monotonic() - t:.2f} s {r.stdout}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert leftovers() == []
    assert {f: int(Path(f).read_text()) for f in NEIGH} == bed.neigh  # P15: put back
    r = tb("status")
    assert r.returncode == 1 and "no test bed" in r.stdout
    r = tb("down")
    assert r.returncode == 0 and "nothing to remove" in r.stdout
    # the host engine: still no swarm, and its containers untouched (containers that vanished
    # meanwhile belong to other test runs on this engine)
    info = host_docker("info")
    assert "Swarm: inactive" in info
    after = host_containers()
    for cid, state in bed.containers.items():
        if cid in after:
            assert after[cid] == state, f"host container {cid[:12]} changed"
