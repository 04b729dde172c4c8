"""Session -> kernel specs and container configs: the exact container contract."""

from __future__ import annotations

import io
import tarfile
from dataclasses import replace
from pathlib import Path

from troupe.agent.kernel import KernelFiles, container_config, files_archive
from troupe.api.policies import SUPERVISED_VAR
from troupe.cluster import build_cluster, generate_ed25519
from troupe.manager.kernels import SessionPlan, kernel_specs


def plan(batch: bool = False) -> SessionPlan:
    key = generate_ed25519()
    return SessionPlan(
        session_id="s" * 36,
        owner="u1",
        image="img",
        network="net",
        batch=batch,
        startup_command="echo hi" if batch else None,
        cpu=0.5,
        mem=2**28,
        uid=1234,
        gid=1234,
        ssh_private_key=key.private_openssh,
        ssh_public_key=key.public_openssh,
        mounts={"data": ("f1", False), "ro": ("f2", True)},
    )


def specs(batch: bool = False):  # type: ignore[no-untyped-def]
    contracts = build_cluster("s" * 36, ["s" * 36, "k1", "k2"], "single-node")
    keys = {
        c.hostname: ("PRIV-" + c.hostname, generate_ed25519().public_openssh) for c in contracts
    }
    return kernel_specs(plan(batch), contracts, keys)


def test_each_kernel_gets_its_own_host_key_and_shared_known_hosts() -> None:
    out = specs()
    assert [s.hostname for s in out] == ["main1", "sub1", "sub2"]
    for s in out:
        files = {f.path: f for f in s.files}
        assert files["/home/config/ssh/host_ed25519_key"].content == "PRIV-" + s.hostname
        assert files["/home/config/ssh/host_ed25519_key"].mode == 0o600
        kh = files["/home/config/ssh/known_hosts"].content
        assert [line.split()[0] for line in kh.splitlines()] == [
            "[main1]:2200",
            "[sub1]:2200",
            "[sub2]:2200",
        ]
        conf = files["/home/config/kernel.conf"].content
        assert "_troupe_uid=1234" in conf and "/home/work/data" in conf
        assert "/home/work/ro" not in conf  # read-only mounts are not chowned


def test_batch_command_only_in_main1() -> None:
    out = specs(batch=True)
    assert out[0].command == ["/bin/sh", "-c", "echo hi"]
    assert out[1].command == [] and out[2].command == []
    assert (
        "_troupe_wait_go=1" in {f.path: f for f in out[0].files}["/home/config/kernel.conf"].content
    )


def test_container_config_limits_labels_alias() -> None:
    s = specs()[1]
    cfg = container_config(s, "/runner", "/srv")
    assert cfg["Hostname"] == "sub1"
    assert cfg["HostConfig"]["NanoCpus"] == 500_000_000
    assert cfg["HostConfig"]["Memory"] == cfg["HostConfig"]["MemorySwap"] == 2**28
    assert cfg["HostConfig"]["Init"] is True
    assert "/runner:/opt/troupe:ro" in cfg["HostConfig"]["Binds"]
    assert "/srv/f2:/home/work/ro:ro" in cfg["HostConfig"]["Binds"]
    assert cfg["NetworkingConfig"]["EndpointsConfig"]["net"]["Aliases"] == ["sub1"]
    assert cfg["Labels"]["troupe.kernel"] == "k1" and cfg["Labels"]["troupe.owner"] == "u1"
    assert "BACKENDAI_CLUSTER_HOST=sub1" in cfg["Env"]
    assert not any("troupe-files" in b for b in cfg["HostConfig"]["Binds"])


def test_files_archive_is_mounted_read_only_when_given() -> None:
    files = KernelFiles(Path("/run/x/k.tar"), None)
    cfg = container_config(specs()[1], "/runner", "/srv", files=files)
    assert "/run/x/k.tar:/opt/troupe-files.tar:ro" in cfg["HostConfig"]["Binds"]


def test_files_archive_modes_and_parents() -> None:
    s = specs()[0]
    with tarfile.open(fileobj=io.BytesIO(files_archive(s.files))) as tar:
        names = tar.getnames()
        mode = tar.getmember("home/config/ssh/id_cluster").mode
    assert (
        names.index("home") < names.index("home/config") < names.index("home/config/ssh/id_cluster")
    )
    assert mode == 0o600


def test_files_archive_has_no_pax_headers() -> None:
    """Whole-second times: no pax header per entry (a fraction of a second needs one, which
    doubled the archive and the time to make it on every kernel's start)."""
    data = files_archive(specs()[0].files)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = tar.getmembers()
    assert all(not m.pax_headers for m in members)
    assert len(data) <= 512 * (2 * len(members) + 20)  # a header and a block each, the ending


def test_work_home_comes_owned_with_final_modes() -> None:
    """~work and its SSH files arrive owned by the session's uid/gid, so the entrypoint copies
    and chowns nothing; listed directories keep their owner even when a file lies below."""
    s = specs()[0]
    with tarfile.open(fileobj=io.BytesIO(files_archive(s.files))) as tar:
        members = {m.name: m for m in tar.getmembers()}
        names = tar.getnames()
    home, ssh = members["home/work"], members["home/work/.ssh"]
    assert home.isdir() and (home.uid, home.gid, home.mode) == (1234, 1234, 0o755)
    assert ssh.isdir() and (ssh.uid, ssh.gid, ssh.mode) == (1234, 1234, 0o700)
    assert names.count("home/work") == 1 and names.index("home/work") < names.index(
        "home/work/.ssh/id_cluster"
    )
    for f in ("id_cluster", "id_cluster.pub", "authorized_keys", "config", "known_hosts"):
        m = members[f"home/work/.ssh/{f}"]
        assert (m.uid, m.gid, m.mode) == (1234, 1234, 0o600), f
    key = members["etc/ssh/troupe_host_ed25519_key"]
    assert (key.uid, key.mode) == (0, 0o600)
    assert members["run/sshd"].isdir() and members["run/troupe"].isdir()


def test_readiness_fifo_comes_in_the_archive() -> None:
    """ready.sh waits on /run/troupe/events, which the entrypoint writes to once set up."""
    with tarfile.open(fileobj=io.BytesIO(files_archive(specs()[0].files))) as tar:
        events = tar.getmember("run/troupe/events")
    assert events.isfifo() and (events.uid, events.mode) == (0, 0o600)


def test_ready_sh_checks_the_pid_file_sshd_is_configured_with() -> None:
    """ready.sh takes sshd's PID file as the sign that it listens: the same path as the
    sshd_config troupe writes."""
    from troupe.agent.kernel import runner_dir
    from troupe.cluster.ssh import sshd_config_text

    pidfile = next(
        line.split()[1]
        for line in sshd_config_text("/k", "a").splitlines()
        if line.startswith("PidFile ")
    )
    assert f"SSHD_PID={pidfile}\n" in (Path(runner_dir()) / "ready.sh").read_text()


def test_only_a_session_that_may_restart_has_supervised_kernels() -> None:
    """Its kernels' entrypoints stay as supervisors (Docker's init signals their whole process
    group); a fail-fast session's exec their commands as before."""
    contracts = build_cluster("s" * 36, ["s" * 36, "k1"], "single-node")
    keys = {c.hostname: ("PRIV", generate_ed25519().public_openssh) for c in contracts}
    assert all(SUPERVISED_VAR not in s.env for s in kernel_specs(plan(), contracts, keys))
    supervised = kernel_specs(replace(plan(), supervised=True), contracts, keys)
    assert all(s.env[SUPERVISED_VAR] == "1" for s in supervised)
