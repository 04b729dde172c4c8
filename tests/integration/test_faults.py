"""Fault injection on the real engine (issue "Hardening"): each failure ends in the state
docs/lifecycle.md describes, with its cause in ``status_info``, and leaves no container,
network or volume of the session behind.

Engine, agent and manager faults are made deterministic with :class:`EngineProxy`: a Unix
socket in front of the engine's, used by one server or agent only, that can hold the requests
of one kind (the session stays in the step that sent them) and can go down and come back as a
stopped engine would. The machine's own ``dockerd`` is never touched.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import re
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from tests.conftest import (
    BASE_IMAGE,
    Server,
    docker,
    free_port,
    remove_leftovers,
    session_ids,
    start_agent,
    start_server,
    stop_server,
)
from troupe.api.models import KernelInfo, Resources, SessionCreate, SessionInfo

pytestmark = pytest.mark.docker
T = TypeVar("T")
SMALL = Resources(cpu=0.25, mem=64 * 1024**2)
TOKEN = "test-agent-token"
ENGINE_SOCKET = "/var/run/docker.sock"
NOSSHD_IMAGE = "troupe-test/nosshd:1"
#: /bin/sh says why and exits (2) at once: the entrypoint never runs.
NORUN_IMAGE = "troupe-test/norun:2"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def request(name: str, size: int = 2, **kw: object) -> SessionCreate:
    return SessionCreate(
        name=name,
        image=kw.pop("image", BASE_IMAGE),
        cluster_size=size,
        resources=kw.pop("resources", SMALL),
        **kw,
    )


def leftovers(session_id: str) -> dict[str, list[str]]:
    """Containers, networks and volumes labelled with the session (empty lists: none)."""
    label = f"label=troupe.session={session_id}"
    return {
        "containers": docker("ps", "-aq", "--filter", label).stdout.split(),
        "networks": docker("network", "ls", "-q", "--filter", label).stdout.split(),
        "volumes": docker("volume", "ls", "-q", "--filter", label).stdout.split(),
    }


def assert_nothing_left(session_id: str, within: float = 0.0) -> None:
    """Nothing of the session on the engine, now or (``within`` > 0) within that many seconds."""
    deadline = time.monotonic() + within
    while True:
        left = leftovers(session_id)
        if not any(left.values()):
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"session {session_id} left {left}")
        time.sleep(0.5)


def wait_until(what: str, check: Callable[[], T | None], timeout: float) -> T:
    """``check()``'s first truthy value, polled every 50 ms for at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting until {what}")
        time.sleep(0.05)


def background(call: Callable[..., object], *args: object) -> threading.Thread:
    """``call(*args)`` in a thread, its failure ignored (the server it talks to may die)."""

    def run() -> None:
        with contextlib.suppress(Exception):
            call(*args)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def kernel(info: SessionInfo, hostname: str) -> KernelInfo:
    return next(k for k in info.kernels if k.hostname == hostname)


def container_of(info: SessionInfo, hostname: str) -> str:
    cid = kernel(info, hostname).container_id
    assert cid, info.kernels
    return cid


# -- an engine that can be held and stopped ----------------------------------------------------
REQUEST_LINE = re.compile(rb"(GET|POST|PUT|DELETE|HEAD) (\S+) HTTP/1\.[01]\r\n")


class EngineProxy:
    """A Unix socket forwarding to the engine's, byte for byte (hijacked exec streams too).

    ``hold(pattern)``: requests whose ``METHOD path`` matches wait, unsent, until
    ``release()`` (then they go on) or ``down()`` (then their connection is cut: they never
    reach the engine, and nothing is held any more). ``down()``: the socket disappears and
    every connection is cut, as when the engine stops; ``up()`` brings it back.
    """

    def __init__(self, path: Path, target: str = ENGINE_SOCKET) -> None:
        self.path, self.target = path, target
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._hold: re.Pattern[bytes] | None = None
        self._go = threading.Event()
        self._cut = threading.Event()
        #: requests held so far (``METHOD path``)
        self.held: list[str] = []

    @property
    def url(self) -> str:
        return f"unix://{self.path}"

    def up(self) -> None:
        self._cut.clear()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        listener.bind(str(self.path))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        self._hold = None
        self._cut.set()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def hold(self, pattern: str) -> None:
        self.held.clear()
        self._go.clear()
        self._hold = re.compile(pattern.encode())

    def release(self) -> None:
        self._hold = None
        self._go.set()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            engine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                engine.connect(self.target)
            except OSError:
                client.close()
                engine.close()
                continue
            with self._lock:
                if self._cut.is_set():
                    client.close()
                    engine.close()
                    continue
                self._conns |= {client, engine}
            pair = _Pair(self, client, engine)
            threading.Thread(target=pair.pump, args=(client, engine, True), daemon=True).start()
            threading.Thread(target=pair.pump, args=(engine, client, False), daemon=True).start()

    def _forget(self, *socks: socket.socket) -> None:
        with self._lock:
            self._conns -= set(socks)


