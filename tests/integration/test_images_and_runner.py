"""The offline-built kernel images and the runner files inside a real container (issue 2)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import BASE_IMAGE, TORCH_IMAGE, docker
from troupe.agent.kernel import runner_dir

pytestmark = pytest.mark.docker


def test_base_image_runs_python(docker_engine: None) -> None:
    r = docker("run", "--rm", BASE_IMAGE, "python3", "-c", "print(1)")
    assert r.stdout == "1\n"


def test_base_image_has_no_baked_host_keys(docker_engine: None) -> None:
    r = docker("run", "--rm", BASE_IMAGE, "sh", "-c", "ls /etc/ssh/ssh_host_* 2>/dev/null | wc -l")
    assert r.stdout.strip() == "0"


def test_pytorch_image_has_gloo(docker_engine: None) -> None:
    r = docker(
        "run",
        "--rm",
        TORCH_IMAGE,
        "python",
        "-c",
        "import torch, torch.distributed as d;print(torch.__version__, d.is_gloo_available())",
    )
    assert r.stdout.split() == ["2.13.0+cpu", "True"]


def test_images_carry_their_recipe_hash(docker_engine: None) -> None:
    for image in (BASE_IMAGE, TORCH_IMAGE):
        labels = json.loads(
            docker("image", "inspect", "--format", "{{json .Config.Labels}}", image).stdout
        )
        assert len(labels["troupe.recipe"]) == 16


def _entrypoint(runner: Path, *env: str, cmd: tuple[str, ...] = ("env",)) -> tuple[int, str, str]:
    args = ["run", "--rm", "--init", "-v", f"{runner}:/opt/troupe:ro"]
    for e in env:
        args += ["-e", e]
    r = docker(
        *args, "--entrypoint", "/bin/sh", BASE_IMAGE, "/opt/troupe/entrypoint.sh", *cmd, check=False
    )
    return r.returncode, r.stdout, r.stderr


CLUSTER = (
    "BACKENDAI_CLUSTER_SIZE=4",
    "BACKENDAI_CLUSTER_HOSTS=main1,sub1,sub2,sub3",
    "BACKENDAI_CLUSTER_LOCAL_RANK=2",
)


def test_entrypoint_derives_distributed_env(docker_engine: None) -> None:
    code, out, err = _entrypoint(Path(runner_dir()), *CLUSTER)
    assert code == 0, err
    env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert env["MASTER_ADDR"] == "main1" and env["MASTER_PORT"] == "29500"
    assert json.loads(env["TF_CONFIG"]) == {
        "cluster": {"worker": ["main1:29500", "sub1:29501", "sub2:29502", "sub3:29503"]},
        "task": {"type": "worker", "index": 2},
    }
    assert env["HOME"] == "/home/work"
    assert "WORLD_SIZE" not in env


def test_entrypoint_without_setup_script_warns_once(docker_engine: None, tmp_path: Path) -> None:
    runner = tmp_path / "runner"
    shutil.copytree(runner_dir(), runner)
    (runner / "setup_dist_environ.sh").unlink()
    code, out, err = _entrypoint(runner, *CLUSTER)
    assert code == 0
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "setup_dist_environ.sh not found" in warnings[0]
    assert "MASTER_ADDR=" not in out


def test_entrypoint_runs_command_as_work_with_exit_code(docker_engine: None) -> None:
    code, out, _ = _entrypoint(Path(runner_dir()), cmd=("sh", "-c", "id -un; exit 4"))
    assert (code, out) == (4, "work\n")


def _ready(
    *args: str,
    sshd: bool = True,
    start_sshd: bool = False,
    set_up: bool = True,
    sshd_said: str = "",
) -> tuple[int, str]:
    """Runs ready.sh (under bash, as the entrypoint does) in a container of its own, on no
    network; with ``sshd`` as a kernel that runs sshd (started first with ``start_sshd``),
    ``set_up`` as one whose entrypoint is done, and ``sshd_said`` as sshd's log."""
    mark = "mkdir -p /run/troupe; "
    if sshd_said:
        mark += f"printf '{sshd_said}' > /var/log/troupe-sshd.log; "
    if set_up:
        mark += ": > /run/troupe/started; "
    if sshd:
        mark += ": > /run/troupe/sshd; "
    if start_sshd:
        mark += (
            "mkdir -p /run/sshd && ssh-keygen -q -t ed25519 -N '' -f /tmp/hk"
            " && /usr/sbin/sshd -p 2200 -h /tmp/hk -o PidFile=/run/sshd-troupe.pid; "
        )
    r = docker(
        *("run", "--rm", "--network", "none", "--add-host", "ghost:10.254.254.254"),
        *("-v", f"{runner_dir()}:/opt/troupe:ro"),
        *("--entrypoint", "/bin/bash", BASE_IMAGE, "-c"),
        f'{mark}exec bash /opt/troupe/ready.sh "$@"',
        "ready",
        *args,
        check=False,
    )
    return r.returncode, r.stdout + r.stderr


