"""Images troupe did not build for itself, on the real engine, with the kernel runtime the
agent mounts (docs/contract.md, "What troupe adds to an image"): Debian minbase without
OpenSSH, Python, bash or rsync and with ``USER 1234``; a scratch image holding only a static
busybox; one holding only a static binary and no shell; Open MPI without sshd.

The images are built here, offline (from troupe/base's debootstrap root filesystem
``troupe/rootfs``, the host's busybox-static and ldconfig), named ``troupe-test/...`` and
removed at the end. Every command runs with a throwaway HOME and key pair.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import ROOT, Server, docker, mpirun_output

pytestmark = pytest.mark.docker

TROUPE = str(ROOT / ".venv/bin/troupe")
BUSYBOX = "/bin/busybox"
MINBASE = "troupe-test/minbase-user1234:1"
BUSYBOX_ONLY = "troupe-test/busybox-only:1"
STATIC_ONLY = "troupe-test/static-only:1"
MPI_NOSSH = "troupe-test/mpi-nossh:1"
ARM64 = "troupe-test/arm64-only:1"
#: Variables every entry path must agree on (the runtime puts itself last on PATH).
SAME = ("PATH", "MASTER_ADDR", "MASTER_PORT", "TF_CONFIG", "BACKENDAI_CLUSTER_HOSTS")

MINBASE_DOCKERFILE = """\
FROM {base}
RUN set -e; dpkg-query -W -f '${{Package}}\\n' \\
      | grep -E '^(openssh-|python3|libpython3|rsync$)' \\
      | xargs dpkg --purge --force-depends --force-remove-essential; \\
    dpkg --purge --force-depends --force-remove-essential bash; \\
    for p in bash python3 ssh sshd rsync scp; do ! command -v $p; done; test ! -e /bin/bash
USER 1234
"""
MPI_DOCKERFILE = """\
FROM troupe/mpi:0.1.0
RUN set -e; dpkg --purge --force-depends openssh-server openssh-client openssh-sftp-server; \\
    ! command -v ssh; ! command -v sshd
LABEL troupe.sshd=false
"""


def ok(r: subprocess.CompletedProcess[bytes], code: int = 0) -> str:
    out, err = r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")
    assert r.returncode == code, f"exit {r.returncode}\nstdout:\n{out}\nstderr:\n{err}"
    assert "Traceback" not in out + err
    return out


class User:
    """The CLI with a HOME (and key pair) of its own, against the test server."""

    def __init__(self, server: Server, home: Path) -> None:
        self.home = home
        (home / ".ssh").mkdir(parents=True, exist_ok=True, mode=0o700)
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(home / ".ssh/id_ed25519")],
            check=True,
        )
        self.env = {**server.env, "HOME": str(home)}

    def troupe(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [TROUPE, *args], env=self.env, capture_output=True, timeout=timeout, cwd=self.home
        )

    def sh(self, name: str, script: str, kernel: str = "main1") -> str:
        """``script`` under the kernel's sh (the runtime's where the image has none)."""
        cmd = ("session", "exec", name, "--kernel", kernel, "--", "sh", "-c", script)
        return ok(self.troupe(*cmd))


def _import(tag: str, files: dict[str, str | bytes]) -> None:
    """``docker import`` of a root filesystem: path -> content (bytes) or link target (str)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, what in files.items():
            info = tarfile.TarInfo(path)
            if isinstance(what, str):
                info.type, info.linkname = tarfile.SYMTYPE, what
                tar.addfile(info)
            else:
                info.size, info.mode = len(what), 0o755
                tar.addfile(info, io.BytesIO(what))
    subprocess.run(
        ["/usr/bin/docker", "import", "-", tag],
        input=buf.getvalue(),
        check=True,
        capture_output=True,
    )


