"""Supervised kernels' reports of their commands' failures, read from their report FIFOs.

A supervised kernel whose command fails (a non-zero status, no stop asked for) does not end its
container: its supervisor writes ``exit STATUS ATTEMPT`` on the kernel's report FIFO
(``/run/troupe/exits``; its host end in FILES_DIR, made by :mod:`.files`) and waits, held,
for the agent's word (runner/entrypoint.sh). The agent holds an end of every such FIFO open
and hands each line on (:class:`troupe.agent.events.ExitWatcher` reports it as the kernel's
exit): the restart in place that may follow needs no new start of that container, which was
most of a restart's time at two kernels (docs/performance.md).

FIFOs are found by their container's name: opened when the engine says a troupe container
started, and those of all its troupe containers at each (re)connection of the event stream (an
agent restarted meanwhile reads what waited there: a line lives while an end is open, and the
supervisor keeps its end open until its word); closed when the engine says the container was
destroyed, or is gone at a reconnection. Only the containers this agent made
(:class:`~troupe.agent.events.ExitWatcher` asks it to watch no other): agents sharing
FILES_DIR (the multi-host test bed's) or an engine (two managers') never read each other's,
whose lines a read here would take from their agent. Reads are bounded
whatever a kernel writes: a line longer than :data:`LINE_MAX` is cut to its end, anything but a
well-formed report is ignored, and a container has one report handled at a time (the
supervisor writes its report again every few seconds while it waits: copies of one handled are
dropped as held).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import stat
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from troupe.agent.files import FILES_DIR, REPORTS_SUFFIX

log = logging.getLogger(__name__)

#: The longest line kept (a report is ``exit 255 2147483647``).
LINE_MAX = 64
#: A report: the command's status (1-255) and the attempt it ended (TROUPE_RESTART_COUNT).
REPORT = re.compile(rb"exit ([1-9][0-9]{0,2}) ([0-9]{1,10})")

#: Called with the container's name, the status and the attempt of each report.
OnReport = Callable[[str, int, int], Coroutine[Any, Any, None]]


def parse(line: bytes) -> tuple[int, int] | None:
    """(status, attempt) of a report line; None for anything else."""
    m = REPORT.fullmatch(line.strip())
    if m is None or int(m[1]) > 255:
        return None
    return int(m[1]), int(m[2])


class Reports:
    """The agent's ends of its kernels' report FIFOs (see the module's docstring)."""

    def __init__(self, on_report: OnReport, directory: Path = FILES_DIR) -> None:
        self._on_report = on_report
        self._dir = directory
        #: container name -> the agent's end of its FIFO (read-write: never an end of file)
        self._fds: dict[str, int] = {}
        #: container name -> the bytes after its last newline (at most LINE_MAX)
        self._rest: dict[str, bytes] = {}
        #: container name -> its report being handled (one at a time: copies wait or go)
        self._pending: dict[str, asyncio.Task[None]] = {}

    def watch(self, name: str) -> None:
        """Reads the container's report FIFO from now on, where it has one (again where the
        FIFO of that name is a new one: a container made anew under its name)."""
        if "/" in name:
            return
        path = self._dir / f"{name}{REPORTS_SUFFIX}"
        if name in self._fds:
            if _same(self._fds[name], path):
                return
            self.unwatch(name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError:
            return  # (none: not supervised, or made before reports)
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.close(fd)
            return
        self._fds[name] = fd
        asyncio.get_running_loop().add_reader(fd, self._readable, name)

    def unwatch(self, name: str) -> None:
        fd = self._fds.pop(name, None)
        self._rest.pop(name, None)
        if fd is not None:
            asyncio.get_running_loop().remove_reader(fd)
            os.close(fd)

    def sync(self, names: set[str]) -> None:
        """The report FIFOs of these containers (the engine's, all of them) read, any other's
        closed (only this agent's engine's: other agents' may share the directory)."""
        for name in [n for n in self._fds if n not in names]:
            self.unwatch(name)
        for name in names:
            self.watch(name)

    def close(self) -> None:
        for name in list(self._fds):
            self.unwatch(name)
        for task in self._pending.values():
            task.cancel()

    def _readable(self, name: str) -> None:
        fd = self._fds.get(name)
        if fd is None:
            return
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return
        except OSError as e:
            log.warning("report FIFO of %s: %s", name, e.strerror or e)
            self.unwatch(name)
            return
        *lines, rest = (self._rest.get(name, b"") + data).split(b"\n")
        self._rest[name] = rest[-LINE_MAX:]
        for line in lines:
            report = parse(line[-LINE_MAX:])
            if report is not None and name not in self._pending:  # (a copy meanwhile: goes)
                task = asyncio.create_task(self._on_report(name, *report), name=f"report-{name}")
                self._pending[name] = task
                task.add_done_callback(lambda t, name=name: self._done(name, t))  # type: ignore[misc]

    def _done(self, name: str, task: asyncio.Task[None]) -> None:
        if self._pending.get(name) is task:
            del self._pending[name]
        if not task.cancelled() and (e := task.exception()) is not None:
            log.warning("a report of %s was not handled (its next copy may be): %s", name, e)


def _same(fd: int, path: Path) -> bool:
    """Whether an open FIFO is still the one at ``path``."""
    try:
        now, held = path.stat(), os.fstat(fd)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)
