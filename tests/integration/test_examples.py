"""The runnable examples (examples/*) on real 3-kernel sessions, in every launch mode.

Each example's launch script runs in main1 exactly as a user would run it
(``troupe session exec NAME -- sh -c "$(cat examples/.../launch.sh)"``). The time from
session create to the example's result is recorded as a property and printed at the end
(run pytest with ``-s`` to see it).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from tests.conftest import BASE_IMAGE, IMAGE_VERSION, ROOT, TORCH_IMAGE, Server, docker
from troupe.api.models import Mount, Resources, SessionCreate
from troupe.client.sdk import Client

pytestmark = pytest.mark.docker

MPI_IMAGE = f"troupe/mpi:{IMAGE_VERSION}"
EXAMPLES = ROOT / "examples"
TORCH_RES = Resources(cpu=0.5, mem=1024**3)
MPI_RES = Resources(cpu=0.5, mem=512 * 1024**2)
SMALL = Resources(cpu=0.25, mem=256 * 1024**2)
HOSTS = ["main1", "sub1", "sub2"]
Record = Callable[[str, object], None]  # pytest's record_property


def unique(prefix: str) -> str:
    return f"ex-{prefix}-{uuid.uuid4().hex[:6]}"


def script(path: str) -> str:
    return (EXAMPLES / path).read_text()


def launch(c: Client, name: str, path: str, *args: str) -> tuple[int, str]:
    """Runs an example's launch script in main1, as `troupe session exec` does."""
    return c.exec(name, ["sh", "-c", script(path), "launch", *args])


def create(c: Client, name: str, image: str, resources: Resources, **kw: object) -> float:
    """Creates a 3-kernel session, waits for RUNNING, returns the monotonic time of create."""
    t0 = time.monotonic()
    req = SessionCreate(name=name, image=image, cluster_size=3, resources=resources, **kw)
    c.create_session(req)
    info = c.wait_session(name, until="running", timeout=180)
    assert info.status == "RUNNING", info.status_info
    return t0


