"""The agent's side of the hardening audit, without an engine: container limits, mount checks,
engine errors without host paths, private data dirs, the daemon's credential, TLS options."""

from __future__ import annotations

import json
import logging
import os
import ssl
import types
import uuid
from pathlib import Path

import httpx
import pytest
from aiodocker.exceptions import DockerError
from typer.testing import CliRunner

from troupe.agent import docker_backend, engine
from troupe.agent.daemon import CREDENTIAL_HEADER, AgentConfig, AgentDaemon
from troupe.agent.docker_backend import DockerAgent
from troupe.agent.engine import own_place, step, summary
from troupe.agent.kernel import KernelLimits, check_mount, container_config, folder_path
from troupe.agent.logs import _line_start, _lines, _payloads, cut_note
from troupe.agent.resources import nofile_limit
from troupe.api import defaults
from troupe.api.agent import AgentCapacity, KernelExit, KernelSpec, MountSpec
from troupe.api.errors import AgentFailed, Invalid
from troupe.main import app as cli_app
from troupe.manager.remote_agent import RemoteAgent, verifying_with

TOKEN = "shared-token"


def spec(*mounts: MountSpec) -> KernelSpec:
    return KernelSpec(
        session_id="s" * 36,
        kernel_id="k",
        owner="u",
        hostname="main1",
        image="img",
        network="net",
        env={},
        cpu=0.5,
        mem=2**28,
        mounts=list(mounts),
    )


# -- L6 / L7: what a kernel's container may take ---------------------------------------------
def test_container_config_bounds_logs_processes_files_and_privileges() -> None:
    host = container_config(spec(), "/runner", "/srv")["HostConfig"]
    assert host["LogConfig"] == {
        "Type": "json-file",
        "Config": {
            "max-size": defaults.ENGINE_LOG_MAX_SIZE,
            "max-file": str(defaults.ENGINE_LOG_MAX_FILES),
        },
    }
    assert host["PidsLimit"] == defaults.PIDS_LIMIT
    assert host["Ulimits"] == [{"Name": "nofile", "Soft": defaults.NOFILE, "Hard": defaults.NOFILE}]
    assert host["SecurityOpt"] == ["no-new-privileges:true"]

    limits = KernelLimits(pids=64, nofile=1024, log_max_size="1m", log_max_files=2)
    host = container_config(spec(), "/runner", "/srv", limits)["HostConfig"]
    assert host["PidsLimit"] == 64
    assert host["Ulimits"][0]["Hard"] == host["Ulimits"][0]["Soft"] == 1024
    assert host["LogConfig"]["Config"] == {"max-size": "1m", "max-file": "2"}


def test_docker_agent_takes_the_limits_as_arguments() -> None:
    a = DockerAgent("x", pids_limit=100, nofile=2048, saved_log_bytes=4096)
    assert a.limits.pids == 100 and a.limits.nofile == 2048 and a.saved_log_bytes == 4096
    b = DockerAgent("y")
    assert b.limits == KernelLimits() and b.saved_log_bytes == defaults.SAVED_LOG_BYTES


def test_nofile_is_clamped_to_this_hosts_hard_limit() -> None:
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert nofile_limit(16) == 16
    if hard != resource.RLIM_INFINITY:
        assert nofile_limit(hard + 1) == hard


# -- L6: the cut of a saved log ------------------------------------------------------------------
def test_a_cut_log_starts_at_a_whole_line_or_character() -> None:
    assert _line_start(b"tail of a line\nwhole line\n") == len(b"tail of a line\n")
    assert _line_start("é and more".encode()[1:]) == 1
    assert _line_start(b"no newline") == 0
    assert _line_start(b"ends with its only newline\n") == 0
    assert len(cut_note(10**15).encode()) < 80


