"""The agent's side of the hardening audit on the real engine: bounded kernel logs (on disk and
when saved), process and file limits, no-new-privileges, engine errors without host paths,
mounts checked again, a private data root and private folders, agents served over verified
HTTPS, and agents that act only on troupe kernels, as work or root.

Everything here is named ``test-...`` (sessions, networks, agents, the foreign container) and
removed in ``finally``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import os
import random
import shutil
import signal
import ssl
import subprocess
import sys
import time
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.conftest import (
    BASE_IMAGE,
    Server,
    docker,
    free_port,
    remove_leftovers,
    start_server,
    stop_server,
)
from troupe.agent.docker_backend import DockerAgent
from troupe.agent.resources import nofile_limit
from troupe.api import defaults
from troupe.api.agent import FileSpec, KernelSpec, MountSpec, NetworkSpec
from troupe.api.errors import AgentFailed, Invalid, NotFound
from troupe.manager.remote_agent import RemoteAgent, tls_context

pytestmark = pytest.mark.docker
SAVED = 1024**2
PIDS = 64
TOKEN = "test-agent-token"


def free_subnet(used: list[str]) -> str:
    taken = [ipaddress.ip_network(s) for s in used]
    while True:
        net = ipaddress.ip_network(f"10.251.{random.randrange(256)}.0/24")
        if not any(net.overlaps(t) for t in taken):  # type: ignore[arg-type]
            return str(net)


@pytest.fixture
async def agent(tmp_path: Path, docker_engine: None) -> AsyncIterator[DockerAgent]:
    root = tmp_path / "root"
    (root / "folders").mkdir(parents=True)
    root.chmod(0o755)
    (root / "folders").chmod(0o755)
    a = DockerAgent("test-hard", data_root=root, pids_limit=PIDS, saved_log_bytes=SAVED)
    await a.start()
    try:
        yield a
    finally:
        await a.close()


class Session:
    """One kernel at a time on a fresh network of its own, all removed at the end."""

    def __init__(self, agent: DockerAgent) -> None:
        self.agent = agent
        self.id = f"test-{uuid.uuid4()}"
        self.network = f"test-hard-{self.id[5:13]}"

    def spec(self, command: list[str], image: str = BASE_IMAGE, **kw: object) -> KernelSpec:
        return KernelSpec(
            session_id=self.id,
            kernel_id=self.id,
            owner="test",
            hostname="main1",
            image=image,
            network=self.network,
            env={},
            cpu=0.5,
            mem=256 * 1024**2,
            command=command,
            **kw,  # type: ignore[arg-type]
        )

    async def create_network(self) -> None:
        subnet = free_subnet(await self.agent.used_subnets())
        await self.agent.create_network(
            NetworkSpec(name=self.network, session_id=self.id, owner="test", subnet=subnet)
        )

    async def start(self, command: list[str], image: str = BASE_IMAGE) -> str:
        (started,) = await self.agent.create_kernels([self.spec(command, image)])
        return started.container_id

    async def start_ready(self) -> str:
        """An idle kernel whose entrypoint is done (user work exists)."""
        cid = await self.start([])
        await self.agent.wait_ready({"main1": cid}, ["main1"], 60)
        return cid

    async def remove(self) -> None:
        with contextlib.suppress(Exception):
            await self.agent.remove_kernels(self.id)
        with contextlib.suppress(Exception):
            await self.agent.remove_session_networks(self.id)
        remove_leftovers({self.id})


@pytest.fixture
async def session(agent: DockerAgent) -> AsyncIterator[Session]:
    s = Session(agent)
    await s.create_network()
    try:
        yield s
    finally:
        await s.remove()


def inspect(container_id: str) -> dict[str, object]:
    return json.loads(docker("inspect", container_id).stdout)[0]  # type: ignore[no-any-return]


async def wait_exited(container_id: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if docker("inspect", "-f", "{{.State.Running}}", container_id).stdout.strip() == "false":
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"{container_id} still running")


# -- L6 ----------------------------------------------------------------------------------------
async def test_kernel_logs_are_bounded_on_disk_and_when_saved(
    session: Session, capsys: pytest.CaptureFixture[str]
) -> None:
    cid = await session.start(
        [
            "/bin/sh",
            "-c",
            "head -c 20000000 /dev/zero | tr '\\0' x | fold -w 100; echo; echo last-line",
        ]
    )
    await wait_exited(cid)
    info = inspect(cid)
    assert info["HostConfig"]["LogConfig"] == {  # type: ignore[index]
        "Type": "json-file",
        "Config": {"max-size": "10m", "max-file": "3"},
    }
    log_path = Path(str(info["LogPath"]))
    on_disk = sum(p.stat().st_size for p in log_path.parent.glob(log_path.name + "*"))
    assert on_disk <= 3 * 10 * 1024**2 + 64 * 1024  # about 34 MB were written as json-file

    tracemalloc.start()
    started = time.monotonic()
    try:
        saved = await session.agent.remove_kernels(session.id)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    took = time.monotonic() - started
    text = saved["main1"]
    lines = text.splitlines()
    with capsys.disabled():
        print(
            f"\n[L6] engine log files {on_disk / 1024**2:.1f} MiB; saved {len(text.encode())} "
            f"bytes (cap {SAVED}); agent memory peak {peak / 1024**2:.2f} MiB; {took:.1f} s"
        )
    assert len(text.encode()) <= SAVED
    assert lines[0].startswith("[troupe: earlier output cut, ")
    assert lines[-1].endswith(" last-line")
    assert all(line.endswith(" " + "x" * 100) for line in lines[1:-1])  # whole, timestamped
    assert len(lines) > SAVED // 200
    assert peak < 4 * SAVED  # never the whole log (about 17 MiB are read)
    assert docker("ps", "-aq", "--filter", f"label=troupe.session={session.id}").stdout == ""


async def test_logs_are_streamed_line_by_line_and_followed(session: Session) -> None:
    cid = await session.start(
        [
            "/bin/sh",
            "-c",
            "echo one; echo two >&2; i=0; while :; do i=$((i+1)); echo t$i; sleep 0.2; done",
        ]
    )
    followed: list[str] = []
    async with asyncio.timeout(20):
        async for line in await session.agent.open_logs(cid, follow=True):
            followed.append(line)
            if len(followed) == 6:
                break
    texts = [line.split(" ", 1)[1] for line in followed]
    assert "two\n" in texts  # stderr: its order against stdout is the engine's
    assert [t for t in texts if t != "two\n"][:4] == ["one\n", "t1\n", "t2\n", "t3\n"]
    assert all(line[:4].isdigit() and line.split(" ", 1)[0].endswith("Z") for line in followed)
    now = [line async for line in await session.agent.open_logs(cid)]
    assert sorted(now[:2]) == sorted(followed[:2]) and len(now) >= 6


# -- L7 ----------------------------------------------------------------------------------------
async def test_kernel_processes_files_and_privileges_are_limited(session: Session) -> None:
    cid = await session.start_ready()
    host = inspect(cid)["HostConfig"]
    nofile = nofile_limit(defaults.NOFILE)
    assert host["PidsLimit"] == PIDS  # type: ignore[index]
    assert host["Ulimits"] == [{"Name": "nofile", "Hard": nofile, "Soft": nofile}]  # type: ignore[index]
    assert host["SecurityOpt"] == ["no-new-privileges:true"]  # type: ignore[index]

    a = session.agent
    code, out = await a.exec_collect(
        cid, ["sh", "-c", "ulimit -n; grep NoNewPrivs /proc/self/status"]
    )
    assert (code, out.split()) == (0, [str(nofile), "NoNewPrivs:", "1"])
    # a setuid-root binary does not make user work root
    code, out = await a.exec_collect(
        cid, ["sh", "-c", "cp /usr/bin/id /tmp/suid-id && chmod 4755 /tmp/suid-id"], user="root"
    )
    assert code == 0, out
    assert await a.exec_collect(cid, ["/tmp/suid-id", "-u"]) == (0, "1000\n")
    # a fork bomb stops at the limit
    code, out = await a.exec_collect(
        cid, ["sh", "-c", "for i in $(seq 200); do sleep 2 & done; echo all-started"]
    )
    assert code != 0 and "fork" in out.lower() and "all-started" not in out, (code, out)


# -- L17 ---------------------------------------------------------------------------------------
async def test_engine_errors_say_the_cause_without_host_paths(
    session: Session, caplog: pytest.LogCaptureFixture
) -> None:
    """runc cannot mount a folder over a file: its message names host paths (the container's
    root file system under /var/lib/docker or /proc/self/fd) that must not reach the manager."""
    caplog.set_level(logging.WARNING, "troupe.agent.engine")
    mount = MountSpec(folder_id=str(uuid.uuid4()), target="/usr/bin/id")
    with pytest.raises(AgentFailed) as e:
        await session.agent.create_kernels([session.spec([], mounts=[mount])])
    message = e.value.message
    assert e.value.kernel == "main1"
    assert '"/usr/bin/id"' in message and "not a directory" in message, message
    assert f'"<data root>/folders/{mount.folder_id}"' in message, message
    assert str(session.agent.data_root) not in message
    for noise in ("OCI runtime", "runc", ".go:", "/var/lib/docker", "/proc/", "unknown"):
        assert noise not in message, message
    engine_said = [r.getMessage() for r in caplog.records if r.name == "troupe.agent.engine"]
    assert any("OCI runtime" in m for m in engine_said)  # the whole text stays on the agent
    print(f"\n[L17] manager sees: {message}\n[L17] agent logged: {engine_said[-1]}")


# -- S3 (c) ------------------------------------------------------------------------------------
async def test_mounts_outside_the_folders_are_refused_before_anything_is_created(
    session: Session, tmp_path: Path
) -> None:
    before = os.listdir(tmp_path)
    linked = str(uuid.uuid4())
    (session.agent.folders_root / linked).symlink_to(tmp_path)
    for folder_id in ("../../..", "../../etc", linked):
        spec = session.spec([], mounts=[MountSpec(folder_id=folder_id, target="/home/work/data")])
        with pytest.raises(Invalid):
            await session.agent.create_kernels([session.spec([]), spec])
    assert docker("ps", "-aq", "--filter", f"label=troupe.session={session.id}").stdout == ""
    assert sorted(os.listdir(tmp_path)) == sorted(before)
    assert os.listdir(session.agent.folders_root) == [linked]


# -- L3 ----------------------------------------------------------------------------------------
async def test_agent_makes_its_data_root_private(agent: DockerAgent) -> None:
    assert agent.data_root.stat().st_mode & 0o777 == 0o700
    assert agent.folders_root.stat().st_mode & 0o777 == 0o700


# -- N10: a folder is 0700, and the kernel's work uses it ------------------------------------
async def test_a_mounted_folder_is_private_and_works_for_user_work(session: Session) -> None:
    folder_id = str(uuid.uuid4())
    mount = MountSpec(folder_id=folder_id, target="/home/work/data")
    # what the manager's kernel.conf says of a writable mount: give it to work
    conf = FileSpec(path="/home/config/kernel.conf", content="_troupe_chown='/home/work/data'\n")
    old = os.umask(0)
    try:
        (started,) = await session.agent.create_kernels(
            [session.spec([], mounts=[mount], files=[conf])]
        )
    finally:
        os.umask(old)
    await session.agent.wait_ready({"main1": started.container_id}, ["main1"], 60)
    folder = session.agent.folders_root / folder_id
    try:
        st = folder.stat()
        assert (st.st_mode & 0o777, st.st_uid) == (0o700, 1000)
        code, out = await session.agent.exec_collect(
            started.container_id, ["sh", "-c", "echo hi > data/f && cat data/f && stat -c %a data"]
        )
        assert (code, out.split()) == (0, ["hi", "700"]), out
    finally:
        await session.remove()
        shutil.rmtree(folder, ignore_errors=True)


# -- S3 (a, b): agents over HTTPS, verified with the manager's CA file -------------------------
@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own CA) and its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "agent.pem", tmp_path / "agent-key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_file.chmod(0o600)
    return cert_file, key_file


@contextlib.contextmanager
def tls_agent(
    tmp_path: Path, tls: tuple[Path, Path], manager: str, port: int
) -> Iterator[subprocess.Popen[bytes]]:
    log = tmp_path / "agent.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "troupe",
                "agent",
                "--manager",
                manager,
                "--token",
                TOKEN,
                "--listen",
                f"127.0.0.1:{port}",
                "--tls-cert",
                str(tls[0]),
                "--tls-key",
                str(tls[1]),
                "--name",
                "test-tls",
                "--cpu",
                "1",
                "--mem",
                "1g",
                "--data-root",
                str(tmp_path / "agent-root"),
                "--heartbeat",
                "0.5",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


async def test_remote_agent_reaches_an_https_agent_only_when_it_verifies(
    tmp_path: Path, tls_files: tuple[Path, Path], docker_engine: None
) -> None:
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    ctx = tls_context(tls_files[0])
    # no manager answers: the agent serves all the same while it keeps trying to register
    with tls_agent(tmp_path, tls_files, f"http://127.0.0.1:{free_port()}", port) as proc:
        verified = RemoteAgent("test-tls", url, TOKEN, verify=ctx)
        unverified = RemoteAgent("test-tls", url, TOKEN)
        plain = RemoteAgent("test-tls", f"http://127.0.0.1:{port}", TOKEN)
        try:
            deadline = time.monotonic() + 30
            while True:
                assert proc.poll() is None, (tmp_path / "agent.log").read_text()
                try:
                    cap = await verified.capacity()
                    break
                except AgentFailed:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.2)
            assert cap.name == "test-tls" and cap.cpu == 1
            with pytest.raises(AgentFailed, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify"):
                await unverified.capacity()
            with pytest.raises(AgentFailed):
                await plain.capacity()
            # terminals go over wss:// with the same context: the TLS handshake passes and the
            # agent itself refuses the unknown container
            from websockets.exceptions import InvalidStatus

            with pytest.raises(InvalidStatus) as refused:
                async with verified.shell("test-no-such-container"):
                    pass
            assert refused.value.response.status_code == 404
            with pytest.raises(ssl.SSLCertVerificationError):
                async with unverified.shell("test-no-such-container"):
                    pass
        finally:
            for a in (verified, unverified, plain):
                await a.close()


def test_manager_with_agent_ca_uses_an_https_agent(
    tmp_path: Path, tls_files: tuple[Path, Path], docker_engine: None
) -> None:
    server: Server = start_server(
        tmp_path,
        "--no-local-agent",
        "--agent-token",
        TOKEN,
        "--agent-ca",
        str(tls_files[0]),
    )
    try:
        with tls_agent(tmp_path, tls_files, server.url, free_port()):
            server.wait_agents({"test-tls": "ALIVE"}, timeout=30)
            # listing images makes the manager call the agent, over verified HTTPS
            names = {i.name for i in server.client().list_images()}
            assert BASE_IMAGE in names, server.log_path.read_text()[-3000:]
    finally:
        stop_server(server)


# -- N5: only troupe kernels, as work or root ------------------------------------------------
@pytest.fixture
def foreign_container() -> Iterator[str]:
    """A container that is not troupe's (no troupe labels), removed whatever happens."""
    name = f"test-n5-foreign-{uuid.uuid4().hex[:12]}"
    try:
        cid = docker("run", "-d", "--name", name, BASE_IMAGE, "sleep", "600").stdout.strip()
        yield cid
    finally:
        docker("rm", "-f", name, check=False)