def env_of(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


class Timings:
    """Create -> result times of the examples, printed when the module is done."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, float]] = []

    def add(self, record: Record, what: str, t0: float) -> float:
        seconds = round(time.monotonic() - t0, 1)
        self.rows.append((what, seconds))
        record(what, seconds)
        print(f"\n[examples] {what}: {seconds} s")
        return seconds


@pytest.fixture(scope="module")
def timings() -> Iterator[Timings]:
    t = Timings()
    yield t
    if t.rows:
        print("\n[examples] session create -> result:")
        for what, seconds in t.rows:
            print(f"    {what:<56} {seconds:6.1f} s")


@pytest.fixture(scope="module")
def mpi_image(docker_engine: None) -> str:
    """troupe/mpi, built by scripts/build-images.sh (cached: seconds when up to date)."""
    t0 = time.monotonic()
    r = subprocess.run(
        ["bash", str(ROOT / "scripts/build-images.sh"), "mpi"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    size = docker("image", "inspect", "--format", "{{.Size}}", MPI_IMAGE).stdout.strip()
    print(
        f"\n[examples] build-images.sh mpi: {time.monotonic() - t0:.1f} s, "
        f"{MPI_IMAGE} {int(size) / 1e6:.0f} MB"
    )
    return MPI_IMAGE


# ---------------------------------------------------------------------------------------------
# torch-ddp

DDP_LINE = re.compile(
    r"^(?P<host>\S+): rank (?P<rank>\d+)/(?P<world>\d+) steps=\d+"
    r" loss (?P<l0>[\d.]+)->(?P<l1>[\d.]+)"
    r" weights_sum=(?P<sum>\S+) weights_sha256=(?P<sha>[0-9a-f]{16})$",
    re.M,
)
#: weights checksum per launch mode, to show that every mode computes the same model
DDP_RESULTS: dict[str, str] = {}
#: exits 0 and prints "free" when nothing listens on the port (argv[1]) in this kernel
PORT_FREE = (
    "import socket, sys; s = socket.socket();"
    " s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1);"
    " s.bind(('', int(sys.argv[1]))); print('free')"
)


def check_ddp(mode: str, code: int, out: str, reference_sum: float | None = None) -> str:
    """All three ranks report, learned, hold the same weights (= the reference, if given)."""
    assert code == 0, out
    ranks = [m.groupdict() for m in DDP_LINE.finditer(out)]
    assert sorted(r["host"] for r in ranks) == HOSTS, out
    assert sorted(r["rank"] for r in ranks) == ["0", "1", "2"], out
    assert {r["world"] for r in ranks} == {"3"}, out
    if mode != "c10d":  # the c10d rendezvous assigns ranks in order of arrival
        assert all(HOSTS[int(r["rank"])] == r["host"] for r in ranks), out
    sha = ranks[0]["sha"]
    assert {r["sha"] for r in ranks} == {sha}, out
    assert all(float(r["l1"]) < float(r["l0"]) / 5 for r in ranks), out  # it learned
    if reference_sum is not None:
        assert abs(float(ranks[0]["sum"]) - reference_sum) < 1e-4, (out, reference_sum)
    assert f"torch-ddp ({mode}): all 3 ranks agree: weights_sha256={sha}" in out, out
    for other_mode, other_sha in DDP_RESULTS.items():
        assert other_sha == sha, f"{mode} and {other_mode} trained different weights"
    DDP_RESULTS[mode] = sha
    return sha


def test_torch_ddp_static_and_c10d(
    server: Server, timings: Timings, record_property: Record
) -> None:
    c = server.client()
    name = unique("ddp")
    t0 = create(c, name, TORCH_IMAGE, TORCH_RES)
    try:
        timings.add(record_property, "torch session running", t0)
        code, out = launch(c, name, "torch-ddp/launch.sh", "static")
        timings.add(record_property, "torch-ddp static (create -> result)", t0)
        code_ref, ref = c.exec(name, ["python", "/tmp/ddp-train.py", "--reference", "3"])
        assert code_ref == 0, ref
        m = re.search(r"weights_sum=(\S+)", ref)
        assert m, ref
        check_ddp("static", code, out, float(m.group(1)))
        t1 = time.monotonic()
        code, out = launch(c, name, "torch-ddp/launch.sh", "c10d")
        timings.add(record_property, "torch-ddp c10d (launch -> result, same session)", t1)
        check_ddp("c10d", code, out, float(m.group(1)))
        # launch.sh hosts the rendezvous store until every torchrun has returned, so no agent
        # finds it gone on its way out (as when main1's torchrun hosted it and exited first),
        # and stops it when done: port 29400 is free again
        assert "RendezvousConnectionError" not in out and "failed to shutdown" not in out, out
        code, free = c.exec(name, ["python", "-c", PORT_FREE, "29400"])
        assert (code, free) == (0, "free\n"), free
        # torchrun started in each kernel by `troupe session run` (through the agents, not
        # SSH), static rendezvous from the injected variables; train.py is there from above
        t2 = time.monotonic()
        r = server.cli(
            "session",
            "run",
            name,
            "--",
            "sh",
            "-c",
            "OMP_NUM_THREADS=1 torchrun --nnodes=$BACKENDAI_CLUSTER_SIZE"
            " --nproc-per-node=1 --node-rank=$BACKENDAI_CLUSTER_LOCAL_RANK"
            " --master-addr=$MASTER_ADDR --master-port=$MASTER_PORT"
            " /tmp/ddp-train.py",
        )
        timings.add(record_property, "torch-ddp via session run (launch -> result)", t2)
        assert r.returncode == 0, r.stdout + r.stderr
        shas = re.findall(r"^\[(main1|sub1|sub2)\] .*weights_sha256=(\S+)", r.stdout, re.M)
        assert sorted(h for h, _ in shas) == HOSTS, r.stdout
        assert {sha for _, sha in shas} == {DDP_RESULTS["static"]}, r.stdout
    finally:
        c.destroy_session(name)


def test_torch_ddp_per_container(server: Server, timings: Timings, record_property: Record) -> None:
    c = server.client()
    name = unique("ddp-pc")
    t0 = create(c, name, TORCH_IMAGE, TORCH_RES, dist_env="per-container")
    try:
        code, out = c.exec(name, ["sh", "-c", "echo $WORLD_SIZE $RANK $LOCAL_RANK"], kernel="sub2")
        assert out == "3 2 0\n"
        code, out = launch(c, name, "torch-ddp/launch.sh", "per-container")
        timings.add(record_property, "torch-ddp per-container (create -> result)", t0)
        check_ddp("per-container", code, out)
    finally:
        c.destroy_session(name)


# ---------------------------------------------------------------------------------------------
# mpi


def check_mpi(code: int, out: str) -> None:
    assert code == 0, out
    for rank, host in enumerate(HOSTS):
        assert f"{host}: rank {rank}/3 allreduce sum=6 expected=6 OK\n" in out, out
    assert "mpi allreduce: all 3 ranks OK" in out, out


def test_mpi_allreduce(
    server: Server, mpi_image: str, timings: Timings, record_property: Record
) -> None:
    c = server.client()
    name = unique("mpi")
    t0 = create(c, name, mpi_image, MPI_RES)
    try:
        code, out = launch(c, name, "mpi/launch.sh")
        timings.add(record_property, "mpi (create -> result)", t0)
        check_mpi(code, out)
    finally:
        c.destroy_session(name)


def test_mpi_with_uid_gid_and_data_folder(
    server: Server, mpi_image: str, timings: Timings, record_property: Record
) -> None:
    c = server.client()
    folder, name = unique("data"), unique("mpi-uid")
    c.create_folder(folder)
    try:
        t0 = create(c, name, mpi_image, MPI_RES, uid=2345, gid=2345, mounts=[Mount(folder=folder)])
        try:
            code, out = launch(c, name, "mpi/launch.sh")
            timings.add(record_property, "mpi uid 2345 + folder (create -> result)", t0)
            check_mpi(code, out)
            code, out = c.exec(name, ["sh", "-c", "ssh sub1 id -u; ssh sub2 'id -g; id -un'"])
            assert (code, out) == (0, "2345\n2345\nwork\n"), out
            d = f"/home/work/{folder}"
            code, out = c.exec(name, ["sh", "-c", f"echo from-sub1 > {d}/f.txt"], kernel="sub1")
            assert code == 0, out
            code, out = c.exec(name, ["sh", "-c", f"cat {d}/f.txt; stat -c '%u %g' {d}/f.txt"])
            assert (code, out) == (0, "from-sub1\n2345 2345\n"), out
            # the shared folder as the way to hand a program to every rank (no copying)
            prog = script("mpi/allreduce.py")
            code, out = c.exec(name, ["sh", "-c", f"cat > {d}/allreduce.py <<'PY'\n{prog}PY\n"])
            assert code == 0, out
            code, out = c.exec(
                name,
                [
                    "sh",
                    "-c",
                    "mpirun --hostfile /home/config/hostfile -np $BACKENDAI_CLUSTER_SIZE "
                    f"python {d}/allreduce.py",
                ],
            )
            assert code == 0, out
            assert out.count(" allreduce sum=6 expected=6 OK\n") == 3, out
        finally:
            c.destroy_session(name)
    finally:
        c.delete_folder(folder)


# ---------------------------------------------------------------------------------------------
# tf-config and the environment on every entry path


def check_tf_config(code: int, out: str, base: int) -> None:
    assert code == 0, out
    cluster = {"worker": [f"{h}:{base + i}" for i, h in enumerate(HOSTS)]}
    spec = json.dumps(cluster, sort_keys=True, separators=(",", ":"))
    for rank, host in enumerate(HOSTS):
        line = (
            f"{host}: TF_CONFIG task=worker:{rank} address={host}:{base + rank} OK cluster={spec}"
        )
        assert line in out.splitlines(), out
    assert f"tf-config: all 3 kernels OK, one cluster spec: {spec}" in out, out


def test_tf_config(server: Server, timings: Timings, record_property: Record) -> None:
    c = server.client()
    name = unique("tf")
    t0 = create(c, name, BASE_IMAGE, SMALL)
    try:
        code, out = launch(c, name, "tf-config/launch.sh")
        timings.add(record_property, "tf-config (create -> result)", t0)
        check_tf_config(code, out, 29500)
    finally:
        c.destroy_session(name)


#: names a login (sshd, the shell) adds or changes by itself; everything else must be equal
LOGIN_NAMES = {
    "_",
    "SHLVL",
    "OLDPWD",
    "LOGNAME",
    "USER",
    "MAIL",
    "SHELL",
    "TERM",
    "MOTD_SHOWN",
    "SSH_CLIENT",
    "SSH_CONNECTION",
    "SSH_TTY",
}


def test_env_identical_on_every_entry_path_with_user_ports(
    server: Server, timings: Timings, record_property: Record
) -> None:
    c = server.client()
    name = unique("env")
    environ = {"MASTER_PORT": "23456", "BACKENDAI_DIST_MASTER_PORT": "24000"}
    t0 = create(c, name, BASE_IMAGE, SMALL, environ=environ)
    try:
        for rank, host in enumerate(HOSTS):
            code, out = c.exec(name, ["env"], kernel=host)
            assert code == 0, out
            direct = env_of(out)
            assert direct["MASTER_PORT"] == "23456" and direct["MASTER_ADDR"] == "main1"
            assert direct["BACKENDAI_CLUSTER_HOST"] == host
            assert json.loads(direct["TF_CONFIG"]) == {
                "cluster": {"worker": ["main1:24000", "sub1:24001", "sub2:24002"]},
                "task": {"type": "worker", "index": rank},
            }
            for path in (f"ssh {host} env", f"ssh {host} bash -lc env"):
                code, out = c.exec(name, ["sh", "-c", path])
                assert code == 0, out
                other = env_of(out)
                for key in (direct.keys() | other.keys()) - LOGIN_NAMES:
                    assert other.get(key) == direct.get(key), (host, path, key)
        code, out = launch(c, name, "tf-config/launch.sh")
        timings.add(record_property, "env checks + tf-config, ports 24000 (create -> result)", t0)
        check_tf_config(code, out, 24000)
    finally:
        c.destroy_session(name)
