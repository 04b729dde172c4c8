"""GPUs through a real engine, without a GPU: the request path with stand-ins.

A dedicated dockerd (Docker 20.10) runs in its own network namespace with a stand-in
``nvidia-container-runtime-hook`` (reads stdin, exits 0) on its PATH, so it registers its
``nvidia`` device driver, accepts device requests and sets ``NVIDIA_VISIBLE_DEVICES`` in the
container; a stand-in ``nvidia-smi`` reports two GPUs to the agent. The host's own engine has
no hook: an agent on it offers no GPUs and says why.

Everything made here is named ``trgpu`` (netns, cgroup parent, run and data directories) and
removed afterwards, also on failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import (
    BASE_IMAGE,
    DOCKER,
    Server,
    free_port,
    start_agent,
    start_server,
    stop_server,
)
from troupe.api.models import Resources, SessionCreate, SessionInfo
from troupe.client.sdk import Client

pytestmark = pytest.mark.docker
NAME = "trgpu"
RUN = Path(f"/run/{NAME}")
LIB = Path(f"/var/lib/{NAME}")
SOCK = RUN / "docker.sock"
SMI = RUN / "tools" / "nvidia-smi"
GPUS = ["GPU-00000000-0000-4000-8000-000000000000", "GPU-11111111-1111-4111-8111-111111111111"]
NVIDIA_SMI = "".join(f"{i}, {u}, NVIDIA Stand-in 16GB, 16384\n" for i, u in enumerate(GPUS))
TOKEN = "gpu-agent-token"
ONE = Resources(cpu=0.25, mem=256 * 1024**2, gpu=1)


def sh(*args: str, check: bool = False, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=check, **kw)  # type: ignore[call-overload, no-any-return]


def engine(*args: str) -> subprocess.CompletedProcess[str]:
    return sh(DOCKER, "-H", f"unix://{SOCK}", *args, timeout=120)


def script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def teardown(proc: subprocess.Popen[bytes] | None) -> None:
    """Removes everything this module made, from any state."""
    if SOCK.exists():
        ids = engine("ps", "-aq").stdout.split()
        if ids:
            engine("rm", "-f", *ids)
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for d in Path("/sys/fs/cgroup").glob(f"*/{NAME}"):
        for sub in sorted(d.rglob("*"), key=lambda p: -len(p.parts)):
            if sub.is_dir():
                with contextlib.suppress(OSError):
                    sub.rmdir()
        with contextlib.suppress(OSError):
            d.rmdir()
    for mount in reversed(Path("/proc/self/mounts").read_text().splitlines()):
        point = mount.split()[1]
        if point.startswith((str(RUN) + "/", str(LIB) + "/")) or point in (str(RUN), str(LIB)):
            sh("umount", "-l", point)
    shutil.rmtree(RUN, ignore_errors=True)
    shutil.rmtree(LIB, ignore_errors=True)
    if Path(f"/run/netns/{NAME}").exists():
        sh("ip", "netns", "del", NAME)


@pytest.fixture(scope="module")
def gpu_engine(docker_engine: None) -> Iterator[Path]:
    """A dockerd with the stand-in hook on its PATH; yields the stand-in nvidia-smi."""
    if os.geteuid() != 0:
        pytest.skip("needs root (a network namespace and a dockerd of its own)")
    teardown(None)
    proc = None
    try:
        hook = script(RUN / "bin" / "nvidia-container-runtime-hook", "cat >/dev/null\nexit 0\n")
        smi = script(SMI, f"cat <<'EOF'\n{NVIDIA_SMI}EOF\n")
        (RUN / "exec").mkdir(parents=True)
        LIB.mkdir(parents=True)
        (RUN / "daemon.json").write_text(f'{{"deprecated-key-path": "{LIB}/key.json"}}\n')
        sh("ip", "netns", "add", NAME, check=True)
        sh("ip", "-n", NAME, "link", "set", "lo", "up", check=True)
        env = {**os.environ, "PATH": f"{hook.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        with open(RUN / "dockerd.log", "wb") as log:
            proc = subprocess.Popen(
                [
                    "nsenter",
                    f"--net=/run/netns/{NAME}",
                    "--",
                    "/usr/sbin/dockerd",
                    "--data-root",
                    str(LIB),
                    "--exec-root",
                    str(RUN / "exec"),
                    "--pidfile",
                    str(RUN / "docker.pid"),
                    "--config-file",
                    str(RUN / "daemon.json"),
                    "-H",
                    f"unix://{SOCK}",
                    "--bip",
                    "172.31.250.1/24",
                    "--default-address-pool",
                    "base=172.30.240.0/20,size=24",
                    "--cgroup-parent",
                    f"/{NAME}",
                    "--shutdown-timeout",
                    "3",
                ],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while not (SOCK.exists() and engine("version").returncode == 0):
            assert proc.poll() is None, (RUN / "dockerd.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "dockerd did not answer"
            time.sleep(0.2)
        save = subprocess.Popen([DOCKER, "save", BASE_IMAGE], stdout=subprocess.PIPE)
        load = sh(DOCKER, "-H", f"unix://{SOCK}", "load", "-q", stdin=save.stdout, timeout=300)
        save.wait(60)
        assert load.returncode == 0, load.stderr
        yield smi
    finally:
        teardown(proc)


@pytest.fixture
def gpu_server(
    gpu_engine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Server]:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{SOCK}")
    server = start_server(tmp_path, "--nvidia-smi", str(gpu_engine))
    try:
        yield server
    finally:
        stop_server(server)


def waiting(c: Client, name: str, timeout: float = 60) -> SessionInfo:
    """The session once its why-pending report is there; it must still be PENDING."""
    deadline = time.monotonic() + timeout
    while "pending" not in (s := c.get_session(name)).status_info:
        assert s.status == "PENDING" and time.monotonic() < deadline, s
        time.sleep(0.2)
    assert s.status == "PENDING", s
    return s


def visible(c: Client, name: str) -> str:
    """NVIDIA_VISIBLE_DEVICES and TROUPE_GPUS in main1 of a session, as its commands see them."""
    code, out = c.exec(name, ["sh", "-c", 'echo "$NVIDIA_VISIBLE_DEVICES $TROUPE_GPUS"'])
    assert code == 0, out
    return out.strip()


def test_kernels_get_their_own_gpus_through_the_engine(gpu_server: Server) -> None:
    c = gpu_server.client()
    (agent,) = c.list_agents()
    assert (agent.gpu, agent.gpu_reason) == (2, ""), agent
    assert [g.uuid for g in agent.gpus] == GPUS
    listed = gpu_server.cli("agent", "list")
    assert "2/2 2x NVIDIA Stand-in 16GB" in listed.stdout, listed

    a = c.create_session(SessionCreate(name="a", image=BASE_IMAGE, resources=ONE))
    b = c.create_session(SessionCreate(name="b", image=BASE_IMAGE, resources=ONE))
    a, b = c.wait_session("a", timeout=90), c.wait_session("b", timeout=90)
    assert a.status == b.status == "RUNNING", (a, b)
    (ga,), (gb,) = a.kernels[0].gpus, b.kernels[0].gpus
    assert {ga, gb} == set(GPUS)
    assert visible(c, "a") == f"{ga} 1" and visible(c, "b") == f"{gb} 1"
    requests = engine(
        "inspect", "-f", "{{json .HostConfig.DeviceRequests}}", a.kernels[0].container_id or ""
    )
    assert f'"DeviceIDs":["{ga}"]' in requests.stdout and '"Driver":"nvidia"' in requests.stdout
    shown = gpu_server.cli("session", "info", "a")
    assert "GPUS" in shown.stdout and ga[:12] in shown.stdout, shown

    c.create_session(SessionCreate(name="c", image=BASE_IMAGE, resources=ONE))
    assert "gpu: needs 1 GPU, 0 GPUs free" in str(waiting(c, "c").status_info)

    # a manager restart: the allocation is read back, nothing is given twice
    stop_server(gpu_server)
    restarted = start_server(gpu_server.data_dir.parent, "--nvidia-smi", str(SMI))
    try:
        c = restarted.client()
        assert c.get_session("b").status == "RUNNING"
        waiting(c, "c")
        c.destroy_session("a")
        cc = c.wait_session("c", timeout=90)
        assert cc.status == "RUNNING" and cc.kernels[0].gpus == [ga], cc
        assert visible(c, "c") == f"{ga} 1"
        for name in ("b", "c"):
            c.destroy_session(name)
    finally:
        stop_server(restarted)


async def test_an_engine_without_the_hook_offers_no_gpus(gpu_engine: Path, tmp_path: Path) -> None:
    from troupe.agent.docker_backend import DockerAgent

    agent = DockerAgent(
        "nohook",
        docker_url="unix:///var/run/docker.sock",
        data_root=tmp_path,
        nvidia_smi=str(gpu_engine),
    )
    await agent.start()
    try:
        cap = await agent.capacity()
    finally:
        await agent.close()
    assert cap.gpu == 0 and cap.gpus == []
    assert 'could not select device driver "nvidia"' in cap.gpu_reason, cap.gpu_reason
    assert "nvidia-container-runtime-hook" in cap.gpu_reason
    left = sh(DOCKER, "ps", "-aq", "--filter", "label=troupe.gpu-probe").stdout
    assert left.strip() == ""


def start_gpu_agent(server: Server, port: int, log: Path) -> subprocess.Popen[bytes]:
    """``troupe agent`` on the GPU engine, reporting to ``server`` over HTTP (loopback)."""
    return start_agent(
        *(server, "gpuhost", port, log, "--nvidia-smi", str(SMI), "--gpus", "0,1"),
        token=TOKEN,
        docker_host=f"unix://{SOCK}",
    )


def registered(log: Path, times: int, timeout: float = 60) -> None:
    """Waits until the agent's log says it registered ``times`` times."""
    deadline = time.monotonic() + timeout
    while log.read_text().count("registered with") < times:
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)


