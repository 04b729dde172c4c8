"""Commands in a kernel: streamed output, collected output and interactive terminals.

Every command runs through the runner's ``exec.sh``, so it sees the same environment as the
kernel's startup command and SSH logins (``BACKENDAI_*``, ``MASTER_ADDR``, ...). Every exec
runs as ``work`` or ``root``, no one else (:func:`troupe.agent.ownership.check_user`). Creating
the engine's exec is awaited before any output is read: an unknown or stopped container fails
there, while the caller can still answer with an error instead of a broken stream.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiodocker
from aiodocker.execs import Exec
from aiodocker.stream import Stream

from troupe.agent import runtime
from troupe.agent.engine import on_container, step
from troupe.agent.kernel import RUNNER_MOUNT
from troupe.agent.ownership import check_user
from troupe.api.errors import TroupeError
from troupe.api.exec import ExecExit, ExecItem, ExecOutput

#: A login shell with a TTY: bash if the image has it, else sh (exec.sh runs the command's
#: /bin/sh under the runtime's where the image has none).
LOGIN_SHELL = [
    "/bin/sh",
    "-c",
    "if [ -x /bin/bash ]; then exec /bin/bash -l; else exec sh -l; fi",
]


def _exec_sh(command: list[str]) -> list[str]:
    """``command`` through the runner's exec.sh (the kernel's environment)."""
    return [runtime.shell(runtime.host_dir()), f"{RUNNER_MOUNT}/exec.sh", *command]


def _workdir(user: str) -> str:
    return "/home/work" if user == "work" else "/"


async def open_exec(
    docker: aiodocker.Docker, container_id: str, command: list[str], user: str = "work"
) -> AsyncIterator[ExecItem]:
    """Creates the exec now (raising :class:`NotFound` / :class:`NotRunning` at once) and
    returns its stream: output chunks, then the exit code."""
    check_user(user)
    with on_container(container_id):
        ex = await docker.containers.container(container_id).exec(
            _exec_sh(command), user=user, workdir=_workdir(user)
        )
    return _run(ex, container_id)


async def _run(ex: Exec, container_id: str) -> AsyncIterator[ExecItem]:
    with on_container(container_id):
        async with ex.start(detach=False) as stream:
            while (msg := await stream.read_out()) is not None:
                yield ExecOutput(bytes(msg.data))
        info = await ex.inspect()
    yield ExecExit(int(info.get("ExitCode") or 0))


async def exec_collect(
    docker: aiodocker.Docker, container_id: str, command: list[str], user: str = "work"
) -> tuple[int, str]:
    """Exit code and output as text; ``(-1, why)`` when the command could not run at all (the
    caller words the failure, naming its kernel)."""
    out = bytearray()
    code = -1
    try:
        async for item in await open_exec(docker, container_id, command, user):
            if isinstance(item, ExecOutput):
                out += item.data
            else:
                code = item.exit_code
    except TroupeError as e:
        return -1, e.message
    return code, out.decode(errors="replace")


@dataclass
class ShellIO:
    """Both ends of an interactive exec (a :class:`troupe.api.shell.Shell`)."""

    exec: Exec
    stream: Stream

    async def read(self) -> bytes | None:
        with step("shell"):
            msg = await self.stream.read_out()
        return None if msg is None else bytes(msg.data)

    async def write(self, data: bytes) -> None:
        with step("shell"):
            await self.stream.write_in(data)

    async def resize(self, rows: int, cols: int) -> None:
        with step("shell"):
            await self.exec.resize(h=rows, w=cols)

    async def exit_code(self) -> int:
        with step("shell"):
            info = await self.exec.inspect()
        return int(info.get("ExitCode") or 0)


@dataclass
class PipeIO:
    """Both ends of a command without a TTY (a :class:`troupe.api.pipe.Pipe`)."""

    exec: Exec
    stream: Stream

    async def read(self) -> tuple[int, bytes] | None:
        with step("pipe"):
            msg = await self.stream.read_out()
        return None if msg is None else (msg.stream, bytes(msg.data))

    async def write(self, data: bytes) -> None:
        with step("pipe"):
            await self.stream.write_in(data)

    async def close_input(self) -> None:
        """Half-closes the engine's connection: the command reads EOF, its output goes on
        (aiodocker's ``close`` would end both ways)."""
        resp = self.stream._resp
        transport = resp.connection.transport if resp and resp.connection else None
        if transport is not None and transport.can_write_eof():
            transport.write_eof()

    async def exit_code(self) -> int:
        with step("pipe"):
            info = await self.exec.inspect()
        code = info.get("ExitCode")
        return -1 if code is None else int(code)


@contextlib.asynccontextmanager
async def open_pipe(
    docker: aiodocker.Docker, container_id: str, command: list[str], user: str = "work"
) -> AsyncIterator[PipeIO]:
    """A command with stdin and separate stdout/stderr, no TTY, so bytes pass unchanged (the
    tunnel's relay, ``tar`` for copies); the engine's refusal is raised on entry."""
    check_user(user)
    with on_container(container_id):
        ex = await docker.containers.container(container_id).exec(
            runtime.command(command, runtime.host_dir()),
            stdin=True,
            tty=False,
            user=user,
            workdir=_workdir(user),
        )
        async with ex.start(detach=False) as stream:
            yield PipeIO(ex, stream)


@contextlib.asynccontextmanager
async def open_shell(
    docker: aiodocker.Docker, container_id: str, user: str = "work"
) -> AsyncIterator[ShellIO]:
    """An interactive login shell with a TTY; the engine's refusal is raised on entry."""
    check_user(user)
    with on_container(container_id):
        ex = await docker.containers.container(container_id).exec(
            _exec_sh(LOGIN_SHELL),
            stdin=True,
            tty=True,
            user=user,
            environment={"TERM": "xterm-256color"},
            workdir=_workdir(user),
        )
        async with ex.start(detach=False) as stream:
            yield ShellIO(ex, stream)