class _Pair:
    """A client's connection and its own to the engine: two pumps; closed when both end."""

    def __init__(self, proxy: EngineProxy, client: socket.socket, engine: socket.socket) -> None:
        self.proxy, self.socks = proxy, (client, engine)
        self._ended = 0
        self._lock = threading.Lock()

    def pump(self, src: socket.socket, dst: socket.socket, requests: bool) -> None:
        p = self.proxy
        broken = False
        try:
            while data := src.recv(65536):
                m = REQUEST_LINE.match(data) if requests else None
                pattern = p._hold
                if m and pattern is not None and pattern.search(m.group(1) + b" " + m.group(2)):
                    p.held.append(f"{m.group(1).decode()} {m.group(2).decode()}")
                    while not (p._go.wait(0.05) or p._cut.is_set()):
                        pass
                    if p._cut.is_set():
                        broken = True
                        break
                dst.sendall(data)
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)  # the other side's end of input, passed on
        except OSError:
            broken = True
        finally:
            if broken or p._cut.is_set():
                for s in self.socks:
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._ended += 1
                last = self._ended == 2
            if last:
                p._forget(*self.socks)
                for s in self.socks:
                    s.close()


@pytest.fixture
def proxy() -> Iterator[EngineProxy]:
    # A short path: Unix socket paths are limited to about 100 bytes.
    p = EngineProxy(Path(f"/tmp/troupe-test-engine-{uuid.uuid4().hex[:8]}.sock"))
    p.up()
    try:
        yield p
    finally:
        p.release()
        p.down()


# -- servers and agents of our own -----------------------------------------------------------
def free_block(prefix: int) -> str:
    """A subnet of 10.90.0.0/16 (outside the shared test pool) no network on the engine uses."""
    taken = []
    for net in docker("network", "ls", "-q").stdout.split():
        r = docker(
            "network",
            "inspect",
            "-f",
            "{{range .IPAM.Config}}{{.Subnet}} {{end}}",
            net,
            check=False,
        )
        taken += [ipaddress.IPv4Network(x) for x in r.stdout.split() if "." in x]
    blocks = list(ipaddress.IPv4Network("10.90.0.0/16").subnets(new_prefix=prefix))
    random.shuffle(blocks)
    return str(next(b for b in blocks if not any(b.overlaps(t) for t in taken)))


def serve(
    tmp: Path, *extra: str, port: int | None = None, docker_host: str | None = None
) -> Server:
    """``troupe server`` with a subnet pool of its own (other test runs' servers share the
    test pool and may race for its first free subnet)."""
    return start_server(
        tmp, *extra, port=port, pool=free_block(20), mem="4g", docker_host=docker_host
    )


def kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL, as a crash: no clean-up runs."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


@contextlib.contextmanager
def cleaned(*servers: Callable[[], Server | None]) -> Iterator[None]:
    """Stops the servers (as they are at the end) and removes their sessions' leftovers."""
    try:
        yield
    finally:
        for get in servers:
            srv = get()
            if srv is not None:
                stop_server(srv)
                remove_leftovers(session_ids(srv))