def test_ready_reports_at_once_without_peers_and_names_what_is_missing(docker_engine: None) -> None:
    """The readiness report the agent reads from a kernel's log: at once when this kernel's
    sshd listens and every peer answers; on time-out, what was missing: this kernel's sshd, a
    peer's name, or a peer that resolves but does not answer."""
    assert _ready("5", sshd=False) == (0, "troupe: ready\n")
    code, out = _ready("1", sshd=False, set_up=False)  # the entrypoint is not done
    assert code == 1 and out == "troupe: not ready after 1s: waiting for set-up\n", out
    assert _ready("5", start_sshd=True) == (0, "troupe: ready\n")
    code, out = _ready("1")  # runs sshd, but nothing listens on 2200
    assert code == 1 and out == "troupe: not ready after 1s: waiting for ssh:2200\n", out
    # sshd went to the background, then could not bind: its last word says why (sshd ends
    # its log's lines with CR LF)
    said = (
        "Bind to port 2200 on 0.0.0.0 failed: Address already in use.\\r\\n"
        "Cannot bind any address.\\r\\n"
    )
    code, out = _ready("1", sshd_said=said)
    why = "ssh:2200 (sshd: Cannot bind any address.)"
    assert code == 1 and out == f"troupe: not ready after 1s: waiting for {why}\n", out
    code, out = _ready("1", "nosuchpeer", "127.0.0.1", sshd=False)
    assert code == 1 and out == "troupe: not ready after 1s: waiting for name:nosuchpeer\n", out
    code, out = _ready("1", "ghost", sshd=False)  # resolves, but no route on this network
    assert code == 1 and out == "troupe: not ready after 1s: waiting for net:ghost\n", out
    # a peer answers when it refuses the probe (nothing listens on port 1 of 127.0.0.1)
    assert _ready("5", "127.0.0.1", start_sshd=True) == (0, "troupe: ready\n")


def test_ready_wakes_when_the_entrypoint_says_it_is_set_up(docker_engine: None) -> None:
    """With every peer found, ready.sh sleeps until the entrypoint writes to its FIFO (it looks
    for the marker only once a second otherwise): ready about 0.1 s after set-up, not 1 s."""
    script = (
        "mkdir -p /run/troupe && mkfifo -m 600 /run/troupe/events; "
        "(sleep 0.1; : > /run/troupe/started; echo started 1<> /run/troupe/events) & "
        "s=$EPOCHREALTIME; bash /opt/troupe/ready.sh 5; e=$EPOCHREALTIME; "
        "echo $(( (${e/./} - ${s/./}) / 1000 ))"
    )
    r = docker(
        *("run", "--rm", "--network", "none", "-v", f"{runner_dir()}:/opt/troupe:ro"),
        *("--entrypoint", "/bin/bash", BASE_IMAGE, "-c", script),
        check=False,
    )
    ms = int(r.stdout.split()[-1]) if r.stdout.split() else -1
    assert r.returncode == 0 and r.stdout.startswith("troupe: ready\n"), r.stdout + r.stderr
    assert ms < 800, f"ready after {ms} ms: not woken by the FIFO"


def _ready_timed(agent_says: bool) -> tuple[str, int]:
    """ready.sh of a set-up kernel with one peer (127.0.0.1, which answers at once) whose
    files carry the agent's marker; the agent writes "peers" after 0.3 s if ``agent_says``.
    Its output and how long it took (ms)."""
    script = (
        "mkdir -p /run/troupe && mkfifo -m 600 /run/troupe/events; "
        ": > /run/troupe/agent-signals; : > /run/troupe/started; "
        + ("(sleep 0.3; echo peers 1<> /run/troupe/events) & " if agent_says else "")
        + "s=$EPOCHREALTIME; bash /opt/troupe/ready.sh 10 127.0.0.1; e=$EPOCHREALTIME; "
        "echo $(( (${e/./} - ${s/./}) / 1000 ))"
    )
    r = docker(
        *("run", "--rm", "--network", "none", "-v", f"{runner_dir()}:/opt/troupe:ro"),
        *("--entrypoint", "/bin/bash", BASE_IMAGE, "-c", script),
        check=False,
    )
    ms = int(r.stdout.split()[-1]) if r.stdout.split() else -1
    return r.stdout + r.stderr, ms


def test_ready_probes_no_peer_before_the_agent_says_they_started(docker_engine: None) -> None:
    """Where the agent tells the kernel that every peer started (agent/files.py), ready.sh
    probes none before: ready right after the agent's line; without it, it probes on its own
    after PEERS_FALLBACK (2) seconds."""
    out, ms = _ready_timed(agent_says=True)
    assert out.startswith("troupe: ready\n"), out
    assert 250 <= ms < 1500, f"ready after {ms} ms: not when the agent said so"
    out, ms = _ready_timed(agent_says=False)
    assert out.startswith("troupe: ready\n"), out
    assert 1500 <= ms < 4000, f"ready after {ms} ms without the agent's line"