def _load_foreign(tag: str, arch: str) -> None:
    """``docker load`` of a one-layer image whose config says ``linux/<arch>``."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tarfile.TarInfo("hello")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"hi\n"))
    diff_id = "sha256:" + hashlib.sha256(layer.getvalue()).hexdigest()
    config = json.dumps(
        {"architecture": arch, "os": "linux", "config": {"Cmd": ["/hello"]},
         "rootfs": {"type": "layers", "diff_ids": [diff_id]}}
    ).encode()  # fmt: skip
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [tag], "Layers": ["l/layer.tar"]}]
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in (
            ("l/layer.tar", layer.getvalue()),
            (config_name, config),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    subprocess.run(
        ["/usr/bin/docker", "load"], input=out.getvalue(), check=True, capture_output=True
    )


def _build(tag: str, dockerfile: str) -> None:
    r = subprocess.run(
        ["/usr/bin/docker", "build", "-q", "-t", tag, "-"],
        input=dockerfile.encode(),
        capture_output=True,
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
    )
    assert r.returncode == 0, r.stderr.decode()


@pytest.fixture(scope="module")
def images(docker_engine: None) -> Iterator[None]:
    tags = [MINBASE, BUSYBOX_ONLY, STATIC_ONLY, MPI_NOSSH, ARM64]
    try:
        rootfs = docker("images", "troupe/rootfs", "--format", "{{.Repository}}:{{.Tag}}")
        base = (rootfs.stdout.split() or ["troupe/base:0.1.0"])[0]
        _build(MINBASE, MINBASE_DOCKERFILE.format(base=base))
        _build(MPI_NOSSH, MPI_DOCKERFILE)
        busybox = Path(BUSYBOX).read_bytes()
        applets = subprocess.run([BUSYBOX, "--list"], capture_output=True, text=True).stdout
        links: dict[str, str | bytes] = {f"bin/{a}": "busybox" for a in applets.split()}
        _import(BUSYBOX_ONLY, {"bin/busybox": busybox, **links})
        _import(STATIC_ONLY, {"ldconfig": Path("/sbin/ldconfig").read_bytes()})
        _load_foreign(ARM64, "arm64")
        yield
    finally:
        docker("image", "rm", "-f", *tags, check=False)


@pytest.fixture(scope="module")
def me(server: Server, tmp_path_factory: pytest.TempPathFactory) -> User:
    return User(server, tmp_path_factory.mktemp("home"))


def session(me: User, image: str, *extra: str) -> str:
    name = f"img-{uuid.uuid4().hex[:6]}"
    r = me.troupe(
        "session", "create", name, "--image", image, "--cluster-size", "3",
        "--cpu", "0.25", "--mem", "256m", *extra, "--wait",
    )  # fmt: skip
    if r.returncode != 0:
        me.troupe("session", "destroy", name)
    ok(r)
    return name


def env_of(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def check_ssh_env_and_copies(me: User, name: str) -> None:
    """What every image must give: ssh between kernels, one environment on every path,
    scp/sftp between kernels, and ``troupe session cp`` both ways."""
    assert me.sh(name, "ssh sub1 hostname").strip() == "sub1"
    assert me.sh(name, "ssh sub2 hostname", kernel="sub1").strip() == "sub2"
    # the environment: exec, ssh with a command, a login shell over ssh
    for host in ("main1", "sub1", "sub2"):
        paths = {
            "exec": env_of(me.sh(name, "env", kernel=host)),
            "ssh": env_of(me.sh(name, f"ssh {host} env")),
            "login": env_of(me.sh(name, f"ssh {host} sh -lc env")),
        }
        for path, seen in paths.items():
            assert seen["BACKENDAI_CLUSTER_HOST"] == host, (path, seen)
            assert seen["MASTER_ADDR"] == "main1", (path, seen)
            assert seen["PATH"].endswith(":/opt/troupe-runtime/bin"), (path, seen)
            assert {k: seen.get(k) for k in SAME} == {k: paths["exec"].get(k) for k in SAME}, path
    # the kernel's user is work, whatever the image's USER
    assert me.sh(name, "id -un; id -u").split() == ["work", "1000"]
    assert me.sh(name, "ssh sub1 id -un").strip() == "work"
    # scp and sftp between kernels (the remote side is sshd's internal sftp)
    me.sh(name, "echo from-main1 > /tmp/a && scp /tmp/a sub1:/tmp/b")
    assert me.sh(name, "cat /tmp/b", kernel="sub1").strip() == "from-main1"
    listing = me.sh(name, "echo 'ls /tmp' | sftp -b - sub1")
    assert "/tmp/b" in listing, listing
    # troupe session cp, both ways, to main1 and to a sub kernel
    src = me.home / f"{name}.txt"
    src.write_text("to the kernel\n")
    ok(me.troupe("session", "cp", str(src), f"{name}:/tmp/in.txt"))
    ok(me.troupe("session", "cp", str(src), f"{name}/sub2:/tmp/in.txt"))
    assert me.sh(name, "cat /tmp/in.txt", kernel="sub2") == "to the kernel\n"
    me.sh(name, "echo from the kernel > /tmp/out.txt")
    back = me.home / f"{name}.back"
    ok(me.troupe("session", "cp", f"{name}:/tmp/out.txt", str(back)))
    assert back.read_text() == "from the kernel\n"


def test_minbase_without_ssh_python_bash_as_user_1234(me: User, images: None) -> None:
    name = session(me, MINBASE)
    try:
        check_ssh_env_and_copies(me, name)
        # the image's own programs come first (dash's sh, GNU tar), the runtime's fill gaps
        assert me.sh(name, "command -v tar; command -v ssh").split() == [
            "/usr/bin/tar",
            "/opt/troupe-runtime/bin/ssh",
        ]
        # troupe session ssh / tunnel reach main1's sshd (the runtime's) with the pinned key
        assert ok(me.troupe("session", "ssh", name, "--", "hostname")).strip() == "main1"
    finally:
        me.troupe("session", "destroy", name)


def test_scratch_image_with_only_busybox(me: User, images: None) -> None:
    name = session(me, BUSYBOX_ONLY)
    try:
        check_ssh_env_and_copies(me, name)
        assert ok(me.troupe("session", "ssh", name, "--", "ssh", "sub1", "hostname")) == "sub1\n"
    finally:
        me.troupe("session", "destroy", name)


def test_static_binary_without_a_shell(me: User, images: None) -> None:
    name = session(me, STATIC_ONLY, "--ssh-key", "none")
    try:
        out = ok(me.troupe("session", "exec", name, "--", "/ldconfig", "--version"))
        assert out.startswith("ldconfig"), out
        env = env_of(ok(me.troupe("session", "exec", name, "--kernel", "sub1", "--", "env")))
        assert env["BACKENDAI_CLUSTER_HOST"] == "sub1" and env["MASTER_ADDR"] == "main1"
        # the runtime's shell and ssh
        assert me.sh(name, "ssh sub1 hostname").strip() == "sub1"
        assert env_of(me.sh(name, "ssh sub2 env"))["BACKENDAI_CLUSTER_HOST"] == "sub2"
    finally:
        me.troupe("session", "destroy", name)


def test_batch_command_without_a_shell_in_the_image(me: User, images: None) -> None:
    """The startup command (``/bin/sh -c``) runs under the runtime's sh, with the environment
    the other paths see, and its exit code is the session's."""
    name = f"img-{uuid.uuid4().hex[:6]}"
    r = me.troupe(
        "session", "create", name, "--image", STATIC_ONLY, "--cluster-size", "3",
        "--cpu", "0.25", "--mem", "256m", "--ssh-key", "none", "--type", "batch",
        "--startup-command", "env; ssh sub2 hostname; /ldconfig --version; exit 3", "--wait",
    )  # fmt: skip
    try:
        assert r.returncode == 3, (r.stdout + r.stderr).decode()
        log = ok(me.troupe("session", "logs", name, "--container", "main1"))
        assert "BACKENDAI_CLUSTER_HOST=main1" in log and "MASTER_ADDR=main1" in log, log
        assert "PATH=" in log and ":/opt/troupe-runtime/bin" in log, log
        assert any(x.strip().endswith("sub2") and "=" not in x for x in log.splitlines()), log
        assert "ldconfig (" in log, log
    finally:
        me.troupe("session", "destroy", name)