# -- images ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def test_images(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    recipes = {
        NOSSHD_IMAGE: f"FROM {BASE_IMAGE}\nRUN rm -f /usr/sbin/sshd\n",
        NORUN_IMAGE: f"FROM {BASE_IMAGE}\n"
        "RUN printf '#!/bin/dash\\necho troupe-test: this shell refuses to run >&2\\nexit 2\\n'"
        " > /bin/sh.new && chmod 755 /bin/sh.new && mv /bin/sh.new /bin/sh\n",
    }
    built = []
    try:
        for tag, recipe in recipes.items():
            ctx = tmp_path_factory.mktemp("image")
            (ctx / "Dockerfile").write_text(recipe)
            r = docker("build", "-q", "-t", tag, str(ctx), check=False)
            assert r.returncode == 0, r.stderr
            built.append(tag)
        yield
    finally:
        for tag in built:
            docker("rmi", "-f", tag, check=False)


# -- kernels that die --------------------------------------------------------------------------
def test_sigkill_of_a_kernel_fails_the_session_naming_it(server: Server) -> None:
    c = server.client()
    name = unique("sigkill")
    c.create_session(request(name))
    info = c.wait_session(name, timeout=120)
    assert info.status == "RUNNING", info.status_info
    docker("kill", "--signal", "KILL", container_of(info, "sub1"))
    final = c.wait_session(name, until="final", timeout=60)
    assert final.status == "ERROR"
    si = final.status_info
    assert (si["reason"], si["kernel"], si["exit_code"], si["oom_killed"]) == (
        "kernel exited",
        "sub1",
        137,
        False,
    ), si
    assert (kernel(final, "sub1").exit_code, kernel(final, "sub1").status) == (137, "TERMINATED")
    assert_nothing_left(info.id)


#: Makes the kernel's own process (the child of the container's init: ``sh``, idling) the OOM
#: killer's first choice, then fills the memory with small processes: the kernel dies of it.
OOM_MAIN = (
    "for p in $(cat /proc/1/task/1/children); do"
    ' [ "$(cat /proc/$p/comm)" = sh ] && echo 1000 > /proc/$p/oom_score_adj; done;'
    " for i in 1 2 3 4 5 6 7 8; do"
    " dd if=/dev/zero of=/dev/null bs=5M count=100000000 2>/dev/null & done; wait"
)
HOG = ["python3", "-c", "b = bytearray(200 << 20)"]


def test_out_of_memory(server: Server) -> None:
    """--mem 32m. A memory hog started by exec is the one the OOM killer picks: the exec ends
    with 137 and the kernel lives on (the session stays RUNNING). When the kernel's own
    process is killed for memory, the session fails: ``kernel ran out of memory``. A batch
    command killed for memory ends its session as any batch end does (TERMINATED, 137), and
    its ``status_info`` says it was the memory."""
    c = server.client()
    tight = Resources(cpu=0.25, mem=32 * 1024**2)
    name, batch = unique("oom"), unique("oom-batch")
    c.create_session(request(name, resources=tight))
    c.create_session(
        request(batch, resources=tight, type="batch", startup_command=f"{HOG[0]} -c '{HOG[2]}'")
    )
    info = c.wait_session(name, timeout=120)
    assert info.status == "RUNNING", info.status_info

    code, out = c.exec(name, HOG, kernel="sub1")
    assert code == 137, out
    assert c.get_session(name).status == "RUNNING"
    assert c.exec(name, ["hostname"], kernel="sub1") == (0, "sub1\n")

    code, out = c.exec(name, ["sh", "-c", OOM_MAIN], kernel="sub1", user="root")
    final = c.wait_session(name, until="final", timeout=60)
    assert final.status == "ERROR", final.status_info
    si = final.status_info
    assert (si["reason"], si["kernel"], si["exit_code"], si["oom_killed"]) == (
        "kernel ran out of memory",
        "sub1",
        137,
        True,
    ), si
    assert kernel(final, "sub1").oom_killed
    assert_nothing_left(info.id)

    ended = c.wait_session(batch, until="final", timeout=120)
    assert (ended.status, ended.exit_code) == ("TERMINATED", 137), ended.status_info
    assert ended.status_info == {
        "reason": "main1 killed: out of memory (limit 32m)",
        "kernel": "main1",
        "exit_code": 137,
        "oom_killed": True,
    }
    assert kernel(ended, "main1").oom_killed
    assert_nothing_left(ended.id)