async def test_agent_acts_only_on_its_kernels_and_as_work_or_root(
    session: Session, foreign_container: str
) -> None:
    """Finding N5 (docs/reliability.md): with the agent token, logs, exec, pipe (tunnels, copies)
    and terminals of a container that is not a troupe kernel, and commands as any other user."""
    a = session.agent
    name = inspect(foreign_container)["Name"].lstrip("/")  # type: ignore[union-attr]
    for ref in (foreign_container, foreign_container[:12], name):
        with pytest.raises(NotFound, match="not a troupe kernel"):
            await a.open_logs(ref)
        with pytest.raises(NotFound, match="not a troupe kernel"):
            await a.open_exec(ref, ["sh", "-c", "touch /tmp/pwned"], user="root")
        with pytest.raises(NotFound, match="not a troupe kernel"):
            async with a.pipe(ref, ["sh", "-c", "touch /tmp/pwned"], user="root"):
                pass
        with pytest.raises(NotFound, match="not a troupe kernel"):
            async with a.shell(ref, user="root"):
                pass
        with pytest.raises(NotFound, match="not a troupe kernel"):
            await a.signal_go(ref)
        code, out = await a.exec_collect(ref, ["sh", "-c", "touch /tmp/pwned"], user="root")
        assert code == -1 and "not a troupe kernel" in out
    assert docker("exec", foreign_container, "ls", "/tmp").stdout.split() == []  # untouched

    cid = await session.start_ready()
    for user in ("nobody", "0", "1000", "0:0", "root:root", "daemon"):
        with pytest.raises(Invalid, match="user: must be 'work' or 'root'"):
            await a.open_exec(cid, ["id"], user=user)
        with pytest.raises(Invalid, match="user: must be 'work' or 'root'"):
            async with a.pipe(cid, ["id"], user=user):
                pass
        with pytest.raises(Invalid, match="user: must be 'work' or 'root'"):
            async with a.shell(cid, user=user):
                pass
    assert await a.exec_collect(cid, ["id", "-un"]) == (0, "work\n")
    assert await a.exec_collect(cid, ["id", "-un"], user="root") == (0, "root\n")
    # a kernel removed behind the agent's back is not trusted from the cache
    docker("rm", "-f", cid)
    with pytest.raises(NotFound):
        await a.open_exec(cid, ["id"])
    assert cid not in a.kernels


async def test_troupe_images_say_they_have_sshd(agent: DockerAgent) -> None:
    """``ImageInfo.has_sshd`` from the engine's own image list (it was always None)."""
    infos = {i.name: i.has_sshd for i in await agent.images()}
    assert infos[BASE_IMAGE] is True, infos