def stop_agent(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_an_agent_of_another_host_hands_out_its_gpus(gpu_engine: Path, tmp_path: Path) -> None:
    server = start_server(
        tmp_path, "--no-local-agent", "--agent-token", TOKEN, "--agent-timeout", "3"
    )
    port = free_port()
    agent = start_gpu_agent(server, port, tmp_path / "agent.log")
    try:
        registered(tmp_path / "agent.log", 1)
        c = server.client()
        (info,) = c.list_agents()
        assert (info.gpu, info.gpu_free, [g.uuid for g in info.gpus]) == (2, 2, GPUS), info
        pair = c.create_session(
            SessionCreate(name="pair", image=BASE_IMAGE, cluster_size=2, resources=ONE)
        )
        pair = c.wait_session("pair", timeout=90)
        assert pair.status == "RUNNING", pair
        assert [k.gpus for k in pair.kernels] == [[GPUS[0]], [GPUS[1]]]
        for k in pair.kernels:
            code, out = c.exec(
                "pair", ["sh", "-c", "echo $NVIDIA_VISIBLE_DEVICES"], kernel=k.hostname
            )
            assert (code, out.strip()) == (0, k.gpus[0])

        # A restarted agent holds no credential: it is refused until it is LOST, which fails
        # its sessions; the GPUs are free again and the sweep removes the old containers.
        c.create_session(SessionCreate(name="more", image=BASE_IMAGE, resources=ONE))
        waiting(c, "more")
        stop_agent(agent)
        agent = start_gpu_agent(server, port, tmp_path / "agent.log")
        registered(tmp_path / "agent.log", 2)
        after = c.wait_session("pair", until="final", timeout=90)
        assert after.status_info.get("reason") == "agent lost", after.status_info
        more = c.wait_session("more", timeout=90)
        assert more.status == "RUNNING" and more.kernels[0].gpus == [GPUS[0]], more
        deadline = time.monotonic() + 60
        while engine("ps", "-aq", "--filter", f"label=troupe.session={pair.id}").stdout.strip():
            assert time.monotonic() < deadline, "the lost session's containers were not removed"
            time.sleep(0.2)
        c.destroy_session("more")
        c.wait_session("more", until="final", timeout=90)
    finally:
        stop_agent(agent)
        stop_server(server)
