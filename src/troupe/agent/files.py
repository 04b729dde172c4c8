"""Kernels' files archives on this host: written before a container starts, bind-mounted into
it and unpacked by its entrypoint, removed with the container."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from troupe.agent.kernel import files_archive
from troupe.api.agent import KernelSpec

log = logging.getLogger(__name__)

#: Where kernels' files archives live while their containers do: tmpfs, so the session's keys
#: in them never reach a disk. One file per container, named after it and removed with it: the
#: container's bind mount needs it only to start, but the engine mounts every bind again for
#: ``docker cp`` and refuses if a source is gone.
FILES_DIR = Path("/run/troupe-agent")


def files_path(container_name: str) -> Path:
    return FILES_DIR / f"{container_name}.tar"


def files_tar(spec: KernelSpec) -> Path | None:
    """The kernel's files archive written to a new private file in FILES_DIR; None when that
    cannot be written (then the engine's archive upload is used)."""
    path = files_path(spec.container_name)
    try:
        FILES_DIR.mkdir(mode=0o700, exist_ok=True)
        path.unlink(missing_ok=True)  # left by a container of that name that was not removed
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        log.warning("kernel files go through the engine: %s: %s", FILES_DIR, e.strerror or e)
        return None
    with os.fdopen(fd, "wb") as f:
        f.write(files_archive(spec.files))
    return path


def remove_files(session_id: str) -> None:
    """Removes the files archives of a session's containers (also of those never created)."""
    with contextlib.suppress(OSError):
        for path in FILES_DIR.glob(f"troupe-{session_id[:12]}-*.tar"):
            with contextlib.suppress(OSError):
                path.unlink()