class Body:
    """An engine answer read ``sizes`` bytes at a time (whatever a read asks for)."""

    def __init__(self, data: bytes, sizes: list[int]) -> None:
        self.data, self.sizes = data, sizes

    async def read(self, n: int) -> bytes:
        take = min(n, self.sizes.pop(0) if self.sizes else n)
        out, self.data = self.data[:take], self.data[take:]
        return out


@pytest.mark.parametrize("sizes", [[], [1] * 200, [3, 7, 8, 9, 1, 100], [9, 2, 5]])
async def test_engine_frames_are_read_in_pieces_whatever_the_reads_return(
    sizes: list[int],
) -> None:
    lines = [b"first line\n", b"", "é second\n".encode(), b"x" * 70 + b"\n"]
    data = b"".join(
        bytes([1 + i % 2, 0, 0, 0]) + len(p).to_bytes(4, "big") + p for i, p in enumerate(lines)
    )
    pieces = [p async for p in _payloads(Body(data, list(sizes)))]  # type: ignore[arg-type]
    assert b"".join(pieces) == b"".join(lines)

    async def chunks():  # type: ignore[no-untyped-def]
        for p in pieces:
            yield p

    assert [line async for line in _lines(chunks())] == [p.decode() for p in lines if p]


# -- S3 (c): mounts checked again on the agent -----------------------------------------------
@pytest.mark.parametrize(
    "folder_id", ["../../..", "..", "", "abc", "/etc", f"{uuid.uuid4()}/..", f"../{uuid.uuid4()}"]
)
def test_mounts_of_anything_but_a_folder_id_are_refused(folder_id: str, tmp_path: Path) -> None:
    m = MountSpec(folder_id=folder_id, target="/home/work/x")
    with pytest.raises(Invalid) as e:
        folder_path(tmp_path, m)
    assert e.value.field == "mounts"


@pytest.mark.parametrize("target", ["/", "relative", "/home/work/x:ro", "/a/../etc", "/a,b", ""])
def test_mount_targets_the_bind_syntax_could_misread_are_refused(target: str) -> None:
    with pytest.raises(Invalid):
        check_mount(MountSpec(folder_id=str(uuid.uuid4()), target=target))


def test_a_folder_that_links_out_of_the_data_root_is_refused(tmp_path: Path) -> None:
    folders, outside = tmp_path / "folders", tmp_path / "outside"
    folders.mkdir()
    outside.mkdir()
    fid = str(uuid.uuid4())
    assert (
        folder_path(folders, MountSpec(folder_id=fid, target="/home/work/d"))
        == (folders / fid).resolve()
    )
    bad = str(uuid.uuid4())
    (folders / bad).symlink_to(outside)
    with pytest.raises(Invalid, match="outside"):
        folder_path(folders, MountSpec(folder_id=bad, target="/home/work/d"))


async def test_create_kernels_refuses_a_bad_mount_before_touching_the_engine(
    tmp_path: Path,
) -> None:
    agent = DockerAgent("x", data_root=tmp_path / "root")  # never started: no engine at all
    good = MountSpec(folder_id=str(uuid.uuid4()), target="/home/work/a")
    with pytest.raises(Invalid):
        await agent.create_kernels(
            [spec(good), spec(MountSpec(folder_id="../../..", target="/home/work/b"))]
        )
    assert not (tmp_path / "root").exists()


# -- L3: private data dirs -----------------------------------------------------------------------
def test_data_root_and_folders_are_made_private(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "folders").mkdir(parents=True, mode=0o777)
    os.chmod(root, 0o777)
    os.chmod(root / "folders", 0o755)
    DockerAgent("x", data_root=root).private_dirs()
    assert (root.stat().st_mode & 0o777, (root / "folders").stat().st_mode & 0o777) == (
        0o700,
        0o700,
    )
    fresh = tmp_path / "fresh" / "root"
    old = os.umask(0)
    try:
        DockerAgent("y", data_root=fresh).private_dirs()
    finally:
        os.umask(old)
    assert fresh.stat().st_mode & 0o777 == 0o700
    assert (fresh / "folders").stat().st_mode & 0o777 == 0o700


