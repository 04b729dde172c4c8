"""A kernel's output as the engine keeps it: whole, followed, or its last lines.

Lines carry the engine's timestamps (``2026-...Z text``) when they are read for people (the
manager merges several kernels by them) and none when they explain a failure.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable

import aiodocker
from aiodocker.containers import DockerContainer
from aiodocker.exceptions import DockerError

from troupe.agent.engine import on_container


async def open_logs(
    docker: aiodocker.Docker, container_id: str, follow: bool = False
) -> AsyncIterator[str]:
    """Asks the engine now (an unknown container raises :class:`NotFound` at once) and returns
    the timestamped lines; with ``follow`` they go on until the container stops."""
    c = docker.containers.container(container_id)
    with on_container(container_id):
        if not follow:
            return _each(await c.log(stdout=True, stderr=True, timestamps=True))
        await c.show()
    return _follow(c)


async def _each(lines: Iterable[str]) -> AsyncIterator[str]:
    for line in lines:
        yield line


async def _follow(c: DockerContainer) -> AsyncIterator[str]:
    with on_container(c.id):
        async for line in c.log(stdout=True, stderr=True, follow=True, timestamps=True):
            yield line


async def whole(docker: aiodocker.Docker, container_id: str) -> str:
    """Everything a container wrote, timestamped (kept when the kernel is removed); ``""``
    when the engine cannot say."""
    with contextlib.suppress(DockerError):
        c = docker.containers.container(container_id)
        return "".join(await c.log(stdout=True, stderr=True, timestamps=True))
    return ""


async def last_lines(docker: aiodocker.Docker, container_id: str, n: int) -> list[str]:
    """The last ``n`` lines, newlines stripped, to explain why a kernel stopped; ``[]`` when the
    engine cannot say."""
    with contextlib.suppress(DockerError):
        c = docker.containers.container(container_id)
        return [line.rstrip("\n") for line in await c.log(stdout=True, stderr=True, tail=n)]
    return []
