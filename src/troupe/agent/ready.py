"""Readiness of a session's kernels, read from their output instead of asked by exec.

Each kernel's entrypoint says ``troupe: started`` once it set the kernel up and runs
``ready.sh`` in the background, which says ``troupe: ready`` once every peer is reachable (or
``troupe: not ready after ...`` with what is missing). The agent follows each container's log
for those lines: one stream per kernel, opened once, and the engine's timestamps of the lines
are the kernel's start-up phases. Exec round trips (a process in the kernel, polled with
back-off) took most of a session's start-up before.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

import aiodocker

from troupe.agent import neighbours
from troupe.agent.logs import READY, STARTED, follow_lines
from troupe.api.agent import ReadyTimes
from troupe.api.aio import gather_all
from troupe.api.errors import AgentFailed

NOT_READY = "troupe: not ready"


def engine_time(ts: str) -> str:
    """The engine's RFC 3339 time (nanoseconds, ``Z``) as ISO 8601 with microseconds."""
    head, _, frac = ts.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00").isoformat()


async def kernel_ready(
    docker: aiodocker.Docker, host: str, container_id: str, timeout: float, since: int = 0
) -> ReadyTimes:
    """Follows one kernel's log until it says it is ready; its phase times. ``since``: the
    start (engine nanoseconds) the lines must be of, after a restart (the log goes on across
    starts: the earlier attempts' reports are no news)."""
    times: ReadyTimes = {}
    try:
        async with asyncio.timeout(timeout):
            async for line in follow_lines(docker, container_id):
                ts, _, text = line.partition(" ")
                if since and engine_nanos(ts) < since:
                    continue
                text = text.rstrip("\n")
                if text == STARTED:
                    times["entrypoint"] = engine_time(ts)
                elif text == READY:
                    times["ready"] = engine_time(ts)
                    return times
                elif text.startswith(NOT_READY):
                    raise AgentFailed(text.removeprefix("troupe: "), kernel=host)
    except TimeoutError:
        said = "set up, but no readiness report" if times else "no start-up report"
        raise AgentFailed(f"{said} after {timeout:g}s", kernel=host) from None
    raise AgentFailed("stopped before it was ready", kernel=host)


def engine_nanos(ts: str) -> int:
    """The engine's RFC 3339 time (``...T10:00:00.123456789Z``) in nanoseconds (0: not one)."""
    head, _, frac = ts.rstrip("Z").partition(".")
    try:
        seconds = int(datetime.fromisoformat(f"{head}+00:00").timestamp())
    except ValueError:
        return 0
    return seconds * 1_000_000_000 + int((frac + "000000000")[:9])


async def wait_ready(
    docker: aiodocker.Docker,
    containers: dict[str, str],
    timeout: float,
    since: dict[str, int] | None = None,
    cluster_size: int = 0,
) -> dict[str, ReadyTimes]:
    """Every kernel's phase times, once all are ready; the first failure otherwise, with the
    cause when the host's neighbour table overflowed meanwhile (:mod:`.neighbours`, which
    also warns first when the ``cluster_size`` kernels' session may not fit it).
    ``since``: hostname -> the start its lines must be of (:func:`kernel_ready`)."""
    hosts = list(containers)
    since = since or {}
    neighbours.check(len(hosts), cluster_size)
    before = neighbours.overflows()
    try:
        times = await gather_all(
            kernel_ready(docker, h, containers[h], timeout, since.get(h, 0)) for h in hosts
        )
    except AgentFailed as e:
        note = neighbours.overflow_note(before)
        if not note:
            raise
        raise AgentFailed(f"{e.message}{note}", kernel=e.kernel) from e
    return dict(zip(hosts, times, strict=True))