# -- L17: engine errors without host paths ------------------------------------------------------
@pytest.mark.parametrize(
    ("engine", "summarised"),
    [
        (
            "failed to create shim task: OCI runtime create failed: runc create failed: unable to "
            'start container process: exec: "nosuch": executable file not found in $PATH: unknown',
            'exec: "nosuch": executable file not found in $PATH',
        ),
        (
            "OCI runtime create failed: container_linux.go:380: starting container process "
            'caused: exec: "/bin/sh": stat /bin/sh: no such file or directory: unknown',
            'exec: "/bin/sh": stat /bin/sh: no such file or directory',
        ),
        (
            "OCI runtime create failed: container_linux.go:380: starting container process caused:"
            " process_linux.go:545: container init caused: rootfs_linux.go:76: mounting "
            '"/srv/f" to rootfs at "/var/lib/docker/overlay2/0a1b/merged/home/work/x" caused: '
            "mount through procfd: not a directory: unknown",
            'mounting "/srv/f" to rootfs at "/home/work/x" caused: mount through procfd: '
            "not a directory",
        ),
        (
            "failed to write 64 to pids.max: open /sys/fs/cgroup/pids/docker/0a1b/pids.max: "
            "no such file or directory",
            "failed to write 64 to pids.max: open <host>/pids.max: no such file or directory",
        ),
        (
            "mount /tmp/a:/etc (via /proc/self/fd/6), flags: 0x5001: not a directory: unknown",
            "mount /tmp/a:/etc (via <host>), flags: 0x5001: not a directory",
        ),
        (
            "open /proc/4242/ns/net: no such file; /run/containerd/io.containerd.runtime.v2.task/"
            "moby/0a1b/log.json, /var/run/docker/netns/abc",
            "open <host>/net: no such file; <host>/log.json, <host>/abc",
        ),
        ("No such container: 0a1b", "No such container: 0a1b"),
    ],
)
def test_engine_errors_are_summarised_without_host_paths(engine: str, summarised: str) -> None:
    assert summary(engine) == summarised


def test_the_agents_own_places_are_named_not_shown() -> None:
    own_place("/srv/troupe-data", "<data root>")
    text = 'error mounting "/srv/troupe-data/folders/f" to rootfs at "/home/work/f"'
    assert summary(text) == 'error mounting "<data root>/folders/f" to rootfs at "/home/work/f"'
    assert summary("/srv/troupe-data2/x") == "/srv/troupe-data2/x"  # another place


def test_a_failed_step_says_the_summary_and_logs_the_engine_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = (
        "OCI runtime create failed: container_linux.go:380: starting container process caused: "
        'exec: "nosuch": executable file not found in $PATH: unknown'
    )
    caplog.set_level(logging.WARNING, "troupe.agent.engine")
    with pytest.raises(AgentFailed) as e, step(kernel="sub1"):
        raise DockerError(500, text)
    assert e.value.message == 'exec: "nosuch": executable file not found in $PATH'
    assert e.value.kernel == "sub1"
    assert text in caplog.text


# -- L9: the daemon's own credential -------------------------------------------------------------
class Manager:
    """A manager as the daemon sees it, on httpx's MockTransport: records each request."""

    def __init__(self, register_status: int = 200) -> None:
        self.requests: list[httpx.Request] = []
        self.register_status = register_status
        self.issued = 0
        self.refuse: set[str] = set()  # credentials answered with 401

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path
        if path == "/v1/agents/register":
            if request.headers["authorization"] != f"Bearer {TOKEN}":
                return httpx.Response(401)
            if self.register_status == 204:
                return httpx.Response(204)
            shown = request.headers.get(CREDENTIAL_HEADER)
            if shown in self.refuse:
                return httpx.Response(401)
            if shown is not None:
                return httpx.Response(200, json={"credential": shown})
            self.issued += 1
            return httpx.Response(200, json={"credential": f"cred-{self.issued}"})
        sent = request.headers["authorization"].removeprefix("Bearer ")
        if sent in self.refuse:
            return httpx.Response(401, json={"error": {"code": "unauthorized", "message": "no"}})
        return httpx.Response(204)

    def of(self, suffix: str) -> list[httpx.Request]:
        return [r for r in self.requests if r.url.path.endswith(suffix)]


