"""Tunnels into a kernel's network namespace (``troupe.agent.netns``) on the real engine: an
agent that may ``setns`` reaches ``127.0.0.1:PORT`` of main1 with no ``docker exec`` and no
relay process in the kernel; the app proxy's requests pass both ways; a port where nothing
listens gives the relay's own words; with ``TROUPE_TUNNEL_NETNS=0`` the relay is exec'd."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import aiodocker
import pytest

from tests.conftest import BASE_IMAGE, ROOT, docker
from troupe.agent import netns, runtime
from troupe.api.pipe import RUNNER_DIR, STDERR, STDOUT, Pipe, relay_command

pytestmark = pytest.mark.docker
PORT = 8125
#: A server on 127.0.0.1 only (unreachable from the host) answering one line per line read,
#: then its own last line once the client half-closed: half-close reaches it.
SERVER = (
    "import socket\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    f"s.bind(('127.0.0.1', {PORT})); s.listen()\n"
    "while True:\n"
    "    c, _ = s.accept(); f = c.makefile('rwb')\n"
    "    for line in f:\n"
    "        f.write(b'echo ' + line); f.flush()\n"
    "    f.write(b'bye\\n'); f.close(); c.close()\n"
)
RELAY_MARK = "import os, socket, sys, threading"  # (relay.sh's Python, as ps shows it)


@pytest.fixture
async def kernel(docker_engine: None) -> AsyncIterator[tuple[aiodocker.Docker, str]]:
    """A container serving :data:`SERVER` (the agent's own pipe, as the agent calls it)."""
    name = f"troupe-test-netns-{uuid.uuid4().hex[:6]}"
    runner = f"{ROOT / 'src' / 'troupe' / 'runner'}:{RUNNER_DIR}:ro"  # (relay.sh)
    # the kernel runtime too, as the agent mounts it (its exec'd commands start with its sh)
    mounts = [x for bind in [runner, *runtime.bind(runtime.host_dir())] for x in ("-v", bind)]
    docker("run", "-d", "--name", name, *mounts, "--entrypoint", "python3", BASE_IMAGE,
           "-c", SERVER)  # fmt: skip
    engine = aiodocker.Docker()
    try:
        cid = docker("inspect", "-f", "{{.Id}}", name).stdout.strip()
        for _ in range(100):
            if _listens(cid):
                break
            await asyncio.sleep(0.2)
        yield engine, cid
    finally:
        await engine.close()
        docker("rm", "-f", name, check=False)


async def talk(pipe: Pipe, lines: list[bytes]) -> tuple[bytes, bytes]:
    for line in lines:
        await pipe.write(line)
    await pipe.close_input()
    out, err = b"", b""
    while (item := await pipe.read()) is not None:
        if item[0] == STDOUT:
            out += item[1]
        elif item[0] == STDERR:
            err += item[1]
    return out, err


def relays_in(cid: str) -> int:
    ps = docker("exec", cid, "ps", "-eo", "args")
    return ps.stdout.count(RELAY_MARK)


async def test_a_tunnel_enters_the_kernels_network_namespace(
    kernel: tuple[aiodocker.Docker, str],
) -> None:
    engine, cid = kernel
    async with netns.open_pipe(engine, cid, relay_command(PORT)) as pipe:
        assert isinstance(pipe, netns.SocketPipe)
        assert relays_in(cid) == 0  # no exec, no relay process in the kernel
        out, err = await talk(pipe, [b"one\n", b"two\n"])
    assert (out, err) == (b"echo one\necho two\nbye\n", b"")
    async with netns.open_pipe(engine, cid, relay_command(PORT + 1)) as pipe:
        out, err = await talk(pipe, [])
        assert await pipe.exit_code() == 1
    assert out == b"" and b"nothing accepts connections on port 8126" in err, err


async def test_without_netns_the_relay_is_execd(
    kernel: tuple[aiodocker.Docker, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, cid = kernel
    monkeypatch.setattr(netns, "ENABLED", False)
    async with netns.open_pipe(engine, cid, relay_command(PORT), "root") as pipe:
        assert not isinstance(pipe, netns.SocketPipe)
        await pipe.write(b"three\n")
        first = await pipe.read()  # (the relay runs: it answered)
        assert first == (STDOUT, b"echo three\n"), first
        assert relays_in(cid) == 1
        out, _ = await talk(pipe, [])
    assert out == b"bye\n"


def _listens(cid: str) -> bool:
    with contextlib.suppress(Exception):
        tcp = docker("exec", cid, "cat", "/proc/net/tcp").stdout
        return f":{PORT:04X} 00000000:0000 0A" in tcp
    return False


def test_relay_port_is_only_the_relays() -> None:
    assert netns.relay_port(relay_command(8888)) == 8888
    assert netns.relay_port(["/bin/sh", "/opt/troupe/cp.sh", "get", "/x", ""]) is None
    assert netns.relay_port(["/bin/sh", "/opt/troupe/relay.sh", "x"]) is None