def test_image_without_sshd_gets_the_runtimes(server: Server, test_images: None) -> None:
    """The kernel runtime's sshd serves an image without one (docs/contract.md): SSH works and
    no kernel says it is unavailable."""
    c = server.client()
    name = unique("nosshd")
    c.create_session(request(name, image=NOSSHD_IMAGE))
    info = c.wait_session(name, timeout=120)
    try:
        assert info.status == "RUNNING", info.status_info
        assert c.exec(name, ["hostname"], kernel="sub1") == (0, "sub1\n")
        code, out = c.exec(name, ["sh", "-c", "echo $BACKENDAI_CLUSTER_HOSTS; getent hosts sub1"])
        assert code == 0 and out.startswith("main1,sub1\n"), out
        assert c.exec(name, ["ssh", "sub1", "hostname"]) == (0, "sub1\n")
        logs = list(c.logs(name))
        assert not any("SSH between kernels is unavailable" in line for line in logs), logs
    finally:
        c.destroy_session(name)
    assert c.get_session(name).status == "TERMINATED"
    assert_nothing_left(info.id)


def test_batch_startup_command_exit_code_ends_the_session(server: Server) -> None:
    c = server.client()
    name = unique("exit7")
    c.create_session(request(name, type="batch", startup_command="exit 7"))
    info = c.wait_session(name, until="final", timeout=120)
    assert (info.status, info.exit_code) == ("TERMINATED", 7), info.status_info
    assert info.status_info == {"reason": "batch command finished", "exit_code": 7}
    assert_nothing_left(info.id)


def test_kernel_that_dies_at_start_fails_the_session(server: Server, test_images: None) -> None:
    """The image's /bin/sh exits (2) at once, so the entrypoint never runs.

    Three causes may be reported, depending on which is seen first (all as docs/lifecycle.md
    allows): the kernel had already exited when its start was checked ("failed while creating
    kernels"); its exit event ("kernel exited while the session was being prepared", exit
    code 2, its last logs); or its log ending before it said it was ready."""
    c = server.client()
    name = unique("dies")
    c.create_session(request(name, image=NORUN_IMAGE))
    info = c.wait_session(name, until="final", timeout=120)
    assert info.status == "ERROR"
    si = info.status_info
    assert si["kernel"] in ("main1", "sub1"), si
    said = "troupe-test: this shell refuses to run"
    if si["reason"] == "kernel exited while the session was being prepared":
        assert si["exit_code"] == 2 and not si["oom_killed"], si
        assert any(said in line for line in si["last_logs"]), si
    elif si["reason"] == "failed while creating kernels":
        assert "exited at once with code 2" in si["message"] and said in si["message"], si
    else:
        assert si["reason"] == "failed while waiting until every kernel reaches every other", si
        assert si["message"] == "stopped before it was ready", si
    assert "RUNNING" not in info.timeline
    assert_nothing_left(info.id)


# -- the engine stops -------------------------------------------------------------------------
def test_engine_stopped_during_creation(tmp_path: Path, proxy: EngineProxy) -> None:
    """The engine stops while kernels are being started: the session fails at once naming the
    step; what it had on the engine is removed by the orphan sweep once the engine is back
    (every ``--sweep-interval``: 60 s, here 5); the manager then creates sessions and sees
    kernel exits again."""
    srv = serve(tmp_path, "--sweep-interval", "5", docker_host=proxy.url)
    with cleaned(lambda: srv):
        c = srv.client()
        proxy.hold(r"^POST /[^ ]*containers/[0-9a-f]+/start")
        name = unique("engine")
        c.create_session(request(name))
        wait_until("a kernel is being started", lambda: proxy.held, 60)
        info = c.get_session(name)
        assert info.status == "PREPARING"
        proxy.down()
        final = c.wait_session(name, until="final", timeout=60)
        assert final.status == "ERROR"
        si = final.status_info
        assert si["reason"] == "failed while creating kernels", si
        assert "Cannot connect to Docker Engine" in si["message"], si
        assert si.get("kernel") in ("main1", "sub1"), si
        assert all(k.status == "TERMINATED" for k in final.kernels)
        assert c.list_agents()[0].cpu_free == 2.0  # nothing held by the failed session

        proxy.up()
        assert_nothing_left(info.id, within=90)
        again = unique("engine-back")
        c.create_session(request(again))
        back = c.wait_session(again, timeout=120)
        assert back.status == "RUNNING", back.status_info
        docker("kill", container_of(back, "sub1"))
        ended = c.wait_session(again, until="final", timeout=60)
        assert (ended.status, ended.status_info["reason"]) == ("ERROR", "kernel exited")
        assert_nothing_left(back.id)