def daemon(manager: Manager) -> AgentDaemon:
    config = AgentConfig(
        manager="http://manager.test:8090",
        token=TOKEN,
        listen_host="127.0.0.1",
        listen_port=6011,
        name="far",
    )
    d = AgentDaemon(config, transport=httpx.MockTransport(manager))

    async def capacity() -> AgentCapacity:
        return AgentCapacity(name="far", cpu=1, mem=2**30)

    d.backend.capacity = capacity  # type: ignore[method-assign]
    return d


async def test_registration_keeps_the_credential_and_heartbeats_and_events_use_it() -> None:
    m = Manager()
    d = daemon(m)
    await d._register()
    (reg,) = m.of("/register")
    assert reg.headers["authorization"] == f"Bearer {TOKEN}"
    assert CREDENTIAL_HEADER.lower() not in reg.headers
    assert json.loads(reg.content)["address"] == "http://127.0.0.1:6011"
    assert d.credential == "cred-1"

    await d._heartbeat()
    await d._report(KernelExit(session_id="s", kernel_id="k", exit_code=1))
    assert m.of("/heartbeat")[0].headers["authorization"] == "Bearer cred-1"
    assert m.of("/events")[0].headers["authorization"] == "Bearer cred-1"

    # a manager restart: registering again shows the credential and keeps the identity
    await d._register()
    again = m.of("/register")[1]
    assert again.headers["authorization"] == f"Bearer {TOKEN}"
    assert again.headers[CREDENTIAL_HEADER] == "cred-1"
    assert d.credential == "cred-1"


async def test_a_heartbeat_refused_with_401_registers_again() -> None:
    m = Manager()
    d = daemon(m)
    await d._register()
    m.refuse.add("cred-1")  # the manager no longer accepts this credential
    await d._heartbeat()
    assert [r.url.path.rsplit("/", 1)[-1] for r in m.requests] == [
        "register",
        "heartbeat",
        "register",  # with cred-1 shown: refused, so it is dropped ...
        "register",  # ... and a fresh registration gets a new one
    ]
    assert m.of("/register")[1].headers[CREDENTIAL_HEADER] == "cred-1"
    assert CREDENTIAL_HEADER.lower() not in m.of("/register")[2].headers
    assert d.credential == "cred-2"
    await d._heartbeat()
    assert m.requests[-1].headers["authorization"] == "Bearer cred-2"


async def test_an_event_refused_with_401_registers_again_and_is_delivered() -> None:
    m = Manager()
    d = daemon(m)
    await d._register()
    m.refuse.add("cred-1")
    await d._report(KernelExit(session_id="s", kernel_id="k", exit_code=3))
    events = m.of("/events")
    assert [e.headers["authorization"] for e in events] == ["Bearer cred-1", "Bearer cred-2"]


async def test_an_old_manager_answering_204_leaves_the_shared_token() -> None:
    m = Manager(register_status=204)
    d = daemon(m)
    await d._register()
    assert d.credential is None
    await d._heartbeat()
    assert m.of("/heartbeat")[0].headers["authorization"] == f"Bearer {TOKEN}"


# -- S3 (a, b): loopback by default, TLS options ---------------------------------------------------
def test_agent_listens_on_loopback_by_default_and_advertises_https_with_tls() -> None:
    assert defaults.AGENT_LISTEN.startswith("127.0.0.1:")
    base = {"manager": "http://m", "token": "t", "listen_host": "h", "listen_port": 1, "name": "n"}
    assert AgentConfig(**base).address == "http://h:1"  # type: ignore[arg-type]
    tls = AgentConfig(**base, tls_cert=Path("c"), tls_key=Path("k"))  # type: ignore[arg-type]
    assert tls.address == "https://h:1"