def test_bare_mpirun_in_an_open_mpi_image_without_sshd(me: User, images: None) -> None:
    name = session(me, MPI_NOSSH, "--ssh-key", "none")
    try:
        out = ok(me.troupe("session", "exec", name, "--", "mpirun", "-np", "3", "hostname"))
        assert sorted(mpirun_output(out)) == ["main1", "sub1", "sub2"], out
    finally:
        me.troupe("session", "destroy", name)


def test_an_image_for_another_architecture_is_refused_clearly(
    server: Server, me: User, images: None
) -> None:
    name = f"img-{uuid.uuid4().hex[:6]}"
    r = me.troupe(
        "session", "create", name, "--image", ARM64, "--cluster-size", "3",
        "--cpu", "0.25", "--mem", "256m", "--ssh-key", "none", "--wait",
    )  # fmt: skip
    try:
        text = (r.stdout + r.stderr).decode()
        assert r.returncode != 0, text
        assert f"image {ARM64} is built for linux/arm64" in text, text
        assert "linux/amd64" in text, text
        info = server.client().wait_session(name, until="final", timeout=60)
        assert info.status == "ERROR", info
        assert info.status_info.get("field") in (None, "image"), info.status_info
        for kind in ("ps", "network"):  # nothing left
            left = docker(kind, *(["-a"] if kind == "ps" else ["ls"]), "-q", "--filter",
                          f"label=troupe.session={info.id}")  # fmt: skip
            assert left.stdout == "", kind
    finally:
        me.troupe("session", "destroy", name)


@pytest.mark.parametrize("image", [MINBASE, BUSYBOX_ONLY, STATIC_ONLY])
def test_restart_in_place_whatever_the_shell(me: User, images: None, image: str) -> None:
    """A session that may restart: its entrypoints supervise their kernels under dash (USER
    1234), busybox's sh, or the runtime's sh in an image without one; after sub1's container is
    killed, the others are set up again in their running containers (not started again)."""
    name = session(me, image, "--ssh-key", "none", "--max-restarts", "1")
    try:
        info = json.loads(ok(me.troupe("session", "info", name, "--json")))
        ids = {k["hostname"]: k["container_id"] for k in info["kernels"]}

        def started(host: str) -> str:
            return docker("inspect", "-f", "{{.State.StartedAt}}", ids[host]).stdout.strip()

        before = started("main1")
        docker("kill", ids["sub1"])
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            info = json.loads(ok(me.troupe("session", "info", name, "--json")))
            if info["status"] == "RUNNING" and info["restarts"] == 1:
                break
            assert info["status"] not in ("ERROR", "TERMINATED"), info
            time.sleep(0.5)
        assert (info["status"], info["restarts"]) == ("RUNNING", 1), info
        assert started("main1") == before
        assert me.sh(name, "echo $TROUPE_RESTART_COUNT").strip() == "1"
        assert me.sh(name, "ssh sub2 'echo $TROUPE_RESTART_COUNT'").strip() == "1"
    finally:
        me.troupe("session", "destroy", name)
