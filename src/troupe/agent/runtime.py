"""The kernel runtime: OpenSSH, setpriv and a static busybox, self-contained, that the agent
mounts read-only into every kernel so that any Linux x86-64 image works, even one without
``/bin/sh`` (docs/contract.md, "What troupe adds to an image").

``scripts/build-runtime.sh`` builds it on each host (set-up does) into
``/var/cache/troupe/runtime/<key>``, with ``current`` pointing at the newest. The agent looks
for it once per process: ``TROUPE_RUNTIME_DIR`` when set (empty: none), else ``current``. It
mounts the directory ``current`` points to, so a kernel keeps its runtime when a new one is
built. Without a runtime, kernels work as before it existed: the image needs ``/bin/sh``,
``tar`` and its own sshd.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiodocker
from aiodocker.exceptions import DockerError

from troupe.api.errors import Invalid

log = logging.getLogger(__name__)

#: Where the runtime appears in every kernel.
RUNTIME_MOUNT = "/opt/troupe-runtime"
#: The runtime's shell (busybox): it starts the runner's scripts, which go on under the
#: image's own ``/bin/sh`` where there is one (runner/entrypoint.sh).
SHELL = f"{RUNTIME_MOUNT}/bin/sh"
#: The runtime the agent uses unless ``TROUPE_RUNTIME_DIR`` says otherwise.
DEFAULT_DIR = Path("/var/cache/troupe/runtime/current")
ENV = "TROUPE_RUNTIME_DIR"


def check_dir(path: Path) -> str | None:
    """The directory a runtime path names (links resolved), or None when no complete runtime
    is there (it has a ``manifest`` and an executable ``bin/sh``)."""
    real = path.resolve()
    if (real / "manifest").is_file() and os.access(real / "bin" / "sh", os.X_OK):
        return str(real)
    return None


@functools.cache
def host_dir() -> str | None:
    """This host's runtime (looked for once per process), or None."""
    configured = os.environ.get(ENV)
    path = Path(configured) if configured is not None else DEFAULT_DIR
    found = check_dir(path) if str(path) else None
    if found:
        log.info("kernel runtime: %s", found)
    else:
        log.warning(
            "no kernel runtime at %s (scripts/setup.sh builds it): images need /bin/sh, tar "
            "and their own sshd",
            path,
        )
    return found


def shell(runtime: str | None) -> str:
    """The program that starts the runner's scripts in a kernel given ``runtime`` (or not)."""
    return SHELL if runtime else "/bin/sh"


def command(cmd: list[str], runtime: str | None) -> list[str]:
    """A runner command (``/bin/sh SCRIPT ...``) as it runs in a kernel given ``runtime``."""
    if runtime and cmd[:1] == ["/bin/sh"]:
        return [SHELL, *cmd[1:]]
    return cmd


def bind(runtime: str | None) -> list[str]:
    """The engine's bind of ``runtime`` (none without one)."""
    return [f"{runtime}:{RUNTIME_MOUNT}:ro"] if runtime else []


#: The platform of every kernel: the runtime's programs, and what the contract promises, are
#: x86-64 Linux (an image for another one would start, its programs failing one by one).
PLATFORM = "linux/amd64"


def platform_error(image: str, info: Mapping[str, Any]) -> str | None:
    """Why the image (the engine's inspection of it) cannot run as a kernel, or None."""
    found = f"{info.get('Os') or 'linux'}/{info.get('Architecture') or 'amd64'}"
    if found == PLATFORM:
        return None
    return (
        f"image {image} is built for {found}; troupe runs {PLATFORM} (x86-64 Linux) kernels: "
        f"use the image's {PLATFORM} variant"
    )


async def check_platform(docker: aiodocker.Docker, image: str) -> None:
    """:class:`Invalid` (field ``image``) for an image of another platform. An image the
    engine does not have is for the create itself to report."""
    try:
        info = await docker.images.inspect(image)
    except DockerError:
        return
    if why := platform_error(image, info):
        raise Invalid(why, field="image")
