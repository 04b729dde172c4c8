"""Shared fixtures. Tests that need Docker use the ``server`` fixture: a real ``troupe server``
process on a free port with its own data and config directories. Docker must be running
(scripts/setup.sh starts it); a missing engine fails these tests instead of skipping them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKER = os.environ.get("TROUPE_DOCKER", "/usr/bin/docker")
IMAGE_VERSION = "0.1.0"
BASE_IMAGE = f"troupe/base:{IMAGE_VERSION}"
TORCH_IMAGE = f"troupe/pytorch:{IMAGE_VERSION}"
#: Test sessions' subnets, apart from a troupe server a developer may run beside the tests.
TEST_SUBNET_POOL = "10.89.0.0/16"


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, check=check)


#: Open MPI's own line when the ssh that mpirun forked has moved itself to a process group of
#: its own and started before mpirun's own attempt (refused; Open MPI ignores it): its stderr,
#: which ``session exec`` merges into the output (docs/contract.md, "mpirun"). Open MPI 4 says
#: ``plm:rsh``, Open MPI 5 ``plm:ssh``.
OPEN_MPI_SETPGID_RACE = re.compile(
    r"^\[[^\]]+\] plm:(rsh|ssh): Warning: setpgid\(\d+,\d+\) failed in parent with errno=.*$"
)


def mpirun_output(out: str) -> list[str]:
    """The output lines of ``mpirun``, less Open MPI's harmless process-group race line."""
    return [x for x in out.splitlines() if x.strip() and not OPEN_MPI_SETPGID_RACE.match(x)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Reporting:
    """A fixture value that adds sections to the report of a test that failed with it
    (:func:`pytest_runtest_makereport`): what it saw, for a failure seen once in CI."""

    def failure_sections(self, name: str) -> list[tuple[str, str]]:
        raise NotImplementedError


@dataclass
class Server(Reporting):
    url: str
    key: str
    data_dir: Path
    config_dir: Path
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def env(self) -> dict[str, str]:
        """Environment for running the CLI against this server as admin."""
        return {
            **os.environ,
            "TROUPE_API_URL": self.url,
            "TROUPE_API_KEY": self.key,
            "TROUPE_CONFIG_DIR": str(self.config_dir),
            "NO_COLOR": "1",
            "COLUMNS": "200",
        }

    def failure_sections(self, name: str) -> list[tuple[str, str]]:
        """The last warnings and errors of its log and its newest sessions."""
        if not self.log_path.exists():
            return []
        return [
            (f"server log of {name!r}", server_log_tail(self.log_path)),
            (f"latest sessions of {name!r}", latest_sessions(self)),
        ]

    def client(self, key: str | None = None):  # type: ignore[no-untyped-def]
        from troupe.client.sdk import Client

        return Client(self.url, key or self.key)

    def wait_agents(self, statuses: dict[str, str], timeout: float = 60) -> None:
        """Waits until each named agent has its status (ALIVE, LOST)."""
        c = self.client()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen = {a.name: a.status for a in c.list_agents()}
            if all(seen.get(k) == v for k, v in statuses.items()):
                return
            time.sleep(0.2)
        raise AssertionError(f"agents {c.list_agents()} not {statuses}")

    def cli(
        self,
        *args: str,
        key: str | None = None,
        timeout: float = 300,
        check: bool = False,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        env = self.env
        if key:
            env["TROUPE_API_KEY"] = key
        return subprocess.run(
            [str(ROOT / ".venv/bin/troupe"), *args],
            env=env,
            input=input if input is not None else "",
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
        )


def start_server(
    tmp: Path,
    *extra: str,
    host: str = "127.0.0.1",
    port: int | None = None,
    pool: str = TEST_SUBNET_POOL,
    mem: str = "8g",
    docker_host: str | None = None,
) -> Server:
    """``troupe server`` with its data and config in ``tmp``, once it answers. ``port``: a
    restarted manager keeps its address; ``pool``: its session subnets; ``docker_host``:
    the engine of its local agent."""
    port = port or free_port()
    data, cfg = tmp / "data", tmp / "config"
    log_path = tmp / "server.log"
    env = {**os.environ, "TROUPE_CONFIG_DIR": str(cfg)}
    if docker_host:
        env["DOCKER_HOST"] = docker_host
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "troupe", "server", "--host", host),
                *("--port", str(port), "--data-dir", str(data), "--subnet-pool", pool),
                *("--cpu", "2", "--mem", mem, *extra),
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://{host}:{port}"
    deadline = time.monotonic() + 60
    import httpx

    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"troupe server exited:\n{log_path.read_text()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/v1/health", timeout=1).status_code == 200:
                break
        time.sleep(0.1)
    else:
        proc.kill()
        raise RuntimeError(f"troupe server did not answer:\n{log_path.read_text()}")
    key = json.loads((cfg / "credentials.json").read_text())["api_key"]
    return Server(url, key, data, cfg, proc, log_path)


