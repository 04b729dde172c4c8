"""Kernels' files archives on this host: written before a container starts, bind-mounted into
it and unpacked by its entrypoint, removed with the container. With each archive, the kernel's
readiness FIFO (``/run/troupe/events``, runner/ready.sh), bind-mounted too, so that the agent
can tell the kernel when all its peers started (:func:`peers_started`); and, for a supervised
kernel, its report FIFO (``/run/troupe/exits``: :mod:`troupe.agent.reports`)."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from troupe.agent.kernel import EVENTS_MOUNT, KernelFiles, files_archive
from troupe.api.agent import FileSpec, KernelSpec
from troupe.api.policies import SUPERVISED_VAR

log = logging.getLogger(__name__)

#: Where kernels' files archives live while their containers do: tmpfs, so the session's keys
#: in them never reach a disk. An archive and a FIFO per container, named after it and removed
#: with it: the container's bind mount needs the archive only to start, but the engine mounts
#: every bind again for ``docker cp`` and refuses if a source is gone.
FILES_DIR = Path("/run/troupe-agent")


#: The marker that tells the kernel's ready.sh that the agent writes "peers" to its readiness
#: FIFO (EVENTS_MOUNT: ready.sh waits on it; the entrypoint writes "started" to it).
SIGNALS = "/run/troupe/agent-signals"
PEERS_LINE = b"peers\n"


def files_path(container_name: str) -> Path:
    return FILES_DIR / f"{container_name}.tar"


def events_path(container_name: str) -> Path:
    return FILES_DIR / f"{container_name}.events"


#: A supervised kernel's report FIFO here is its container's name and this.
REPORTS_SUFFIX = ".exits"


def reports_path(container_name: str) -> Path:
    return FILES_DIR / f"{container_name}{REPORTS_SUFFIX}"


def kernel_files(spec: KernelSpec) -> KernelFiles | None:
    """The kernel's files archive, written to a new private file in FILES_DIR, and its
    readiness FIFO there (left out where it cannot be made: then the kernel makes its own and
    probes its peers until they answer); None when the archive cannot be written (then the
    engine's archive upload is used)."""
    path, events = files_path(spec.container_name), events_path(spec.container_name)
    try:
        FILES_DIR.mkdir(mode=0o700, exist_ok=True)
        path.unlink(missing_ok=True)  # left by a container of that name that was not removed
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        log.warning("kernel files go through the engine: %s: %s", FILES_DIR, e.strerror or e)
        return None
    fifo = _make_fifo(events, spec.hostname)
    reports = reports_path(spec.container_name)
    supervised = spec.env.get(SUPERVISED_VAR) == "1"
    with os.fdopen(fd, "wb") as f:
        f.write(files_archive(_with_fifo(spec.files, fifo)))
    reporting = fifo and supervised and _make_fifo(reports, spec.hostname, "stops on a failure")
    return KernelFiles(path, events if fifo else None, reports if reporting else None)


def rewrite_files(spec: KernelSpec) -> KernelFiles | None:
    """The archive of a running kernel written again in place, for a restart in place: the same
    file (the container's bind mount holds it; a new file of that name would not be seen
    there), its FIFO kept as it is (the same holds). None when there is no archive of it here
    (then the engine's archive upload is used)."""
    path, events = files_path(spec.container_name), events_path(spec.container_name)
    try:
        fifo = stat.S_ISFIFO(events.lstat().st_mode)
    except OSError:
        fifo = False
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "wb") as f:
        f.write(files_archive(_with_fifo(spec.files, fifo)))
    return KernelFiles(path, events if fifo else None)


def _with_fifo(files: list[FileSpec], fifo: bool) -> list[FileSpec]:
    """With the agent's FIFO, mounted in the place of the kernel's own, the kernel's own is
    left out and the marker that says to wait for "peers" put in."""
    if not fifo:
        return files
    return [f for f in files if f.path != EVENTS_MOUNT] + [FileSpec(path=SIGNALS, content="")]


def _make_fifo(path: Path, hostname: str, without: str = "probes its peers") -> bool:
    """``without``: what the kernel does without this FIFO (for the warning)."""
    try:
        path.unlink(missing_ok=True)
        os.mkfifo(path, 0o600)
    except OSError as e:
        log.warning("kernel %s %s: no FIFO: %s", hostname, without, e.strerror or e)
        return False
    return True


@contextlib.contextmanager
def peers_started(fifos: list[Path]) -> Iterator[None]:
    """Tells the kernels of these FIFOs that every kernel of their session started, so they
    probe their peers now (once), not every 10-50 ms while they wait. The line stays in each
    FIFO while inside (a FIFO's data lives only while some end of it is open): the kernel may
    not have opened it yet. A FIFO that cannot be written to is skipped: that kernel starts
    probing on its own a little later (runner/ready.sh PEERS_FALLBACK)."""
    fds = []
    try:
        for path in fifos:
            try:  # (read-write: never blocks, never fails for want of a reader)
                fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW)
            except OSError:
                continue
            fds.append(fd)
            with contextlib.suppress(OSError):
                os.write(fd, PEERS_LINE)
        yield
    finally:
        for fd in fds:
            os.close(fd)


def discard(container_name: str) -> None:
    """Removes one container's archive and FIFO (its creation failed)."""
    files_path(container_name).unlink(missing_ok=True)
    events_path(container_name).unlink(missing_ok=True)
    reports_path(container_name).unlink(missing_ok=True)


def remove_files(session_id: str) -> None:
    """Removes the files archives and FIFOs of a session's containers (also of those never
    created)."""
    with contextlib.suppress(OSError):
        for path in FILES_DIR.glob(f"troupe-{session_id[:12]}-*"):
            if path.suffix in (".tar", ".events", REPORTS_SUFFIX, ".held"):
                with contextlib.suppress(OSError):
                    path.unlink()
