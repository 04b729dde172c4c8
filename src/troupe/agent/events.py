"""Kernels that stop on their own, read from the engine's event stream.

A batch kernel finishing, a crash or the OOM killer are only visible here; the manager learns
of them as :class:`KernelExit` (with the last lines of output to say why). Containers that
troupe removes die too: the agent skips those it is removing itself (each exit costs an
inspection, a log read and a transaction of the manager, N of them on every teardown), and
the manager decides which of the others matter, by the session's state. A supervised kernel's
failure also starts its container again, held (:mod:`troupe.agent.hold`), as soon as the
engine's report of the death has been read: a held container's own death is no news.

A supervised kernel whose command failed while its container runs on says so itself, on its
report FIFO (:mod:`troupe.agent.reports`, opened here on the engine's ``start`` events): its
exit is reported the same way, and the container held in place.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiodocker
from aiodocker.exceptions import DockerError

from troupe.agent.engine import end_if_out_of_memory, list_containers, summary
from troupe.agent.hold import Holds
from troupe.agent.kernel import made_by
from troupe.agent.logs import last_lines
from troupe.agent.reports import Reports
from troupe.api.agent import LABEL_KERNEL, LABEL_SESSION, ExitHandler, KernelExit

log = logging.getLogger(__name__)

#: Lines of output a KernelExit carries.
LAST_LINES = 20
#: Back-off between reconnections to a broken event stream (first, most), in seconds.
RECONNECT_DELAY = (0.1, 5.0)


class ExitWatcher:
    """Watches the engine's events in a task and hands each kernel exit to ``on_exit``."""

    def __init__(
        self,
        docker: aiodocker.Docker,
        on_exit: ExitHandler,
        removing: Callable[[str], bool] = lambda _: False,
        holds: Holds | None = None,
        owner: str = "",
    ) -> None:
        """``removing``: whether a container (by id) is being removed by this agent;
        ``holds``: where failed supervised kernels are started again, held; ``owner``: this
        agent's instance (:data:`LABEL_AGENT`): the deaths and reports of containers another
        agent made are that agent's (an engine may serve several), never this one's."""
        self._docker = docker
        self._on_exit = on_exit
        self._removing = removing
        self._holds = holds
        self._owner = owner
        self._reports = Reports(self._report)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._watch(), name="agent-events")

    async def close(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._reports.close()

    async def _watch(self) -> None:
        """Reconnects whenever the stream breaks (the engine restarted, the socket closed)."""
        first, most = RECONNECT_DELAY
        delay = first
        while True:
            try:
                async for event in self._events():
                    delay = first
                    await self._handle(event)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("docker event stream ended: %s; reconnecting", e)
            await asyncio.sleep(delay)
            delay = min(delay * 2, most)

    async def _events(self) -> AsyncIterator[dict[str, Any]]:
        # The raw endpoint: aiodocker's events API hides the stream's end, which we must see
        # to reconnect.
        params = {
            "filters": json.dumps(
                {
                    "type": ["container"],
                    "event": ["die", "oom", "start", "destroy"],
                    "label": [LABEL_SESSION],
                }
            )
        }
        async with self._docker._query("events", params=params, timeout=None) as resp:
            # (connected: a start from now on comes as an event)
            self._reports.sync(await self._names())
            while line := await resp.content.readline():
                if line.strip():
                    yield json.loads(line)

    async def _names(self) -> set[str]:
        """The names of the troupe containers this agent made on its engine (other agents' may
        share FILES_DIR, as the hosts of the multi-host test bed do, or the engine)."""
        listed = await list_containers(self._docker, LABEL_SESSION)
        return {
            str(c["Names"][0]).lstrip("/")
            for c in listed
            if c.get("Names") and self._mine(c.get("Labels") or {})
        }

    def _mine(self, labels: dict[str, Any]) -> bool:
        return made_by(labels, self._owner)

    async def _handle(self, event: dict[str, Any]) -> None:
        actor = event.get("Actor") or {}
        cid = actor.get("ID") or event.get("id") or ""
        attrs = actor.get("Attributes") or {}
        if not self._mine(attrs):  # (an event's attributes are the container's labels)
            return
        action, name = event.get("Action"), attrs.get("name", "")
        if action in ("start", "destroy"):
            (self._reports.watch if action == "start" else self._reports.unwatch)(name)
            return
        if self._removing(cid):
            return
        holds = self._holds
        if holds is not None and holds.is_held(cid, name):
            return  # (stopped while it waited for its word: its kernel's exit was reported)
        generation = holds.generation(cid) if holds is not None else 0
        found = await kernel_exit(self._docker, event)
        if found is None:
            return
        exit_, info = found
        # (no await from these checks to the start: a restart or a removal of the container
        # during the reads above makes this death old news for a hold)
        if (
            holds is not None
            and info
            and holds.holds(info, exit_.exit_code, exit_.oom_killed)
            and holds.generation(cid) == generation
            and not self._removing(cid)
        ):
            holds.start(info)
        await self._on_exit(exit_)

    async def _report(self, name: str, status: int, attempt: int) -> None:
        """A supervised kernel's report of its command's failure (:mod:`.reports`): its exit,
        reported as a death's is, and its running container held in place. Not where the
        report is old news: the container stopped or is being removed (a death, if any, is
        the engine's to report), held already, or restarted since (a later attempt set up, or
        a restart during the reads). A container the engine killed a process of for memory
        goes instead: its death reports that, and its restart makes it anew."""
        holds = self._holds
        if holds is None or holds.is_held("", name):  # (a copy of a report handled: no reads)
            return
        info = await _inspect(self._docker, name)
        if info is None:
            return  # (gone; or the engine did not answer: the report's next copy is read)
        cid, state = str(info["Id"]), info.get("State") or {}
        labels = (info.get("Config") or {}).get("Labels") or {}
        session_id, kernel_id = labels.get(LABEL_SESSION), labels.get(LABEL_KERNEL)
        if not (session_id and kernel_id and state.get("Running") and self._mine(labels)):
            return
        if self._removing(cid) or holds.is_held(cid, name) or attempt < holds.attempt(cid):
            return
        if await end_if_out_of_memory(self._docker, cid, state):
            return
        generation = holds.generation(cid)
        lines = await last_lines(self._docker, cid, LAST_LINES)
        # (no await from these checks to the hold: as for a death's)
        if holds.generation(cid) != generation or self._removing(cid) or holds.is_held(cid, name):
            return
        holds.hold_in_place(info)
        exit_ = KernelExit(
            session_id=session_id, kernel_id=kernel_id, exit_code=status, last_logs=lines
        )
        await self._on_exit(exit_)


async def kernel_exit(
    docker: aiodocker.Docker, event: dict[str, Any]
) -> tuple[KernelExit, dict[str, Any] | None] | None:
    """The exit a ``die`` event of a troupe container reports and the container's inspection
    after the death (None where it failed); None for any other event. Both are read before
    anything else is asked of the container (the engine answers nothing of a container while
    it starts it), at once: each waits for the engine to be done with the death."""
    if event.get("Action") != "die":
        return None
    actor = event.get("Actor") or {}
    attrs = actor.get("Attributes") or {}
    cid = actor.get("ID") or event.get("id")
    session_id, kernel_id = attrs.get(LABEL_SESSION), attrs.get(LABEL_KERNEL)
    if not (cid and session_id and kernel_id):
        return None
    oom, error = False, ""
    info, lines = await asyncio.gather(_inspect(docker, cid), last_lines(docker, cid, LAST_LINES))
    if info is not None:
        state = info["State"]
        if state.get("Running"):  # started again since (a restart in place): old news
            return None
        oom = bool(state.get("OOMKilled"))
        error = summary(str(state["Error"])) if state.get("Error") else ""
    exit_ = KernelExit(
        session_id=session_id,
        kernel_id=kernel_id,
        exit_code=int(attrs.get("exitCode", -1)),
        oom_killed=oom,
        error=error,
        last_logs=lines,
    )
    return exit_, info


async def _inspect(docker: aiodocker.Docker, cid: str) -> dict[str, Any] | None:
    try:
        info: dict[str, Any] = await docker.containers.container(cid).show()
    except DockerError:
        return None
    return info