def start_agent(
    server: Server,
    name: str,
    port: int,
    log: Path,
    *extra: str,
    token: str,
    cpu: str = "2",
    docker_host: str | None = None,
) -> subprocess.Popen[bytes]:
    """``troupe agent`` for ``server`` on 127.0.0.1:``port``, sharing its data root,
    heartbeating every 0.5 s; ``extra``: more options."""
    args = [
        *(sys.executable, "-m", "troupe", "agent", "--manager", server.url, "--token", token),
        *("--listen", f"127.0.0.1:{port}", "--name", name, "--cpu", cpu, "--mem", "2g"),
        *("--data-root", str(server.data_dir), "--heartbeat", "0.5", *extra),
    ]
    if docker_host:
        args += ["--docker-host", docker_host]
    with open(log, "ab") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop_server(server: Server) -> None:
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.proc.wait(30)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()


def remove_leftovers(session_ids: set[str]) -> None:
    """Removes containers and networks of the given sessions, whatever state they are in."""
    for sid in session_ids:
        ids = docker("ps", "-aq", "--filter", f"label=troupe.session={sid}").stdout.split()
        if ids:
            docker("rm", "-f", *ids, check=False)
        nets = docker("network", "ls", "-q", "--filter", f"label=troupe.session={sid}").stdout
        if nets.split():
            docker("network", "rm", *nets.split(), check=False)


@contextlib.contextmanager
def server_db(server: Server) -> Iterator[sqlite3.Connection | None]:
    """The server's SQLite database, opened read-only; None where it has none (yet)."""
    db = server.data_dir / "troupe.db"
    if not db.exists():
        yield None
        return
    with contextlib.closing(sqlite3.connect(db.as_uri() + "?mode=ro", uri=True, timeout=5)) as c:
        yield c


def session_ids(server: Server) -> set[str]:
    with server_db(server) as c:
        return set() if c is None else {row[0] for row in c.execute("SELECT id FROM sessions")}


def remove_stale_test_sessions() -> None:
    """Removes what earlier, interrupted test runs left: sessions on troupe networks of the test
    pool that have no running container and are older than two minutes (another test run at
    the same time keeps its own; a developer's server uses another pool)."""
    import ipaddress
    from datetime import UTC, datetime, timedelta

    pool = ipaddress.ip_network(TEST_SUBNET_POOL)
    old = datetime.now(UTC) - timedelta(minutes=2)
    for net in docker("network", "ls", "-q", "--filter", "label=troupe.session").stdout.split():
        r = docker(
            "network",
            "inspect",
            "-f",
            '{{range .IPAM.Config}}{{.Subnet}} {{end}}|{{index .Labels "troupe.session"}}'
            "|{{.Created}}",
            net,
            check=False,
        )
        subnets, sid, created = [*r.stdout.strip().split("|"), "", ""][:3]
        ours = any(
            ipaddress.ip_network(x).subnet_of(pool)  # type: ignore[arg-type]
            for x in subnets.split()
            if "." in x
        )
        try:
            # Docker prints e.g. "2026-11-26 03:16:05.424598131 +0000 UTC"
            stale = datetime.fromisoformat(created[:19]).replace(tzinfo=UTC) < old
        except ValueError:
            stale = False
        running = docker("ps", "-q", "--filter", f"label=troupe.session={sid}").stdout.strip()
        if ours and stale and not running:
            remove_leftovers({sid})