def test_agent_command_wants_both_tls_files(tmp_path: Path) -> None:
    cert = tmp_path / "c.pem"
    cert.write_text("x")
    args = ["agent", "--manager", "http://m:1", "--token", "t", "--tls-cert", str(cert)]
    r = CliRunner().invoke(cli_app, args)
    assert r.exit_code == 2 and "--tls-cert and --tls-key" in r.output
    r = CliRunner().invoke(cli_app, [*args, "--tls-key", str(tmp_path / "missing.pem")])
    assert r.exit_code == 2 and "no such file" in r.output
    help_text = CliRunner().invoke(cli_app, ["agent", "--help"], env={"COLUMNS": "200"}).output
    assert "127.0.0.1:6011" in help_text and "--tls-cert" in help_text


def test_manager_verifies_agents_with_its_ca_file(tmp_path: Path) -> None:
    plain = verifying_with(None)("a", "https://h:1", "t")
    assert plain._verify is True
    with pytest.raises(OSError):  # a CA file that is not there fails at start
        verifying_with(tmp_path / "missing.pem")
    ca = ssl.get_default_verify_paths().cafile or ssl.get_default_verify_paths().openssl_cafile
    if ca and Path(ca).is_file():
        agent = verifying_with(Path(ca))("a", "https://h:1", "t")
        assert isinstance(agent, RemoteAgent) and isinstance(agent._verify, ssl.SSLContext)


@pytest.mark.parametrize(
    ("code", "fails"), [(0, False), (137, False), (143, False), (1, True), (126, True), (-1, True)]
)
async def test_a_batch_word_killed_after_it_was_read_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, fails: bool
) -> None:
    """The go's exec killed by a signal (the supervisor's sweep of a command that failed at
    once, or the container's end) was read: the kernel's exit says what followed, not a
    failure to start the batch command; an exec that could not run or failed is one."""
    agent = DockerAgent("x", data_root=tmp_path / "root")

    async def resolve(ref: str) -> str:
        return ref

    async def exec_collect(cid: str, command: list[str], user: str = "work") -> tuple[int, str]:
        return code, "said"

    asked: list[str] = []

    async def end_if_out_of_memory(docker: object, cid: str) -> bool:
        asked.append(cid)
        return False

    monkeypatch.setattr(agent.kernels, "resolve", resolve)
    monkeypatch.setattr(agent, "exec_collect", exec_collect)
    monkeypatch.setattr(agent, "_docker", object())
    monkeypatch.setattr(docker_backend, "end_if_out_of_memory", end_if_out_of_memory)
    if fails:
        with pytest.raises(AgentFailed, match="could not start the batch command: said"):
            await agent.signal_go("c")
    else:
        await agent.signal_go("c")
    # (a signal may be the host's, for memory, before the word: the container goes then)
    assert asked == (["c"] if code >= 128 else [])


@pytest.mark.parametrize(
    ("state", "killed"),
    [
        ({"Running": True, "OOMKilled": True}, True),
        ({"Running": True, "OOMKilled": False}, False),
        ({"Running": False, "OOMKilled": True}, False),
    ],
)
async def test_a_running_kernel_a_process_of_which_went_for_memory_is_ended(
    state: dict[str, bool], killed: bool
) -> None:
    """A running container with a process killed for memory is killed (its death reports the
    memory, and its restart makes it anew); any other is left alone."""
    calls: list[str] = []

    class Container:
        async def show(self) -> dict[str, object]:
            calls.append("show")
            return {"State": state}

        async def kill(self, signal: str) -> None:
            calls.append(signal)

    docker = types.SimpleNamespace(
        containers=types.SimpleNamespace(container=lambda _: Container())
    )
    assert await engine.end_if_out_of_memory(docker, "c") is killed  # type: ignore[arg-type]
    assert calls == (["show", "SIGKILL"] if killed else ["show"])