# -- networks ---------------------------------------------------------------------------------
@contextlib.contextmanager
def foreign_network(subnet: str) -> Iterator[str]:
    """A network of someone else (no troupe label) holding ``subnet``."""
    name = unique("troupe-test-net")
    docker("network", "create", "--subnet", subnet, "--label", "troupe-test=1", name)
    try:
        yield name
    finally:
        docker("network", "rm", name, check=False)


def test_network_creation_failures(tmp_path: Path, proxy: EngineProxy) -> None:
    """No free subnet left in the pool (its one /24 is another network's), and another network
    taking the subnet between the manager's choice and the engine's creation: both fail the
    session at the network step, with the engine's or the pool's words, leaving nothing."""
    pool = free_block(24)
    srv = serve(tmp_path, "--subnet-pool", pool, docker_host=proxy.url)
    with cleaned(lambda: srv):
        c = srv.client()
        with foreign_network(pool):
            name = unique("nopool")
            c.create_session(request(name))
            info = c.wait_session(name, until="final", timeout=60)
            assert info.status == "ERROR"
            assert info.status_info == {
                "reason": "failed while creating the network",
                "message": f"no free subnet left in {pool}",
            }
            assert "PREPARING" in info.timeline and not any(k.container_id for k in info.kernels)
            assert_nothing_left(info.id)

        proxy.hold(r"^POST /[^ ]*networks/create")
        name = unique("race")
        c.create_session(request(name))
        wait_until("the network is being created", lambda: proxy.held, 60)
        claimed = c.get_session(name).subnet
        assert claimed and ipaddress.IPv4Network(claimed).subnet_of(ipaddress.IPv4Network(pool))
        with foreign_network(claimed):
            proxy.release()
            info = c.wait_session(name, until="final", timeout=60)
        assert info.status == "ERROR"
        si = info.status_info
        assert si["reason"] == "failed while creating the network", si
        # the engine's overlap makes the manager pick again; the one /24 of the pool is taken
        assert si["message"] == f"no free subnet left in {pool}", si
        assert_nothing_left(info.id)
        agent = c.list_agents()[0]
        assert (agent.cpu_free, agent.kernels) == (agent.cpu, 0)


# -- agents and the manager die ---------------------------------------------------------------
def test_agent_killed_while_a_session_is_prepared(tmp_path: Path, proxy: EngineProxy) -> None:
    """A remote agent dies (SIGKILL) while its kernels are being started: the session fails
    at once (the manager's call to the agent breaks); the containers the agent had created stay
    on the engine until the agent comes back, which sweeps them."""
    mgr = serve(tmp_path, "--no-local-agent", "--agent-token", TOKEN, "--agent-timeout", "3")
    port = free_port()
    agent = start_agent(
        mgr, "far", port, tmp_path / "agent.log", token=TOKEN, docker_host=proxy.url
    )
    with cleaned(lambda: mgr):
        try:
            mgr.wait_agents({"far": "ALIVE"}, timeout=30)
            c = mgr.client()
            proxy.hold(r"^POST /[^ ]*containers/[0-9a-f]+/start")
            name = unique("agentkill")
            c.create_session(request(name, size=3))
            wait_until("kernels are being started", lambda: len(proxy.held) == 3, 60)
            info = c.get_session(name)
            assert info.status == "PREPARING"
            kill(agent)
            proxy.down()
            final = c.wait_session(name, until="final", timeout=60)
            assert final.status == "ERROR"
            si = final.status_info
            assert si["reason"] in ("failed while creating kernels", "agent lost"), si
            mgr.wait_agents({"far": "LOST"}, timeout=30)

            agent = start_agent(mgr, "far", port, tmp_path / "agent.log", token=TOKEN)
            mgr.wait_agents({"far": "ALIVE"}, timeout=30)
            assert_nothing_left(info.id, within=30)
            a = next(a for a in c.list_agents() if a.name == "far")
            assert (a.cpu_free, a.kernels) == (a.cpu, 0)
        finally:
            kill(agent)


