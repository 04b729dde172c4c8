"""How the Docker engine's failures become domain errors.

aiodocker raises :class:`DockerError` (an HTTP status, ``900`` when the engine cannot be reached,
and the engine's message). Nothing above the agent should know aiodocker, so every engine call
that can fail runs inside one of these context managers and leaves as a
:mod:`troupe.api.errors` class: a step that failed is :class:`AgentFailed`; a container the
engine does not know is :class:`NotFound`; one that is not running is :class:`NotRunning`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from aiodocker.exceptions import DockerError

from troupe.api.errors import AgentFailed, NotFound, NotRunning


def message(e: DockerError) -> str:
    """The engine's own words, without aiodocker's ``[status]`` prefix."""
    return str(getattr(e, "message", None) or e)


@contextlib.contextmanager
def step(what: str = "", *, kernel: str | None = None) -> Iterator[None]:
    """A step on the engine: a failure leaves as ``AgentFailed("<what>: <engine message>")``,
    naming the kernel when one is concerned."""
    try:
        yield
    except DockerError as e:
        text = f"{what}: {message(e)}" if what else message(e)
        raise AgentFailed(text, kernel=kernel) from e


@contextlib.contextmanager
def on_container(container_id: str) -> Iterator[None]:
    """A step on a container the caller names (logs, exec, shell): an id the engine does not
    know is :class:`NotFound`, a stopped container :class:`NotRunning`, anything else
    :class:`AgentFailed`."""
    try:
        yield
    except DockerError as e:
        if e.status == 404:
            raise NotFound.of("container", container_id) from e
        if e.status == 409:  # exec into a stopped, paused or restarting container
            raise NotRunning(f"container {container_id!r}: {message(e)}") from e
        raise AgentFailed(message(e)) from e