@pytest.fixture(scope="session")
def docker_engine() -> None:
    r = docker("info", check=False)
    if r.returncode != 0:
        pytest.fail("Docker engine not answering; run scripts/setup.sh first:\n" + r.stderr)
    remove_stale_test_sessions()
    for image in (BASE_IMAGE, TORCH_IMAGE):
        if docker("image", "inspect", image, check=False).returncode != 0:
            pytest.fail(f"image {image} missing; run scripts/setup.sh first")


@contextlib.contextmanager
def serving(tmp: Path, *extra: str) -> Iterator[Server]:
    """A server (``start_server``) whose sessions are destroyed at the end; fails when any of
    them left a container or network behind."""
    s = start_server(tmp, *extra)
    try:
        yield s
    finally:
        with contextlib.suppress(Exception):
            c = s.client()
            for info in c.list_sessions():
                c.destroy_session(info.id)
        stop_server(s)
        ids = session_ids(s)
        leaked = [
            sid
            for sid in ids
            if docker("ps", "-aq", "--filter", f"label=troupe.session={sid}").stdout.strip()
            or docker(
                "network", "ls", "-q", "--filter", f"label=troupe.session={sid}"
            ).stdout.strip()
        ]
        remove_leftovers(ids)
        assert not leaked, f"containers or networks of sessions {leaked} were left behind"


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory, docker_engine: None) -> Iterator[Server]:
    with serving(tmp_path_factory.mktemp("troupe-server")) as s:
        yield s


#: At most this many of a server's log lines go with a failed test's report.
SERVER_LOG_LINES = 40


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A test whose body failed gets in its report what each of its :class:`Reporting`
    fixtures saw (a server: its log's last warnings and errors, its newest sessions; a
    browser page: its text and log)."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if report.when != "call" or not report.failed:
        return
    for name, value in getattr(item, "funcargs", {}).items():
        if isinstance(value, Reporting):
            report.sections.extend(value.failure_sections(name))


#: At most this many of a server's sessions (the newest), and of each one's events (the
#: last), go with a failed test's report.
REPORTED_SESSIONS, REPORTED_EVENTS = 3, 20


def latest_sessions(server: Server) -> str:
    """The newest sessions of a server as its database has them: status, reason, kernels and
    last events. Whether a page that showed an old state was stale or the manager was behind.
    Never raises (a report that fails would hide the failure it reports)."""
    try:
        with server_db(server) as c:
            return "(no database)" if c is None else "\n".join(_sessions_text(c))
    except Exception as e:
        return f"(database not read: {e!r})"


def _sessions_text(c: sqlite3.Connection) -> Iterator[str]:
    rows = c.execute(
        "SELECT id, name, status, status_info FROM sessions ORDER BY created_at DESC LIMIT ?",
        (REPORTED_SESSIONS,),
    ).fetchall()
    if not rows:
        yield "(no session)"
    for sid, name, status, info in rows:
        yield f"{name} {sid} {status} {info}"
        kernels = "SELECT hostname, status, agent_id, ip FROM kernels WHERE session_id = ?"
        for k in c.execute(kernels + " ORDER BY rank", (sid,)):
            yield "  kernel " + " ".join(str(x) for x in k)
        events = c.execute(
            "SELECT at, kind, status, kernel, message, actor FROM session_events"
            " WHERE session_id = ? ORDER BY id DESC LIMIT ?",
            (sid, REPORTED_EVENTS),
        ).fetchall()
        for e in reversed(events):
            yield "  event " + " | ".join(str(x) for x in e if x is not None)


def server_log_tail(path: Path) -> str:
    """The last warnings, errors and traceback lines of a server's log."""
    with path.open("rb") as f:
        f.seek(max(f.seek(0, os.SEEK_END) - (1 << 20), 0))
        lines = f.read().decode(errors="replace").splitlines()
    kept: list[str] = []
    keeping = False
    for line in lines:
        if any(w in line for w in ("WARNING", "ERROR", "Traceback")):
            keeping = True
        elif line[:1].isdigit() or line.startswith("INFO:"):  # the next record
            keeping = False
        if keeping:  # (with an error's following lines: its task, its traceback)
            kept.append(line)
    return "\n".join(kept[-SERVER_LOG_LINES:]) or "(no warning or error)"