def test_manager_killed_while_creating_and_while_tearing_down(
    tmp_path: Path, proxy: EngineProxy
) -> None:
    """The manager dies (SIGKILL) with a session PREPARING, then with one TERMINATING; a new
    manager on the same data directory and port ends the first ERROR ("manager restarted while
    the session was being created") and finishes the second's teardown (TERMINATED), removing
    their containers and networks."""
    srv = serve(tmp_path, docker_host=proxy.url)
    port = int(srv.url.rsplit(":", 1)[1])
    with cleaned(lambda: srv):
        c = srv.client()
        proxy.hold(r"^POST /[^ ]*containers/[0-9a-f]+/start")
        creating = unique("creating")
        c.create_session(request(creating))
        wait_until("kernels are being started", lambda: len(proxy.held) == 2, 60)
        a = c.get_session(creating)
        assert a.status == "PREPARING"
        kill(srv.proc)
        proxy.down()  # the held starts never reach the engine
        assert leftovers(a.id)["containers"]  # created, not started: the new manager's to remove
        proxy.up()

        srv = serve(tmp_path, port=port, docker_host=proxy.url)
        c = srv.client()
        a = c.wait_session(creating, until="final", timeout=60)
        assert a.status == "ERROR"
        assert a.status_info == {
            "reason": "manager restarted while the session was being created"
        }, a.status_info
        assert_nothing_left(a.id)

        ending = unique("ending")
        c.create_session(request(ending))
        b = c.wait_session(ending, timeout=120)
        assert b.status == "RUNNING", b.status_info
        proxy.hold(r"^DELETE /[^ ]*containers/[0-9a-f]+")
        destroy = background(c.destroy_session, ending)  # answers once the teardown is over
        wait_until("kernels are being removed", lambda: len(proxy.held) == 2, 60)
        assert c.get_session(ending).status == "TERMINATING"
        kill(srv.proc)
        proxy.down()
        destroy.join(30)
        assert len(leftovers(b.id)["containers"]) == 2
        proxy.up()

        srv = serve(tmp_path, port=port, docker_host=proxy.url)
        c = srv.client()
        b = c.wait_session(ending, until="final", timeout=60)
        assert b.status == "TERMINATED"
        assert b.status_info == {"reason": "destroyed by user"}, b.status_info
        assert all(k.status == "TERMINATED" for k in b.kernels)
        assert_nothing_left(b.id)
        agent = c.list_agents()[0]
        assert (agent.cpu_free, agent.kernels) == (agent.cpu, 0)


# -- a destroy racing an engine call ----------------------------------------------------------
@pytest.mark.parametrize("call", ["networks/create", "containers/create"])
def test_destroy_during_an_engine_call_leaves_nothing(
    tmp_path: Path, proxy: EngineProxy, call: str
) -> None:
    """A session destroyed while the engine works on its network or kernels: once the engine
    has answered, nothing of the session is left (the request is held at the engine's door so
    that it is in flight when the destroy comes, as on a busy engine)."""
    srv = serve(tmp_path, docker_host=proxy.url)
    with cleaned(lambda: srv):
        c = srv.client()
        proxy.hold(rf"^POST /[^ ]*{call}")
        name = unique("inflight")
        info = c.create_session(request(name))
        wait_until(f"{call} is in flight", lambda: proxy.held, 60)
        destroy = background(c.destroy_session, name)
        wait_until(
            "the session is being destroyed", lambda: c.get_session(name).status != "PREPARING", 30
        )
        proxy.release()  # the engine now carries out the call
        destroy.join(60)
        final = c.wait_session(name, until="final", timeout=60)
        assert (final.status, final.status_info) == ("TERMINATED", {"reason": "destroyed by user"})
        with contextlib.suppress(AssertionError):  # (a leftover shows within a moment)
            wait_until("the held call left something", lambda: any(leftovers(info.id).values()), 5)
        assert_nothing_left(info.id, within=3)
