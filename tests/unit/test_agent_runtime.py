"""The kernel runtime the agent mounts into every kernel (agent/runtime.py): where the agent
finds it, and how it changes a kernel's container and the runner's commands."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.unit.test_kernel_specs import specs

from troupe.agent import exec as execs
from troupe.agent import runtime
from troupe.agent.kernel import RUNNER_MOUNT, container_config
from troupe.api.pipe import copy_command, relay_command


def make_runtime(where: Path) -> Path:
    (where / "bin").mkdir(parents=True)
    (where / "bin/sh").write_text("")
    (where / "bin/sh").chmod(0o755)
    (where / "manifest").write_text("key test\n")
    return where


@pytest.fixture
def fresh() -> Iterator[None]:
    runtime.host_dir.cache_clear()
    yield
    runtime.host_dir.cache_clear()


def test_a_runtime_is_a_directory_with_a_manifest_and_a_shell(tmp_path: Path) -> None:
    assert runtime.check_dir(tmp_path / "none") is None
    (tmp_path / "half/bin").mkdir(parents=True)
    assert runtime.check_dir(tmp_path / "half") is None
    rt = make_runtime(tmp_path / "abc123")
    (tmp_path / "current").symlink_to("abc123")
    # the link is resolved: a kernel keeps its runtime when `current` moves on
    assert runtime.check_dir(tmp_path / "current") == str(rt)


def test_the_agent_takes_the_configured_runtime_or_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh: None
) -> None:
    rt = make_runtime(tmp_path / "rt")
    monkeypatch.setenv(runtime.ENV, str(rt))
    assert runtime.host_dir() == str(rt)
    runtime.host_dir.cache_clear()
    monkeypatch.setenv(runtime.ENV, "")  # none: kernels as before the runtime
    assert runtime.host_dir() is None
    runtime.host_dir.cache_clear()
    monkeypatch.delenv(runtime.ENV)
    monkeypatch.setattr(runtime, "DEFAULT_DIR", tmp_path / "missing")
    assert runtime.host_dir() is None


def test_with_a_runtime_the_kernel_starts_under_it_as_root() -> None:
    spec = specs()[0]
    cfg = container_config(spec, "/runner", "/srv", runtime="/var/cache/troupe/runtime/k1")
    assert "/var/cache/troupe/runtime/k1:/opt/troupe-runtime:ro" in cfg["HostConfig"]["Binds"]
    assert cfg["Entrypoint"] == [runtime.SHELL, f"{RUNNER_MOUNT}/entrypoint.sh"]
    assert cfg["User"] == "0:0"  # an image's USER: the entrypoint drops to work itself
    plain = container_config(spec, "/runner", "/srv")
    assert plain["Entrypoint"] == ["/bin/sh", f"{RUNNER_MOUNT}/entrypoint.sh"]
    assert "User" not in plain
    assert not any("troupe-runtime" in b for b in plain["HostConfig"]["Binds"])


def test_runner_commands_start_under_the_runtimes_shell() -> None:
    for cmd in (copy_command("get", "/tmp/x"), relay_command(2200)):
        assert runtime.command(cmd, "/rt")[0] == runtime.SHELL
        assert runtime.command(cmd, "/rt")[1:] == cmd[1:]
        assert runtime.command(cmd, None) == cmd
    assert runtime.command(["tar", "-c"], "/rt") == ["tar", "-c"]  # only the runner's /bin/sh


def test_exec_goes_through_exec_sh_under_the_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh: None
) -> None:
    monkeypatch.setenv(runtime.ENV, str(make_runtime(tmp_path / "rt")))
    assert execs._exec_sh(["env"]) == [runtime.SHELL, f"{RUNNER_MOUNT}/exec.sh", "env"]
    runtime.host_dir.cache_clear()
    monkeypatch.setenv(runtime.ENV, "")
    assert execs._exec_sh(["env"])[0] == "/bin/sh"
    # the login shell needs no /bin/sh of the image's: exec.sh runs it under the runtime's
    assert execs.LOGIN_SHELL[0] == "/bin/sh" and "exec sh -l" in execs.LOGIN_SHELL[2]


def test_every_runner_script_goes_on_under_the_images_own_sh() -> None:
    """busybox's sh runs its applets in place of the image's programs: each script the agent
    starts under the runtime's sh re-executes itself under the image's /bin/sh if any."""
    runner = Path(__file__).resolve().parents[2] / "src/troupe/runner"
    line = 'if [ -x /bin/sh ] && ! [ "/proc/$$/exe" -ef /bin/sh ]; then exec /bin/sh "$0" "$@"; fi'
    for name in ("entrypoint.sh", "exec.sh", "cp.sh", "relay.sh"):
        assert line in (runner / name).read_text(), name


def test_only_x86_64_linux_images_make_kernels() -> None:
    assert runtime.platform_error("a", {"Os": "linux", "Architecture": "amd64"}) is None
    assert runtime.platform_error("a", {}) is None  # (an engine that says nothing: as before)
    why = runtime.platform_error("me/arm:1", {"Os": "linux", "Architecture": "arm64"})
    assert why is not None
    assert why.startswith("image me/arm:1 is built for linux/arm64; troupe runs linux/amd64")
